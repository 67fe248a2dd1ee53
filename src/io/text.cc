#include "src/io/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "src/core/error.h"
#include "src/core/input_file.h"

namespace stretch {
namespace fs = std::filesystem;

constexpr std::string_view kTextInput = "a text file or a directory of *.txt files";

std::string ReadWholeFile(const std::string& path, std::string_view expected) {
  return ReadInputFile(path, expected);
}

TextStream EncodeTextPath(const std::string& path,
                          const std::function<std::vector<int>(const std::string&)>& encode) {
  TextStream out;
  if (CheckRegularInputOrDirectory(path, kTextInput)) {
    for (const auto& entry : fs::directory_iterator(path)) {
      if (entry.is_regular_file() && entry.path().extension() == ".txt") {
        out.files.push_back(entry.path().string());
      }
    }
    std::sort(out.files.begin(), out.files.end());
    if (out.files.empty()) Fail("{}: directory has no *.txt files to score", path);
  } else {
    out.files.push_back(path);
  }
  for (const std::string& file : out.files) {
    const std::string text = ReadWholeFile(file, kTextInput);
    if (text.empty()) Fail("{}: file is empty, expected text", file);
    out.bytes += static_cast<int64_t>(text.size());
    const std::vector<int> ids = encode(text);
    out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
  }
  return out;
}

TextStream EncodeTextPath(const std::string& path, const Tokenizer& tokenizer) {
  return EncodeTextPath(path, [&tokenizer](const std::string& text) {
    return tokenizer.Encode(text, /*bos=*/false, /*eos=*/false);
  });
}

std::vector<std::vector<int>> ReadTokenFile(const std::string& path, int vocab_size) {
  const std::string text = ReadWholeFile(path, "a text file of token ids (one sequence per line)");
  std::vector<std::vector<int>> sequences;
  size_t line_start = 0;
  int line_no = 0;
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string::npos) line_end = text.size();
    ++line_no;
    std::vector<int> seq;
    size_t i = line_start;
    while (i < line_end) {
      while (i < line_end && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r')) ++i;
      if (i >= line_end) break;
      size_t j = i;
      while (j < line_end && text[j] != ' ' && text[j] != '\t' && text[j] != '\r') ++j;
      long long id = 0;
      const auto [ptr, err] = std::from_chars(text.data() + i, text.data() + j, id);
      if (err != std::errc() || ptr != text.data() + j) {
        Fail("{}:{}:{}: found '{}', expected a token id (an integer)", path, line_no,
             i - line_start + 1, text.substr(i, std::min<size_t>(j - i, 40)));
      }
      if (id < 0 || id >= vocab_size) {
        Fail("{}:{}:{}: token id {} is outside the vocabulary, expected 0..{}", path, line_no,
             i - line_start + 1, id, vocab_size - 1);
      }
      seq.push_back(static_cast<int>(id));
      i = j;
    }
    if (!seq.empty()) sequences.push_back(std::move(seq));
    line_start = line_end + 1;
  }
  if (sequences.empty()) Fail("{}: no token ids found, expected one sequence per line", path);
  return sequences;
}

std::string TextProtocolText() {
  return "Text files are encoded whole: one leading dummy-prefix space (as SentencePiece adds), "
         "newlines and blank lines kept as in the file, no BOS or EOS inside the stream. A "
         "directory means its *.txt files in name order, each encoded on its own, concatenated.";
}

std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  for (size_t at = 0; at < s.size();) {
    if (s.compare(at, from.size(), from) == 0) {
      out += to;
      at += from.size();
    } else {
      out += s[at++];
    }
  }
  return out;
}

// A piece for messages: quoted, control bytes escaped, at most 40 bytes shown.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < 40; ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x20 || b == 0x7F || b == '"' || b == '\\') {
      out += fmt::format("\\x{:02X}", b);
    } else {
      out += static_cast<char>(b);
    }
  }
  if (s.size() > 40) out += "...";
  return out + "\"";
}

}  // namespace stretch
