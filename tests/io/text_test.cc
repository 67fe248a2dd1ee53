// How text becomes tokens for scoring (src/io/text.h): EncodeTextPath with a file and with a
// directory (its *.txt files in name order, each encoded on its own, concatenated), its errors,
// and ReadTokenFile. The encode function is a recording stand-in, so no tokenizer file is needed:
// it maps a text to its bytes' values and remembers every text it was given.
#include "src/io/text.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

using testing::ErrorOf;
using testing::WriteBytes;

// One id per byte (its unsigned value), and a log of the texts encoded, in call order.
struct RecordingEncoder {
  std::vector<std::string> calls;
  std::function<std::vector<int>(const std::string&)> Fn() {
    return [this](const std::string& text) {
      calls.push_back(text);
      std::vector<int> ids;
      for (unsigned char c : text) ids.push_back(c);
      return ids;
    };
  }
};

std::vector<int> ByteIds(const std::string& text) {
  std::vector<int> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

class TextTest : public testing::TempDirTest {
 protected:
  TextTest() : TempDirTest("stretch_text_") {}
};

// ---- EncodeTextPath -----------------------------------------------------------------------------

TEST_F(TextTest, FileIsEncodedWholeAndByteExact) {
  // Blank lines, a CRLF, a tab, trailing spaces and non-ASCII bytes reach the encoder untouched,
  // in one call (no splitting by line, nothing stripped or added).
  const std::string text = "Once upon a time.\n\n\tThe end.  \r\ncaf\xc3\xa9\n";
  const std::string path = File("story.txt", text);
  RecordingEncoder enc;
  const TextStream s = EncodeTextPath(path, enc.Fn());
  ASSERT_EQ(enc.calls.size(), 1u);
  EXPECT_EQ(enc.calls[0], text);
  EXPECT_EQ(s.files, std::vector<std::string>{path});
  EXPECT_EQ(s.bytes, static_cast<int64_t>(text.size()));
  EXPECT_EQ(s.tokens, ByteIds(text));
}

TEST_F(TextTest, FileNamedAnythingIsReadWhenGivenDirectly) {
  // Only a directory filters by *.txt; a file the user names is read whatever its extension.
  const std::string path = File("notes.md", "# title\n");
  RecordingEncoder enc;
  const TextStream s = EncodeTextPath(path, enc.Fn());
  EXPECT_EQ(s.files, std::vector<std::string>{path});
  EXPECT_EQ(s.tokens, ByteIds("# title\n"));
}

TEST_F(TextTest, DirectoryMeansItsTxtFilesInNameOrderEachEncodedAlone) {
  File("b.txt", "bee\n");
  File("a.txt", "ay");
  File("10.txt", "ten");  // name order is byte order: "10.txt" < "9.txt" < "a.txt"
  File("9.txt", "nine\n\n");
  File("readme.md", "not text to score");
  File("a.txt.bak", "not text either");
  File("txt", "no extension");
  std::filesystem::create_directory(dir_ / "sub.txt");  // a directory, even named *.txt
  File("sub.txt/inner.txt", "not read: directories are not searched recursively");
  RecordingEncoder enc;
  const TextStream s = EncodeTextPath(dir_.string(), enc.Fn());
  const std::vector<std::string> texts = {"ten", "nine\n\n", "ay", "bee\n"};
  EXPECT_EQ(s.files, (std::vector<std::string>{Path("10.txt"), Path("9.txt"), Path("a.txt"),
                                               Path("b.txt")}));
  // Each file encoded on its own: one call per file, never the files joined into one text.
  EXPECT_EQ(enc.calls, texts);
  std::vector<int> expected;
  int64_t bytes = 0;
  for (const std::string& t : texts) {
    const std::vector<int> ids = ByteIds(t);
    expected.insert(expected.end(), ids.begin(), ids.end());
    bytes += static_cast<int64_t>(t.size());
  }
  EXPECT_EQ(s.tokens, expected);
  EXPECT_EQ(s.bytes, bytes);
}

TEST_F(TextTest, StreamsOfFilesAreConcatenatedAsTheEncoderReturnsThem) {
  // An encoder whose ids are not derived from bytes (a dummy-prefix id, then the text's length):
  // the stream is exactly its outputs one after the other, nothing inserted between files.
  File("x.txt", "12345");
  File("y.txt", "ab");
  const TextStream s = EncodeTextPath(dir_.string(), [](const std::string& text) {
    return std::vector<int>{-1, static_cast<int>(text.size())};
  });
  EXPECT_EQ(s.tokens, (std::vector<int>{-1, 5, -1, 2}));
  EXPECT_EQ(s.bytes, 7);
}

TEST_F(TextTest, MissingPathIsNamed) {
  const std::string path = Path("nowhere/stories.txt");
  RecordingEncoder enc;
  EXPECT_EQ(
      ErrorOf([&] { EncodeTextPath(path, enc.Fn()); }),
      path + ": no such file or directory: expected a text file or a directory of *.txt files");
  EXPECT_TRUE(enc.calls.empty());
}

TEST_F(TextTest, EmptyFileIsAnError) {
  const std::string path = File("empty.txt", "");
  RecordingEncoder enc;
  EXPECT_EQ(ErrorOf([&] { EncodeTextPath(path, enc.Fn()); }),
            path + ": file is empty, expected text");
  EXPECT_TRUE(enc.calls.empty());
}

TEST_F(TextTest, EmptyFileInsideADirectoryIsNamed) {
  File("a.txt", "fine");
  const std::string empty = File("b.txt", "");
  RecordingEncoder enc;
  EXPECT_EQ(ErrorOf([&] { EncodeTextPath(dir_.string(), enc.Fn()); }),
            empty + ": file is empty, expected text");
}

TEST_F(TextTest, DirectoryWithoutTxtFilesIsNamed) {
  const std::string dir = dir_.string();
  RecordingEncoder enc;
  EXPECT_EQ(ErrorOf([&] { EncodeTextPath(dir, enc.Fn()); }),
            dir + ": directory has no *.txt files to score");  // empty
  File("story.md", "text, but not *.txt");
  std::filesystem::create_directory(dir_ / "more.txt");
  EXPECT_EQ(ErrorOf([&] { EncodeTextPath(dir, enc.Fn()); }),
            dir + ": directory has no *.txt files to score");
  EXPECT_TRUE(enc.calls.empty());
}

TEST(TextProtocol, DescribesWhatEncodeTextPathDoes) {
  const std::string text = TextProtocolText();
  for (const char* fact : {"dummy-prefix space", "no BOS or EOS", "*.txt", "name order",
                           "each encoded on its own", "concatenated"}) {
    EXPECT_NE(text.find(fact), std::string::npos) << fact << " in: " << text;
  }
}

// ---- ReadTokenFile ------------------------------------------------------------------------------

TEST_F(TextTest, TokenFileGivesOneSequencePerNonEmptyLine) {
  // Spaces, tabs and CRLF line ends separate ids; blank and whitespace-only lines are skipped; the
  // last line needs no newline; ids 0 and vocab_size - 1 are the ends of the allowed range.
  const std::string path = File("ids.txt", "0 1 2\r\n\n \t \n  31\t7   8\r\n5\n\n30 0031");
  const std::vector<std::vector<int>> seqs = ReadTokenFile(path, 32);
  ASSERT_EQ(seqs.size(), 4u);
  EXPECT_EQ(seqs[0], (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(seqs[1], (std::vector<int>{31, 7, 8}));
  EXPECT_EQ(seqs[2], (std::vector<int>{5}));
  EXPECT_EQ(seqs[3], (std::vector<int>{30, 31}));  // leading zeros: still decimal 31
}

TEST_F(TextTest, TokenFileErrorNamesLineAndColumnOfANonInteger) {
  // Line numbers count every line, blank ones included; columns are 1-based bytes.
  const std::string path = File("bad.txt", "1 2\n\n\n4  5 x7\n");
  EXPECT_EQ(ErrorOf([&] { ReadTokenFile(path, 10); }),
            path + ":4:6: found 'x7', expected a token id (an integer)");
  File("bad.txt", "3 1.5\n");  // a number, but not an integer: the whole word is shown
  EXPECT_EQ(ErrorOf([&] { ReadTokenFile(path, 10); }),
            path + ":1:3: found '1.5', expected a token id (an integer)");
  File("bad.txt", "\t+3\n");
  EXPECT_EQ(ErrorOf([&] { ReadTokenFile(path, 10); }),
            path + ":1:2: found '+3', expected a token id (an integer)");
  File("bad.txt", "1,2\n");  // commas are not separators
  EXPECT_EQ(ErrorOf([&] { ReadTokenFile(path, 10); }),
            path + ":1:1: found '1,2', expected a token id (an integer)");
  // Too large for any integer type: reported as not an id, not wrapped into range.
  File("bad.txt", "99999999999999999999999\n");
  EXPECT_EQ(ErrorOf([&] { ReadTokenFile(path, 10); }),
            path + ":1:1: found '99999999999999999999999', expected a token id (an integer)");
}

TEST_F(TextTest, TokenFileErrorShowsAtMost40BytesOfALongWord) {
  const std::string word(100, 'z');
  const std::string path = File("long.txt", "1 " + word + "\n");
  EXPECT_EQ(ErrorOf([&] { ReadTokenFile(path, 10); }),
            path + ":1:3: found '" + std::string(40, 'z') + "', expected a token id (an integer)");
}

TEST_F(TextTest, TokenFileErrorNamesLineAndColumnOfAnIdOutsideTheVocabulary) {
  const std::string path = File("range.txt", "1 2\n3   10\n");
  EXPECT_EQ(ErrorOf([&] { ReadTokenFile(path, 10); }),
            path + ":2:5: token id 10 is outside the vocabulary, expected 0..9");
  File("range.txt", "0\n  -1\n");
  EXPECT_EQ(ErrorOf([&] { ReadTokenFile(path, 10); }),
            path + ":2:3: token id -1 is outside the vocabulary, expected 0..9");
  // Beyond int's range, yet a valid long long: refused by the bound, not truncated into range.
  File("range.txt", "4294967296\n");  // 2^32: as a 32-bit int it would read 0
  EXPECT_EQ(ErrorOf([&] { ReadTokenFile(path, 10); }),
            path + ":1:1: token id 4294967296 is outside the vocabulary, expected 0..9");
}

TEST_F(TextTest, TokenFileWithoutIdsIsAnError) {
  const std::string path = File("blank.txt", "\n  \n\t\r\n");
  EXPECT_EQ(ErrorOf([&] { ReadTokenFile(path, 10); }),
            path + ": no token ids found, expected one sequence per line");
  File("blank.txt", "");
  EXPECT_EQ(ErrorOf([&] { ReadTokenFile(path, 10); }),
            path + ": no token ids found, expected one sequence per line");
}

TEST_F(TextTest, MissingTokenFileIsNamed) {
  const std::string path = Path("absent.txt");
  const std::string message = ErrorOf([&] { ReadTokenFile(path, 10); });
  EXPECT_EQ(message.rfind(path + ": cannot open", 0), 0u) << message;
}

}  // namespace
}  // namespace stretch
