// Counts and lists in words for messages a person reads: "1 window", "2 windows", "a, b and c".
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace stretch {

// "n noun" with the noun's plural, made by adding "s" unless `plural` is given, when n != 1.
inline std::string Counted(int64_t n, std::string_view noun, std::string_view plural = {}) {
  if (n == 1) return fmt::format("1 {}", noun);
  return plural.empty() ? fmt::format("{} {}s", n, noun) : fmt::format("{} {}", n, plural);
}

// Whether a byte shows as itself in a message: printable ASCII, space included.
inline bool IsPrintableAscii(char c) {
  const auto b = static_cast<unsigned char>(c);
  return b >= 0x20 && b < 0x7f;
}

// Bytes read from a file, shown in a message or a table: each byte that is not printable ASCII
// becomes `stand_in`, so that no control byte or partial UTF-8 reaches a terminal or a page.
inline std::string PrintableAscii(std::string_view bytes, char stand_in) {
  std::string out(bytes);
  for (char& c : out) c = IsPrintableAscii(c) ? c : stand_in;
  return out;
}

// "a", "a and b", "a, b and c".
inline std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += i == 0 ? "" : i + 1 == names.size() ? " and " : ", ";
    out += names[i];
  }
  return out;
}

}  // namespace stretch
