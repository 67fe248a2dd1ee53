// BinaryReader (src/io/binary_reader.h): every read decodes little-endian bytes as written here
// byte by byte, advances the offset by what it read, and a read past the end is refused with a
// message naming the file, the offset, the field, the bytes found and the bytes expected.
#include "src/io/binary_reader.h"

#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

using testing::ErrorOf;
using testing::WriteBytes;

class BinaryReaderTest : public testing::TempDirTest {
 protected:
  BinaryReaderTest() : TempDirTest("stretch_binary_reader_") {}
};

std::string Bytes(std::initializer_list<int> values) {
  std::string s;
  for (int v : values) s.push_back(static_cast<char>(v));
  return s;
}

TEST_F(BinaryReaderTest, ReportsPathSizeAndOffsets) {
  const std::string path = File("six.bin", "abcdef");
  BinaryReader r(path);
  EXPECT_EQ(r.path(), path);
  EXPECT_EQ(r.size(), 6);
  EXPECT_EQ(r.offset(), 0);
  EXPECT_EQ(r.remaining(), 6);
  char two[2];
  r.ReadBytes(two, 2, "head");
  EXPECT_EQ(std::string(two, 2), "ab");
  EXPECT_EQ(r.offset(), 2);
  EXPECT_EQ(r.remaining(), 4);
  r.Skip(3, "gap");
  EXPECT_EQ(r.offset(), 5);
  EXPECT_EQ(r.ReadU8("last"), 'f');
  EXPECT_EQ(r.offset(), 6);
  EXPECT_EQ(r.remaining(), 0);
  r.ReadBytes(two, 0, "nothing");  // an empty read at the end is allowed
  r.Skip(0, "nothing");
  EXPECT_EQ(r.offset(), 6);
}

TEST_F(BinaryReaderTest, IntegersAreLittleEndian) {
  const std::string path = File("ints.bin", Bytes({0x01, 0x02, 0x03, 0x04,  // u32 0x04030201
                                                   0xff, 0xff, 0xff, 0xff,  // i32 -1 / u32 max
                                                   0x00, 0x00, 0x00, 0x80,  // i32 min
                                                   0xfe, 0xff, 0xff, 0x7f,  // i32 max - 1
                                                   0x00, 0x01, 0x00, 0x00,  // 256
                                                   0xab, 0x80}));           // two u8
  {
    BinaryReader r(path);
    EXPECT_EQ(r.ReadU32("a"), 0x04030201u);
    EXPECT_EQ(r.ReadU32("b"), 0xffffffffu);
    EXPECT_EQ(r.ReadU32("c"), 0x80000000u);
    EXPECT_EQ(r.ReadU32("d"), 0x7ffffffeu);
    EXPECT_EQ(r.ReadU32("e"), 256u);
    EXPECT_EQ(r.ReadU8("f"), 0xab);
    EXPECT_EQ(r.ReadU8("g"), 0x80);
    EXPECT_EQ(r.remaining(), 0);
  }
  {
    BinaryReader r(path);
    EXPECT_EQ(r.ReadI32("a"), 0x04030201);
    EXPECT_EQ(r.ReadI32("b"), -1);
    EXPECT_EQ(r.ReadI32("c"), std::numeric_limits<int32_t>::min());
    EXPECT_EQ(r.ReadI32("d"), std::numeric_limits<int32_t>::max() - 1);
    EXPECT_EQ(r.ReadI32("e"), 256);
    EXPECT_EQ(r.offset(), 20);
  }
}

TEST_F(BinaryReaderTest, FloatsAreLittleEndianIeeeBitForBit) {
  // 1.5f = 0x3fc00000, -2.0f = 0xc0000000, -0.0f = 0x80000000, +inf = 0x7f800000,
  // a quiet NaN with payload 0x7fc00001, the smallest subnormal 0x00000001.
  const std::string path =
      File("floats.bin",
           Bytes({0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x00, 0xc0, 0x00, 0x00, 0x00, 0x80,
                  0x00, 0x00, 0x80, 0x7f, 0x01, 0x00, 0xc0, 0x7f, 0x01, 0x00, 0x00, 0x00}));
  BinaryReader r(path);
  EXPECT_EQ(r.ReadF32("a"), 1.5f);
  EXPECT_EQ(r.ReadF32("b"), -2.0f);
  const float negative_zero = r.ReadF32("c");
  EXPECT_EQ(std::bit_cast<uint32_t>(negative_zero), 0x80000000u);
  EXPECT_EQ(r.ReadF32("d"), std::numeric_limits<float>::infinity());
  EXPECT_EQ(std::bit_cast<uint32_t>(r.ReadF32("e")), 0x7fc00001u);  // payload kept
  EXPECT_EQ(r.ReadF32("f"), std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(r.offset(), 24);
}

TEST_F(BinaryReaderTest, BulkFloatsFillTheCallersSpanAndAdvance) {
  std::vector<float> written(1000);
  for (size_t i = 0; i < written.size(); ++i) written[i] = 0.25f * static_cast<float>(i) - 7.0f;
  std::string bytes = Bytes({0x2a});  // a leading byte: the bulk read starts mid-file
  for (float f : written) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<char>((u >> (8 * b)) & 0xff));
  }
  bytes += "tail";
  BinaryReader r(File("bulk.bin", bytes));
  EXPECT_EQ(r.ReadU8("lead"), 0x2a);
  std::vector<float> got(1000, NAN);
  r.ReadF32s(got, "weights");
  EXPECT_EQ(got, written);
  EXPECT_EQ(r.offset(), 1 + 4000);
  std::vector<float> none;
  r.ReadF32s(none, "empty");  // zero floats: nothing read, nothing refused
  char tail[4];
  r.ReadBytes(tail, 4, "tail");
  EXPECT_EQ(std::string(tail, 4), "tail");
}

