// How text becomes a token stream for scoring. A file is read as bytes and encoded as a whole with
// the tokenizer (one dummy-prefix space at its start, newlines and blank lines kept as they are in
// the file, no BOS/EOS inserted). A directory means its *.txt files in name order, each encoded
// on its own and the streams concatenated.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "src/io/tokenizer/tokenizer.h"

namespace stretch {

struct TextStream {
  std::vector<int> tokens;
  std::vector<std::string> files;  // the files read, in order
  int64_t bytes = 0;
};

// A whole file's bytes; throws stretch::Error naming the file when it cannot be opened or read,
// or is not a regular file (a device, a FIFO: src/core/input_file.h), saying it expected
// `expected` ("a text file").
std::string ReadWholeFile(const std::string& path, std::string_view expected);

// s with every occurrence of `from` (not empty) replaced by `to`, left to right.
std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to);
// A piece of text for error messages: in double quotes, control bytes, quotes and backslashes as
// \xNN, at most 40 bytes shown ("..." after).
std::string Quote(std::string_view s);

// Throws stretch::Error for a missing path, an unreadable or empty file, a directory without
// *.txt files, a path that is neither a regular file nor a directory (/dev/zero, a FIFO).
TextStream EncodeTextPath(const std::string& path, const Tokenizer& tokenizer);
// The same with any tokenizer: `encode` turns one file's whole text into ids (no BOS/EOS).
TextStream EncodeTextPath(const std::string& path,
                          const std::function<std::vector<int>(const std::string&)>& encode);

// Reads whitespace-separated token ids, one sequence per non-empty line. Each id must be an
// integer in [0, vocab_size); the error names the line and column.
std::vector<std::vector<int>> ReadTokenFile(const std::string& path, int vocab_size);

std::string TextProtocolText();

}  // namespace stretch
