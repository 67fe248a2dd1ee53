// stories260K (llama2.c's 260K-parameter TinyStories model) and the TinyStories text from
// ../shared, loaded once per test: for the tests that check an exact path on a real model.
// Call STRETCH_REQUIRE_SHARED(kStoriesModel) and STRETCH_REQUIRE_SHARED(kStoriesText) first.
#pragma once

#include <algorithm>
#include <vector>

#include "src/io/llama2c.h"
#include "src/io/text.h"
#include "src/io/tokenizer/tokenizer.h"
#include "tests/testing/shared.h"

namespace stretch::testing {

inline constexpr const char* kStoriesModel = "models/stories260K/stories260K.bin";
inline constexpr const char* kStoriesTok = "models/stories260K/tok512.bin";
inline constexpr const char* kStoriesText = "data/tinystories";

struct Stories {
  Model model;
  TextStream text;  // the TinyStories text in the model's tokenizer
  // BOS, then the first n - 1 tokens of the text.
  std::vector<int> Tokens(int n) const {
    std::vector<int> t(static_cast<size_t>(n));
    t[0] = 1;  // llama2.c's BOS
    std::copy(text.tokens.begin(), text.tokens.begin() + (n - 1), t.begin() + 1);
    return t;
  }
};

inline Stories LoadStories() {
  const Tokenizer tok = Tokenizer::LoadLlama2c(SharedPath(kStoriesTok));
  return Stories{LoadLlama2c(SharedPath(kStoriesModel)),
                 EncodeTextPath(SharedPath(kStoriesText), tok)};
}

}  // namespace stretch::testing
