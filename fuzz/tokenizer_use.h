// Uses a tokenizer read from fuzzed bytes the way the commands do (encode a prompt, decode ids as
// they are generated), so that a vocabulary the parser accepted but the tokenizer cannot handle
// (a piece table with holes, an id out of range) shows up as a finding too.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "src/io/tokenizer/text_tokenizer.h"

namespace stretch::fuzz {

// A text with what tokenizers trip on: ASCII, spaces, multi-byte UTF-8, U+2581, invalid UTF-8,
// a special token's spelling, a NUL (hence the length given: a NUL would end a C string).
inline constexpr char kProbeChars[] =
    "Hello, w\xC3\xB6rld!  12 \xE2\x96\x81x <s></s> \xFF\xC3 end\0.";
inline constexpr std::string_view kProbeText(kProbeChars, sizeof(kProbeChars) - 1);

inline void UseTokenizer(const TextTokenizer& t) {
  const int vocab = t.vocab_size();
  std::vector<int> ids = t.EncodePrompt(kProbeText);
  for (int i = 0; i < vocab && i < 48; ++i) ids.push_back(i);
  if (vocab > 0) ids.push_back(vocab - 1);
  // The decoder may keep a view of the prompt: it lives as long as the decoder.
  const std::vector<int> prompt;
  std::unique_ptr<TokenTextDecoder> decoder = t.Decoder(prompt);
  std::string text;
  for (int id : ids) {
    if (id >= 0 && id < vocab) text += decoder->Next(id);
  }
  text += decoder->Finish();
  (void)t.Name();
  (void)t.ProtocolText();
}

}  // namespace stretch::fuzz
