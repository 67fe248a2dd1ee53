#include "src/io/binary_reader.h"

#include <cerrno>
#include <cstring>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/core/input_file.h"

namespace stretch {

BinaryReader::BinaryReader(std::string path, std::string_view expected) : path_(std::move(path)) {
  InputFile in(path_, expected);  // refuses a device or FIFO before any read
  size_ = in.size();
  file_.reset(in.ReleaseAsStream());
}

void BinaryReader::Require(int64_t n, std::string_view field) const {
  STRETCH_CHECK(n >= 0, "negative read of {} bytes for {}", n, field);
  if (n > remaining()) {
    Fail("{}: truncated at offset {} reading {}: found {} bytes, expected {}", path_, offset_,
         field, remaining(), n);
  }
}

void BinaryReader::ReadBytes(void* dst, int64_t n, std::string_view field) {
  Require(n, field);
  if (n == 0) return;
  const size_t got = std::fread(dst, 1, static_cast<size_t>(n), file_.get());
  if (got != static_cast<size_t>(n)) {
    // The size was checked, so this is an I/O error or a file that shrank while being read.
    Fail("{}: read failed at offset {} reading {}: got {} of {} bytes ({})", path_, offset_, field,
         got, n, std::ferror(file_.get()) ? std::strerror(errno) : "file changed while reading");
  }
  offset_ += n;
}

int32_t BinaryReader::ReadI32(std::string_view field) {
  return static_cast<int32_t>(ReadU32(field));
}

uint32_t BinaryReader::ReadU32(std::string_view field) {
  unsigned char b[4];
  ReadBytes(b, 4, field);
  return static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 |
         static_cast<uint32_t>(b[2]) << 16 | static_cast<uint32_t>(b[3]) << 24;
}

uint8_t BinaryReader::ReadU8(std::string_view field) {
  uint8_t b = 0;
  ReadBytes(&b, 1, field);
  return b;
}

float BinaryReader::ReadF32(std::string_view field) { return std::bit_cast<float>(ReadU32(field)); }

void BinaryReader::ReadF32s(std::span<float> dst, std::string_view field) {
  ReadBytes(dst.data(), static_cast<int64_t>(dst.size_bytes()), field);
}

void BinaryReader::Skip(int64_t n, std::string_view field) {
  Require(n, field);
  if (n == 0) return;
  if (fseeko(file_.get(), static_cast<off_t>(offset_ + n), SEEK_SET) != 0) {
    Fail("{}: seek failed at offset {} skipping {}: {}", path_, offset_, field,
         std::strerror(errno));
  }
  offset_ += n;
}

}  // namespace stretch
