// A bounds-checked, little-endian reader over one file, for the loaders of src/io.
//
// Every read names the field it reads, so that a file cut short or a read that fails gives a
// message with the file, the field, the offset, what was found and what was expected:
//   "tok512.bin: truncated at offset 6220 reading token #511 bytes: found 3 bytes, expected 5".
// Bulk float reads go straight into the caller's memory (one fread), so a multi-GB checkpoint is
// never staged in a second buffer.
#pragma once

#include <bit>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace stretch {

// Bulk reads copy the file's little-endian floats and ints byte for byte into host memory.
static_assert(std::endian::native == std::endian::little,
              "src/io reads little-endian files by copying bytes; add byte swapping for this host");

class BinaryReader {
 public:
  // Opens `path` for reading. Throws stretch::Error naming the path and the system's reason when
  // it cannot be opened, or naming what it is when it is not a regular file (a directory, a
  // device, a FIFO: no size to check against; src/core/input_file.h). `expected` is what the
  // caller reads ("a llama2.c tokenizer file"), for that message.
  explicit BinaryReader(std::string path,
                        std::string_view expected = "a checkpoint or tokenizer file");

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }      // the file's size in bytes
  int64_t offset() const { return offset_; }  // bytes consumed so far
  int64_t remaining() const { return size_ - offset_; }

  // Each of these reads at the current offset and advances it; when fewer bytes remain than the
  // read needs, throws "<path>: truncated at offset O reading <field>: found R bytes, expected N".
  void ReadBytes(void* dst, int64_t n, std::string_view field);
  int32_t ReadI32(std::string_view field);
  uint32_t ReadU32(std::string_view field);
  uint8_t ReadU8(std::string_view field);
  float ReadF32(std::string_view field);
  void ReadF32s(std::span<float> dst, std::string_view field);
  // Moves the offset forward by n bytes without reading them (same check as a read).
  void Skip(int64_t n, std::string_view field);

 private:
  void Require(int64_t n, std::string_view field) const;

  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  int64_t size_ = 0;
  int64_t offset_ = 0;
};

}  // namespace stretch
