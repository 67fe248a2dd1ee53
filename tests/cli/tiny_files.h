// A tiny random llama2.c model, a character-level llama2.c tokenizer and a text, written once per
// test program to a temporary folder, for CLI tests that need no ../shared: L = 64, a 40-token
// vocabulary, 4 RoPE frequency pairs.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "src/core/rng.h"
#include "src/io/llama2c.h"
#include "tests/testing/files.h"
#include "tests/testing/random_model.h"

namespace stretch::testing {

// Pieces of the tiny tokenizer: <unk>, <s>, </s>, then one character each. No piece has two
// characters, so no merges: a text of n characters (all from the list) is n + 1 tokens (the
// dummy-prefix space first).
inline constexpr const char kChars[] = " abcdefghijklmnopqrstuvwxyz0123456789";
static_assert(sizeof(kChars) - 1 + 3 == 40, "the tiny model's vocabulary is 40 tokens");

struct TinyFiles {
  std::string dir, model, tok, text;
};

inline void WriteTokenizer(const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  auto i32 = [&out](int32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); };
  auto f32 = [&out](float v) { out.write(reinterpret_cast<const char*>(&v), 4); };
  i32(5);  // max_token_length
  for (const char* special : {"<unk>", "<s>", "</s>"}) {
    f32(0.0f);
    i32(static_cast<int32_t>(std::strlen(special)));
    out.write(special, static_cast<std::streamsize>(std::strlen(special)));
  }
  for (size_t i = 0; i + 1 < sizeof(kChars); ++i) {
    f32(-static_cast<float>(i));
    i32(1);
    out.write(&kChars[i], 1);
  }
}

// Written once for the whole program (each test runs the command several times).
inline const TinyFiles& Files() {
  static const TinyFiles files = [] {
    TinyFiles f;
    f.dir = ProgramTempDir("stretch_cli_tiny_").string();
    std::filesystem::create_directories(f.dir);
    f.model = f.dir + "/tiny.bin";
    f.tok = f.dir + "/tiny_tok.bin";
    f.text = f.dir + "/tiny.txt";
    SaveLlama2cVersion1(RandomModel(TinyConfig(), 41), f.model);
    WriteTokenizer(f.tok);
    Rng rng(42);
    std::string text;
    for (int i = 0; i < 1199; ++i) text += kChars[1 + rng.NextU64() % (sizeof(kChars) - 2)];
    std::ofstream(f.text) << text;  // 1200 tokens with the dummy-prefix space
    return f;
  }();
  return files;
}

}  // namespace stretch::testing
