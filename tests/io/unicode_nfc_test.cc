#include "src/io/tokenizer/unicode_nfc.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "src/io/tokenizer/bpe_pretokenizer.h"
#include "src/io/tokenizer/unicode_class.h"

namespace stretch {
namespace {

std::string Utf8(std::u32string_view cps) {
  std::string out;
  for (const char32_t cp : cps) AppendUtf8(cp, out);
  return out;
}

TEST(Nfc, ComposesReordersAndKeepsWhatIsAlreadyNormal) {
  EXPECT_EQ(NfcNormalize("plain ASCII\n"), "plain ASCII\n");
  EXPECT_EQ(NfcNormalize(Utf8(U"cafe\u0301")), Utf8(U"caf\u00E9"));  // e + acute -> é
  EXPECT_EQ(NfcNormalize(Utf8(U"caf\u00E9")), Utf8(U"caf\u00E9"));
  // Marks in either order reach the same composite: dot below (220) sorts before circumflex (230).
  EXPECT_EQ(NfcNormalize(Utf8(U"a\u0302\u0323")), Utf8(U"\u1EAD"));
  EXPECT_EQ(NfcNormalize(Utf8(U"a\u0323\u0302")), Utf8(U"\u1EAD"));
  // Singletons decompose and never recompose: the ohm sign is omega.
  EXPECT_EQ(NfcNormalize(Utf8(U"\u2126")), Utf8(U"\u03A9"));
  // Hangul by arithmetic: L + V + T -> one syllable, and a syllable stays.
  EXPECT_EQ(NfcNormalize(Utf8(U"\u1100\u1161\u11A8")), Utf8(U"\uAC01"));
  EXPECT_EQ(NfcNormalize(Utf8(U"\uAC01")), Utf8(U"\uAC01"));
  // A mark blocked by another of the same class stays apart: a + acute + acute -> á + acute.
  EXPECT_EQ(NfcNormalize(Utf8(U"a\u0301\u0301")), Utf8(U"\u00E1\u0301"));
  // A leading mark stays; bytes that are not UTF-8 are kept and never combine.
  EXPECT_EQ(NfcNormalize(Utf8(U"\u0301e")), Utf8(U"\u0301e"));
  EXPECT_EQ(NfcNormalize("e\xFF" + Utf8(U"\u0301")), "e\xFF" + Utf8(U"\u0301"));
  EXPECT_EQ(NfcVersion(), UnicodeClassVersion());
}

// The Unicode Consortium's own conformance file (NormalizationTest.txt, in Debian's
// unicode-data package, which `scripts/setup.sh sanitize` installs): for every line, NFC(c1) =
// NFC(c2) = NFC(c3) = c2 and NFC(c4) = NFC(c5) = c4; and every code point not in part 1 is its own
// NFC.
TEST(Nfc, PassesTheUnicodeConformanceFile) {
  const std::string path = "/usr/share/unicode/NormalizationTest.txt.bz2";
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << path << " missing (Debian's unicode-data; scripts/setup.sh sanitize)";
  }
  FILE* pipe = popen(("bzcat '" + path + "'").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string text;
  char buf[1 << 16];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, got);
  ASSERT_EQ(pclose(pipe), 0);
  auto field = [](std::string_view f) {
    std::u32string cps;
    size_t at = 0;
    while (at < f.size()) {
      const size_t end = std::min(f.find(' ', at), f.size());
      if (end > at)
        cps += static_cast<char32_t>(std::stoul(std::string(f.substr(at, end - at)), nullptr, 16));
      at = end + 1;
    }
    return Utf8(cps);
  };
  int lines = 0, failed = 0;
  std::vector<bool> in_part1(0x110000, false);
  bool part1 = false;
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line(text.data() + at, end - at);
    at = end + 1;
    if (line.rfind("@Part", 0) == 0) {
      part1 = line.rfind("@Part1", 0) == 0;
      continue;
    }
    if (line.empty() || line[0] == '#' || line[0] == '@') continue;
    std::vector<std::string> c;
    size_t from = 0;
    for (int k = 0; k < 5; ++k) {
      const size_t semi = line.find(';', from);
      c.push_back(field(line.substr(from, semi - from)));
      from = semi + 1;
    }
    if (part1)
      in_part1[std::stoul(std::string(line.substr(0, line.find(';'))), nullptr, 16)] = true;
    ++lines;
    const bool ok = NfcNormalize(c[0]) == c[1] && NfcNormalize(c[1]) == c[1] &&
                    NfcNormalize(c[2]) == c[1] && NfcNormalize(c[3]) == c[3] &&
                    NfcNormalize(c[4]) == c[3];
    if (!ok && ++failed <= 5) ADD_FAILURE() << "NormalizationTest line: " << line;
  }
  EXPECT_GT(lines, 15000);
  EXPECT_EQ(failed, 0);
  int others = 0;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (in_part1[cp] || (cp >= 0xD800 && cp < 0xE000)) continue;
    const std::string s = Utf8(std::u32string(1, cp));
    if (NfcNormalize(s) != s && ++others <= 5) ADD_FAILURE() << "U+" << std::hex << unsigned(cp);
  }
  EXPECT_EQ(others, 0);
}

}  // namespace
}  // namespace stretch
