// GGUF files (llama.cpp, Ollama, LM Studio), versions 2 and 3: the container, its metadata and its
// tensors, read from a read-only memory mapping of the file.
//
// Layout (ggml's docs/gguf.md; all little-endian):
//   uint32 magic "GGUF", uint32 version, uint64 tensor_count, uint64 metadata_kv_count;
//   metadata_kv_count times: string key, uint32 value type, value;
//   tensor_count times: string name, uint32 n_dims (1..4), uint64 ne[n_dims] (ne[0] the fastest
//     dimension: a row-major (rows, cols) matrix is ne = {cols, rows}), uint32 type, uint64
//     offset (from the start of the data section, a multiple of the alignment);
//   padding to `general.alignment` (default 32); the data section.
// A string is uint64 length + bytes (no terminator). Value types: 0 uint8, 1 int8, 2 uint16,
// 3 int16, 4 uint32, 5 int32, 6 float32, 7 bool, 8 string, 9 array (uint32 element type, uint64
// count, elements), 10 uint64, 11 int64, 12 float64. Version 1 (32-bit counts) is refused.
//
// Every count, length, offset and size is checked against the file's size before it is used, so
// a truncated or corrupted file gives an error naming the key or tensor, never a wild read or a
// huge allocation.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/kernels/blocks.h"  // the formats' decoders: HalfToFloat, DequantizeQ8_0, ...

namespace stretch {

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
std::string_view GgufValueTypeName(GgufValueType t);

// One metadata value. Integers keep their sign in `i` or `u` (as the type says), floats in `f`,
// bools in `u` (0 or 1); arrays hold their elements (all of elem_type).
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  GgufValueType elem_type = GgufValueType::kUint8;  // arrays only
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::vector<GgufValue> array;

  bool IsInteger() const;
  bool IsFloat() const {
    return type == GgufValueType::kFloat32 || type == GgufValueType::kFloat64;
  }
  // A short description for error messages: "uint32 4096", "string \"llama\"", "array of 32000
  // string".
  std::string Describe() const;
};

// ggml tensor types: the ones stretch reads, and the names of the others for messages.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kBF16 = 30,
};
// "F32", "Q4_K", ..., or "type 99" for an id ggml does not define.
std::string GgmlTypeName(uint32_t type);
// Elements per block and bytes per block of the types whose layout stretch knows (all of the enum
// above); false for any other id.
bool GgmlBlockLayout(uint32_t type, int64_t* block_elems, int64_t* block_bytes);
// Whether stretch can turn a tensor of this type into floats (GgufFile::ReadFloats).
bool GgmlTypeReadable(uint32_t type);

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] fastest
  uint32_t type = 0;
  uint64_t offset = 0;  // from the start of the data section
  int64_t bytes = 0;    // size of its data
  int64_t elements = 0;
};

class GgufFile {
 public:
  // Maps and parses `path`; throws stretch::Error naming the file, the key or tensor, what was
  // found and what was expected.
  static GgufFile Open(const std::string& path);
  // True when the file starts with the GGUF magic (any version); false for anything else,
  // including a file that cannot be read.
  static bool Looks(const std::string& path);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  int64_t data_offset() const { return data_offset_; }
  int64_t file_size() const { return size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* Find(std::string_view key) const;
  // Typed getters: throw naming the key when it is missing (the Required forms) or has another
  // type. Integers of any width and sign are accepted where they fit.
  int64_t Int(std::string_view key) const;
  int64_t IntOr(std::string_view key, int64_t fallback) const;
  double Float(std::string_view key) const;  // float32/float64 (or an integer)
  double FloatOr(std::string_view key, double fallback) const;
  std::string String(std::string_view key) const;
  std::string StringOr(std::string_view key, std::string fallback) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // The tensor's bytes inside the mapping.
  std::span<const uint8_t> TensorData(const GgufTensorInfo& t) const;
  // Converts the tensor to floats in `out` (t.elements of them): F32 copied, F16 and BF16 widened
  // exactly, Q8_0, Q4_0, Q4_K, Q5_K and Q6_K dequantized as ggml defines them (src/io/gguf.cc).
  // Throws naming the tensor for any other type.
  // The tensor's pages are given back to the kernel afterwards (see DropPages in gguf.cc).
  void ReadFloats(const GgufTensorInfo& t, std::span<float> out) const;
  // What keeps the mapping alive (TensorData's bytes stay valid while a copy of it is held).
  std::shared_ptr<const void> MappingOwner() const { return map_; }

 private:
  void Convert(const GgufTensorInfo& t, std::span<const uint8_t> src, float* dst) const;
  struct Mapping;
  std::string path_;
  std::shared_ptr<Mapping> map_;
  int64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  int64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// ---- writing --------------------------------------------------------------------------------

// A tensor to write: its name, ggml-order shape, type and bytes (already in that type's layout).
struct GgufTensorOut {
  std::string name;
  std::vector<int64_t> ne;
  uint32_t type = 0;
  std::vector<uint8_t> data;
};
// Convenience constructors for metadata values.
// An integer element of an array, as int64 (the unsigned ones above INT64_MAX as -1, which every
// caller refuses).
int64_t GgufElementInt(const GgufValue& v);

GgufValue GgufString(std::string s);
GgufValue GgufU32(uint32_t v);
GgufValue GgufBool(bool v);
GgufValue GgufF32(float v);
GgufValue GgufStringArray(const std::vector<std::string>& v);
GgufValue GgufF32Array(const std::vector<float>& v);
GgufValue GgufI32Array(const std::vector<int32_t>& v);

// Writes a GGUF version 3 file atomically (src/io/output_file.h): the metadata in the order given
// (general.alignment, when given, must be a uint32 power of two; default 32), then the tensors,
// each aligned. Throws stretch::Error when a tensor's byte count does not match its type and shape
// or the file cannot be written.
using GgufKeys = std::vector<std::pair<std::string, GgufValue>>;
void WriteGguf(const std::string& path, const GgufKeys& kv,
               const std::vector<GgufTensorOut>& tensors);

// Encoders for the writer: floats to the bytes of F32, F16 (round to nearest even), BF16 (round
// to nearest even) or Q8_0 (ggml's quantize_row_q8_0_ref: per 32 values d = max|x| / 127 stored
// as F16, q = round(x / d)). n a multiple of 32 for Q8_0.
std::vector<uint8_t> EncodeTensor(std::span<const float> x, GgmlType type);
uint16_t FloatToHalf(float f);

}  // namespace stretch