TEST_F(BinaryReaderTest, SkipMovesPastBytesWithoutReadingThem) {
  BinaryReader r(File("skip.bin", Bytes({9, 9, 9, 9, 9, 0x05, 0x00, 0x00, 0x00})));
  r.Skip(5, "padding");
  EXPECT_EQ(r.offset(), 5);
  EXPECT_EQ(r.ReadI32("count"), 5);
}

TEST_F(BinaryReaderTest, ReadPastTheEndNamesFileOffsetFieldFoundAndExpected) {
  // The header's own example: a tokenizer cut short inside token #511's bytes.
  const std::string path = File("tok512.bin", std::string(6223, 'x'));
  BinaryReader r(path);
  r.Skip(6220, "tokens #0..#510");
  char bytes[5];
  EXPECT_EQ(
      ErrorOf([&] { r.ReadBytes(bytes, 5, "token #511 bytes"); }),
      path + ": truncated at offset 6220 reading token #511 bytes: found 3 bytes, expected 5");
}

TEST_F(BinaryReaderTest, EveryReadIsRefusedPastTheEnd) {
  // Three bytes: every 4-byte read fails, a 1-byte read fits.
  const std::string path = File("three.bin", "abc");
  const std::string at0 = path + ": truncated at offset 0 reading ";
  BinaryReader r(path);
  EXPECT_EQ(ErrorOf([&] { r.ReadU32("magic"); }), at0 + "magic: found 3 bytes, expected 4");
  EXPECT_EQ(ErrorOf([&] { r.ReadI32("version"); }), at0 + "version: found 3 bytes, expected 4");
  EXPECT_EQ(ErrorOf([&] { r.ReadF32("scale"); }), at0 + "scale: found 3 bytes, expected 4");
  std::array<float, 2> two{};
  EXPECT_EQ(ErrorOf([&] { r.ReadF32s(two, "norm"); }), at0 + "norm: found 3 bytes, expected 8");
  char buf[4];
  EXPECT_EQ(ErrorOf([&] { r.ReadBytes(buf, 4, "name"); }), at0 + "name: found 3 bytes, expected 4");
  EXPECT_EQ(ErrorOf([&] { r.Skip(10, "pad"); }), at0 + "pad: found 3 bytes, expected 10");
  // A refused read consumes nothing: the bytes are still there to read.
  EXPECT_EQ(r.offset(), 0);
  EXPECT_EQ(r.ReadU8("first"), 'a');
  r.Skip(2, "rest");
  EXPECT_EQ(ErrorOf([&] { r.ReadU8("one more"); }),
            path + ": truncated at offset 3 reading one more: found 0 bytes, expected 1");
  EXPECT_EQ(r.offset(), 3);
}

TEST_F(BinaryReaderTest, EmptyFileRefusesEveryNonEmptyRead) {
  const std::string path = File("empty.bin", "");
  BinaryReader r(path);
  EXPECT_EQ(r.size(), 0);
  EXPECT_EQ(ErrorOf([&] { r.ReadU8("magic"); }),
            path + ": truncated at offset 0 reading magic: found 0 bytes, expected 1");
}

TEST_F(BinaryReaderTest, HugeCountsFromAFileAreRefusedBeforeAnyRead) {
  // A count read from a corrupt file, turned into a byte length by the caller: far larger than
  // the file, it must be refused by the size check (not attempted, not wrapped around).
  const std::string path = File("count.bin", Bytes({0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4}));
  BinaryReader r(path);
  const int64_t count = r.ReadI32("n_tokens");
  const int64_t bytes = count * 1024;  // 2^31 - 1 rows of 1 kB
  EXPECT_EQ(ErrorOf([&] { r.Skip(bytes, "token rows"); }),
            path + ": truncated at offset 4 reading token rows: found 4 bytes, expected " +
                std::to_string(bytes));
  const int64_t max = std::numeric_limits<int64_t>::max();
  char byte = 0;
  EXPECT_EQ(ErrorOf([&] { r.ReadBytes(&byte, max, "blob"); }),
            path + ": truncated at offset 4 reading blob: found 4 bytes, expected " +
                std::to_string(max));
  EXPECT_EQ(r.offset(), 4);
  EXPECT_EQ(r.ReadU32("payload"), 0x04030201u);
}

TEST_F(BinaryReaderTest, MissingFileNamesThePathAndTheReason) {
  const std::string path = Path("absent.bin");
  EXPECT_EQ(ErrorOf([&] { BinaryReader r(path); }),
            path + ": cannot open for reading: No such file or directory");
}

TEST_F(BinaryReaderTest, DirectoryIsNotARegularFile) {
  const std::string path = dir_.string();
  const std::string message = ErrorOf([&] { BinaryReader r(path); });
  EXPECT_EQ(message.rfind(path + ": a directory, not a regular file: expected a checkpoint", 0), 0u)
      << message;
}

// A negative byte count is a programming error in a loader, not bad input: the always-on check.
TEST_F(BinaryReaderTest, NegativeLengthIsAProgrammingError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path = File("four.bin", "abcd");
  // The child re-runs this test up to the statement and dies without TearDown: it removes its own
  // copy of the directory first (the open file stays readable).
  EXPECT_DEATH(
      {
        BinaryReader r(path);
        std::filesystem::remove_all(dir_);
        r.Skip(-1, "backwards");
      },
      "internal check failed: .*negative read of -1 bytes for backwards");
}

}  // namespace
}  // namespace stretch
