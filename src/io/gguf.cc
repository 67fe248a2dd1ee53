#include "src/io/gguf.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/io/output_file.h"
#include "src/kernels/packed.h"

namespace stretch {

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr int kMaxDims = 4;                  // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 4;            // arrays of arrays: deeper than any real file

}  // namespace

// The file mapped read-only; unmapped when the last GgufFile copy goes.
struct GgufFile::Mapping {
  const uint8_t* data = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (data != nullptr && size > 0) munmap(const_cast<uint8_t*>(data), size);
  }
};

std::string_view GgufValueTypeName(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8: return "uint8";
    case GgufValueType::kInt8: return "int8";
    case GgufValueType::kUint16: return "uint16";
    case GgufValueType::kInt16: return "int16";
    case GgufValueType::kUint32: return "uint32";
    case GgufValueType::kInt32: return "int32";
    case GgufValueType::kFloat32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kUint64: return "uint64";
    case GgufValueType::kInt64: return "int64";
    case GgufValueType::kFloat64: return "float64";
  }
  return "unknown";
}

bool GgufValue::IsInteger() const {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64: return true;
    default: return false;
  }
}

std::string GgufValue::Describe() const {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kUint16:
    case GgufValueType::kUint32:
    case GgufValueType::kUint64: return fmt::format("{} {}", GgufValueTypeName(type), u);
    case GgufValueType::kInt8:
    case GgufValueType::kInt16:
    case GgufValueType::kInt32:
    case GgufValueType::kInt64: return fmt::format("{} {}", GgufValueTypeName(type), i);
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64: return fmt::format("{} {}", GgufValueTypeName(type), f);
    case GgufValueType::kBool: return u ? "bool true" : "bool false";
    case GgufValueType::kString:
      return fmt::format("string \"{}\"", s.size() > 40 ? s.substr(0, 40) + "..." : s);
    case GgufValueType::kArray:
      return fmt::format("array of {} {}", array.size(), GgufValueTypeName(elem_type));
  }
  return "unknown";
}

std::string GgmlTypeName(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32: return "F32";
    case GgmlType::kF16: return "F16";
    case GgmlType::kQ4_0: return "Q4_0";
    case GgmlType::kQ4_1: return "Q4_1";
    case GgmlType::kQ5_0: return "Q5_0";
    case GgmlType::kQ5_1: return "Q5_1";
    case GgmlType::kQ8_0: return "Q8_0";
    case GgmlType::kQ8_1: return "Q8_1";
    case GgmlType::kQ2_K: return "Q2_K";
    case GgmlType::kQ3_K: return "Q3_K";
    case GgmlType::kQ4_K: return "Q4_K";
    case GgmlType::kQ5_K: return "Q5_K";
    case GgmlType::kQ6_K: return "Q6_K";
    case GgmlType::kQ8_K: return "Q8_K";
    case GgmlType::kBF16: return "BF16";
  }
  return fmt::format("type {}", type);
}

// Block sizes from ggml's type traits (ggml/src/ggml.c, type_traits; the block structs of
// ggml-common.h): QK4_0 = QK4_1 = QK5_0 = QK5_1 = QK8_0 = QK8_1 = 32, QK_K = 256.
bool GgmlBlockLayout(uint32_t type, int64_t* block_elems, int64_t* block_bytes) {
  int64_t e = 0, b = 0;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32: e = 1, b = 4; break;
    case GgmlType::kF16: e = 1, b = 2; break;
    case GgmlType::kBF16: e = 1, b = 2; break;
    case GgmlType::kQ4_0: e = 32, b = 2 + 16; break;
    case GgmlType::kQ4_1: e = 32, b = 4 + 16; break;
    case GgmlType::kQ5_0: e = 32, b = 2 + 4 + 16; break;
    case GgmlType::kQ5_1: e = 32, b = 4 + 4 + 16; break;
    case GgmlType::kQ8_0: e = 32, b = 2 + 32; break;
    case GgmlType::kQ8_1: e = 32, b = 4 + 32; break;
    case GgmlType::kQ2_K: e = 256, b = 16 + 64 + 4; break;
    case GgmlType::kQ3_K: e = 256, b = 32 + 64 + 12 + 2; break;
    case GgmlType::kQ4_K: e = 256, b = 4 + 12 + 128; break;
    case GgmlType::kQ5_K: e = 256, b = 4 + 12 + 32 + 128; break;
    case GgmlType::kQ6_K: e = 256, b = 128 + 64 + 16 + 2; break;
    case GgmlType::kQ8_K: e = 256, b = 4 + 256 + 32; break;
    default: return false;
  }
  *block_elems = e;
  *block_bytes = b;
  return true;
}

bool GgmlTypeReadable(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: return true;
    default: return false;
  }
}

// ---- parsing -----------------------------------------------------------------------------------

namespace {

// A bounds-checked cursor over the mapping; every read names what it reads.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* data, int64_t size)
      : path_(path), data_(data), size_(size) {}
  int64_t offset() const { return off_; }
  int64_t remaining() const { return size_ - off_; }

  void Need(int64_t n, std::string_view what) const {
    if (n < 0 || n > remaining()) {
      Fail("{}: truncated at offset {} reading {}: found {} bytes, expected {}", path_, off_, what,
           remaining(), n);
    }
  }
  template <typename T>
  T Read(std::string_view what) {
    Need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + off_, sizeof(T));
    off_ += static_cast<int64_t>(sizeof(T));
    return v;
  }
  std::string ReadString(std::string_view what) {
    const uint64_t n = Read<uint64_t>(what);
    if (n > static_cast<uint64_t>(remaining())) {
      Fail("{}: {} at offset {}: a string of {} bytes, but only {} bytes remain in the file", path_,
           what, off_ - 8, n, remaining());
    }
    std::string s(reinterpret_cast<const char*>(data_ + off_), static_cast<size_t>(n));
    off_ += static_cast<int64_t>(n);
    return s;
  }
  const std::string& path() const { return path_; }

 private:
  const std::string& path_;
  const uint8_t* data_;
  int64_t size_;
  int64_t off_ = 0;
};

// The fewest bytes a value of this type takes in the file (for bounding array counts).
int64_t MinValueBytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32: return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
    case GgufValueType::kString: return 8;  // a string's length field
    case GgufValueType::kArray: return 12;  // element type + count
  }
  return 1;
}

bool KnownValueType(uint32_t t) { return t <= 12; }

GgufValue ReadValue(Cursor& c, GgufValueType type, const std::string& key, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufValueType::kUint8: v.u = c.Read<uint8_t>(key); break;
    case GgufValueType::kInt8: v.i = c.Read<int8_t>(key); break;
    case GgufValueType::kUint16: v.u = c.Read<uint16_t>(key); break;
    case GgufValueType::kInt16: v.i = c.Read<int16_t>(key); break;
    case GgufValueType::kUint32: v.u = c.Read<uint32_t>(key); break;
    case GgufValueType::kInt32: v.i = c.Read<int32_t>(key); break;
    case GgufValueType::kUint64: v.u = c.Read<uint64_t>(key); break;
    case GgufValueType::kInt64: v.i = c.Read<int64_t>(key); break;
    case GgufValueType::kFloat32: v.f = c.Read<float>(key); break;
    case GgufValueType::kFloat64: v.f = c.Read<double>(key); break;
    case GgufValueType::kBool: {
      const uint8_t b = c.Read<uint8_t>(key);
      if (b > 1) {
        Fail("{}: metadata {} at offset {}: a bool of value {}, expected 0 or 1", c.path(), key,
             c.offset() - 1, b);
      }
      v.u = b;
      break;
    }
    case GgufValueType::kString: v.s = c.ReadString(key); break;
    case GgufValueType::kArray: {
      if (depth >= kMaxArrayDepth) {
        Fail("{}: metadata {}: arrays nested deeper than {}, expected at most {}", c.path(), key,
             depth, kMaxArrayDepth);
      }
      const uint32_t et = c.Read<uint32_t>(key + " (array element type)");
      if (!KnownValueType(et)) {
        Fail("{}: metadata {} at offset {}: array element type {}, expected 0-12 (gguf.md)",
             c.path(), key, c.offset() - 4, et);
      }
      v.elem_type = static_cast<GgufValueType>(et);
      const uint64_t n = c.Read<uint64_t>(key + " (array length)");
      const int64_t min_bytes = MinValueBytes(v.elem_type);
      if (n > static_cast<uint64_t>(c.remaining() / min_bytes)) {
        Fail(
            "{}: metadata {} at offset {}: an array of {} {} needs at least {} bytes per element, "
            "but only {} bytes remain in the file",
            c.path(), key, c.offset() - 8, n, GgufValueTypeName(v.elem_type), min_bytes,
            c.remaining());
      }
      v.array.reserve(static_cast<size_t>(n));
      for (uint64_t k = 0; k < n; ++k) v.array.push_back(ReadValue(c, v.elem_type, key, depth + 1));
      break;
    }
  }
  return v;
}

}  // namespace

bool GgufFile::Looks(const std::string& path) {
  const std::string head = ReadInputHead(path, 4);  // "" for a device or FIFO: never opened
  uint32_t magic = 0;
  if (head.size() == sizeof magic) std::memcpy(&magic, head.data(), sizeof magic);
  return magic == kGgufMagic;
}

GgufFile GgufFile::Open(const std::string& path) {
  GgufFile g;
  g.path_ = path;
  InputFile in(path, "a GGUF model file");  // a device or FIFO has no size to check against
  g.size_ = in.size();
  const int fd = in.Release();
  g.map_ = std::make_shared<Mapping>();
  if (g.size_ > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(g.size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      Fail("{}: cannot map {} bytes: {}", path, g.size_, std::strerror(err));
    }
    g.map_->data = static_cast<const uint8_t*>(p);
    g.map_->size = static_cast<size_t>(g.size_);
  }
  ::close(fd);

  Cursor c(g.path_, g.map_->data, g.size_);
  const uint32_t magic = c.Read<uint32_t>("the magic");
  if (magic != kGgufMagic) {
    Fail("{}: magic 0x{:08x}, expected 0x{:08x} (\"GGUF\"): not a GGUF file", path, magic,
         kGgufMagic);
  }
  g.version_ = c.Read<uint32_t>("the version");
  if (g.version_ != 2 && g.version_ != 3) {
    Fail("{}: starts with \"GGUF\" but has version {}: expected 2 or 3{}", path, g.version_,
         g.version_ == 1 ? " (version 1 has 32-bit counts; convert the model again with a current "
                           "llama.cpp)"
                         : "");
  }
  const uint64_t n_tensors = c.Read<uint64_t>("tensor_count");
  const uint64_t n_kv = c.Read<uint64_t>("metadata_kv_count");
  // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least
  // 8 (name length) + 4 (n_dims) + 8 (one dimension) + 4 (type) + 8 (offset).
  if (n_kv > static_cast<uint64_t>(c.remaining() / 13)) {
    Fail("{}: metadata_kv_count {}: the file has room for at most {} key-value pairs", path, n_kv,
         c.remaining() / 13);
  }
  if (n_tensors > static_cast<uint64_t>(c.remaining() / 32)) {
    Fail("{}: tensor_count {}: the file has room for at most {} tensor infos", path, n_tensors,
         c.remaining() / 32);
  }
  g.kv_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    const int64_t at = c.offset();
    std::string key = c.ReadString(fmt::format("metadata key #{}", k));
    if (g.kv_index_.count(key)) {
      Fail("{}: metadata key {} at offset {} appears twice, expected each key once", path, key, at);
    }
    const uint32_t t = c.Read<uint32_t>(key + " (value type)");
    if (!KnownValueType(t)) {
      Fail("{}: metadata {} at offset {}: value type {}, expected 0-12 (gguf.md)", path, key,
           c.offset() - 4, t);
    }
    GgufValue v = ReadValue(c, static_cast<GgufValueType>(t), key, 0);
    g.kv_index_.emplace(key, g.kv_.size());
    g.kv_.emplace_back(std::move(key), std::move(v));
  }
  if (const GgufValue* a = g.Find("general.alignment")) {
    if (a->type != GgufValueType::kUint32 || a->u == 0 || (a->u & (a->u - 1)) != 0) {
      Fail("{}: metadata general.alignment: {}, expected a uint32 power of two", path,
           a->Describe());
    }
    g.alignment_ = a->u;
  }

  g.tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t;
    t.name = c.ReadString(fmt::format("the name of tensor #{}", k));
    if (g.tensor_index_.count(t.name)) {
      Fail("{}: tensor {} appears twice, expected each name once", path, t.name);
    }
    const uint32_t n_dims = c.Read<uint32_t>(t.name + " (n_dims)");
    if (n_dims < 1 || n_dims > kMaxDims) {
      Fail("{}: tensor {}: n_dims {}, expected 1-{}", path, t.name, n_dims, kMaxDims);
    }
    t.elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = c.Read<uint64_t>(t.name + " (dimension)");
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          static_cast<int64_t>(ne) > std::numeric_limits<int64_t>::max() / t.elements) {
        Fail(
            "{}: tensor {}: dimension {} is {}, expected 1 or more with the element count within "
            "int64",
            path, t.name, d, ne);
      }
      t.ne.push_back(static_cast<int64_t>(ne));
      t.elements *= static_cast<int64_t>(ne);
    }
    t.type = c.Read<uint32_t>(t.name + " (type)");
    int64_t be = 0, bb = 0;
    if (!GgmlBlockLayout(t.type, &be, &bb)) {
      Fail(
          "{}: tensor {}: type {}, which this reader does not know (gguf.md; stretch reads F32, "
          "F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)",
          path, t.name, t.type);
    }
    if (t.ne[0] % be != 0) {
      Fail("{}: tensor {}: {} rows of {} elements, expected a multiple of the {}-element block",
           path, t.name, GgmlTypeName(t.type), t.ne[0], be);
    }
    if (t.elements / be > std::numeric_limits<int64_t>::max() / bb) {
      Fail("{}: tensor {}: {} elements of {} overflow a byte count", path, t.name, t.elements,
           GgmlTypeName(t.type));
    }
    t.bytes = t.elements / be * bb;
    t.offset = c.Read<uint64_t>(t.name + " (offset)");
    if (t.offset % g.alignment_ != 0) {
      Fail("{}: tensor {}: offset {}, expected a multiple of the alignment {}", path, t.name,
           t.offset, g.alignment_);
    }
    g.tensor_index_.emplace(t.name, g.tensors_.size());
    g.tensors_.push_back(std::move(t));
  }
  // The data section starts at the next multiple of the alignment.
  const uint64_t end = static_cast<uint64_t>(c.offset());
  const uint64_t data = (end + g.alignment_ - 1) / g.alignment_ * g.alignment_;
  if (n_tensors > 0 && data > static_cast<uint64_t>(g.size_)) {
    Fail("{}: the data section would start at offset {}, past the end of the file ({} bytes)", path,
         data, g.size_);
  }
  g.data_offset_ = static_cast<int64_t>(std::min<uint64_t>(data, static_cast<uint64_t>(g.size_)));
  const uint64_t data_bytes = static_cast<uint64_t>(g.size_ - g.data_offset_);
  for (const GgufTensorInfo& t : g.tensors_) {
    if (t.offset > data_bytes || static_cast<uint64_t>(t.bytes) > data_bytes - t.offset) {
      Fail(
          "{}: tensor {} ({} {} bytes at data offset {}) ends past the end of the file: the data "
          "section holds {} bytes",
          path, t.name, GgmlTypeName(t.type), t.bytes, t.offset, data_bytes);
    }
  }
  // No two tensors share bytes.
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : g.tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const GgufTensorInfo& a = *by_offset[k - 1];
    const GgufTensorInfo& b = *by_offset[k];
    if (a.offset + static_cast<uint64_t>(a.bytes) > b.offset) {
      Fail("{}: tensors {} (data offset {}, {} bytes) and {} (data offset {}) overlap", path,
           a.name, a.offset, a.bytes, b.name, b.offset);
    }
  }
  return g;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  const auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

int64_t GgufFile::Int(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) Fail("{}: metadata {} is missing, expected an integer", path_, key);
  if (!v->IsInteger()) Fail("{}: metadata {}: {}, expected an integer", path_, key, v->Describe());
  const bool is_unsigned = v->type == GgufValueType::kUint8 || v->type == GgufValueType::kUint16 ||
                           v->type == GgufValueType::kUint32 || v->type == GgufValueType::kUint64;
  if (is_unsigned) {
    if (v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      Fail("{}: metadata {}: {}, expected a value within int64", path_, key, v->Describe());
    }
    return static_cast<int64_t>(v->u);
  }
  return v->i;
}

int64_t GgufFile::IntOr(std::string_view key, int64_t fallback) const {
  return Find(key) == nullptr ? fallback : Int(key);
}

double GgufFile::Float(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) Fail("{}: metadata {} is missing, expected a number", path_, key);
  if (v->IsFloat()) return v->f;
  if (v->IsInteger()) return static_cast<double>(Int(key));
  Fail("{}: metadata {}: {}, expected a number", path_, key, v->Describe());
}

double GgufFile::FloatOr(std::string_view key, double fallback) const {
  return Find(key) == nullptr ? fallback : Float(key);
}

std::string GgufFile::String(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) Fail("{}: metadata {} is missing, expected a string", path_, key);
  if (v->type != GgufValueType::kString) {
    Fail("{}: metadata {}: {}, expected a string", path_, key, v->Describe());
  }
  return v->s;
}

std::string GgufFile::StringOr(std::string_view key, std::string fallback) const {
  return Find(key) == nullptr ? fallback : String(key);
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const uint8_t> GgufFile::TensorData(const GgufTensorInfo& t) const {
  return {map_->data + data_offset_ + t.offset, static_cast<size_t>(t.bytes)};
}

namespace {

// Gives the pages of a converted tensor back: the mapping is read-only and never written, so the
// kernel drops them from the process (they stay in the page cache, and a later read faults them
// in again from the file). Without it a loaded model would count twice in the resident memory:
// its float arrays and the file's pages.
void DropPages(std::span<const uint8_t> bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(bytes.data()) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(bytes.data()) + bytes.size()) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace

void GgufFile::ReadFloats(const GgufTensorInfo& t, std::span<float> out) const {
  if (static_cast<int64_t>(out.size()) != t.elements) {
    Fail("{}: tensor {}: {} elements, expected {}", path_, t.name, t.elements, out.size());
  }
  const std::span<const uint8_t> src = TensorData(t);
  Convert(t, src, out.data());
  DropPages(src);
}

void GgufFile::Convert(const GgufTensorInfo& t, std::span<const uint8_t> src, float* dst) const {
  const int64_t n = t.elements;
  // A block whose scale is NaN or infinite is refused (src/kernels/packed.h), never decoded.
  const auto check_scales = [&](PackedType type) {
    const int64_t blocks = n / PackedBlockElems(type);
    if (const int64_t b = FirstNonFiniteScale(type, src.data(), blocks); b >= 0) {
      Fail(
          "{}: tensor {} ({}): block {} has a scale that is NaN or infinite; a corrupt block is "
          "not computed",
          path_, t.name, GgmlTypeName(t.type), b);
    }
  };
  switch (static_cast<GgmlType>(t.type)) {
    case GgmlType::kF32: std::memcpy(dst, src.data(), static_cast<size_t>(n) * 4); return;
    case GgmlType::kF16:
      for (int64_t k = 0; k < n; ++k) dst[k] = HalfToFloat(LoadU16(src.data() + 2 * k));
      return;
    case GgmlType::kBF16:
      for (int64_t k = 0; k < n; ++k) dst[k] = BFloat16ToFloat(LoadU16(src.data() + 2 * k));
      return;
    case GgmlType::kQ8_0:
      check_scales(PackedType::kQ8_0);
      return DequantizeQ8_0(src.data(), dst, n);
    case GgmlType::kQ4_0:
      check_scales(PackedType::kQ4_0);
      return DequantizeQ4_0(src.data(), dst, n);
    case GgmlType::kQ4_K:
      check_scales(PackedType::kQ4_K);
      return DequantizeQ4_K(src.data(), dst, n);
    case GgmlType::kQ5_K:
      check_scales(PackedType::kQ5_K);
      return DequantizeQ5_K(src.data(), dst, n);
    case GgmlType::kQ6_K:
      check_scales(PackedType::kQ6_K);
      return DequantizeQ6_K(src.data(), dst, n);
    default:
      Fail(
          "{}: tensor {} is {}: stretch reads F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K and Q6_K "
          "tensors",
          path_, t.name, GgmlTypeName(t.type));
  }
}

// ---- writing -----------------------------------------------------------------------------------

uint16_t FloatToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);     // rounds to inf (or is)
  if (abs < 0x33000001u) return static_cast<uint16_t>(sign);                // rounds to +-0
  const int e = static_cast<int>(abs >> 23);
  uint32_t mant = (abs & 0x7fffffu) | 0x800000u;  // with the implicit bit
  // Shift so that the result has 10 fraction bits at half's exponent (subnormal below 2^-14).
  const int shift = e >= 113 ? 13 : 13 + (113 - e);
  const uint32_t half_exp = e >= 113 ? static_cast<uint32_t>(e - 112) : 0u;
  uint32_t m = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (m & 1u))) ++m;  // round to nearest even
  // For normals m includes the implicit bit (0x400); adding the exponent field above it carries
  // a rounding overflow into the exponent correctly.
  const uint32_t bits = e >= 113 ? ((half_exp << 10) + (m - 0x400u)) : m;
  return static_cast<uint16_t>(sign | bits);
}

namespace {

uint16_t FloatToBFloat16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}

void PutU16(std::vector<uint8_t>& out, size_t at, uint16_t v) {
  std::memcpy(out.data() + at, &v, 2);
}

}  // namespace

std::vector<uint8_t> EncodeTensor(std::span<const float> x, GgmlType type) {
  const size_t n = x.size();
  std::vector<uint8_t> out;
  switch (type) {
    case GgmlType::kF32:
      out.resize(n * 4);
      std::memcpy(out.data(), x.data(), n * 4);
      return out;
    case GgmlType::kF16:
      out.resize(n * 2);
      for (size_t k = 0; k < n; ++k) PutU16(out, 2 * k, FloatToHalf(x[k]));
      return out;
    case GgmlType::kBF16:
      out.resize(n * 2);
      for (size_t k = 0; k < n; ++k) PutU16(out, 2 * k, FloatToBFloat16(x[k]));
      return out;
    case GgmlType::kQ8_0: {
      if (n % 32 != 0) Fail("Q8_0 needs a multiple of 32 values, found {}", n);
      out.resize(n / 32 * 34);
      for (size_t b = 0; b < n / 32; ++b) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        PutU16(out, b * 34, FloatToHalf(d));
        for (int j = 0; j < 32; ++j) {
          out[b * 34 + 2 + j] =
              static_cast<uint8_t>(static_cast<int8_t>(std::round(x[b * 32 + j] * id)));
        }
      }
      return out;
    }
    default:
      Fail("writing {} tensors is not supported (F32, F16, BF16, Q8_0)",
           GgmlTypeName(static_cast<uint32_t>(type)));
  }
}

GgufValue GgufString(std::string s) {
  GgufValue v;
  v.type = GgufValueType::kString;
  v.s = std::move(s);
  return v;
}
GgufValue GgufU32(uint32_t x) {
  GgufValue v;
  v.type = GgufValueType::kUint32;
  v.u = x;
  return v;
}
GgufValue GgufBool(bool x) {
  GgufValue v;
  v.type = GgufValueType::kBool;
  v.u = x ? 1 : 0;
  return v;
}
GgufValue GgufF32(float x) {
  GgufValue v;
  v.type = GgufValueType::kFloat32;
  v.f = x;
  return v;
}
GgufValue GgufStringArray(const std::vector<std::string>& xs) {
  GgufValue v;
  v.type = GgufValueType::kArray;
  v.elem_type = GgufValueType::kString;
  for (const std::string& x : xs) v.array.push_back(GgufString(x));
  return v;
}
GgufValue GgufF32Array(const std::vector<float>& xs) {
  GgufValue v;
  v.type = GgufValueType::kArray;
  v.elem_type = GgufValueType::kFloat32;
  for (float x : xs) v.array.push_back(GgufF32(x));
  return v;
}
GgufValue GgufI32Array(const std::vector<int32_t>& xs) {
  GgufValue v;
  v.type = GgufValueType::kArray;
  v.elem_type = GgufValueType::kInt32;
  for (int32_t x : xs) {
    GgufValue e;
    e.type = GgufValueType::kInt32;
    e.i = x;
    v.array.push_back(e);
  }
  return v;
}

namespace {

class ByteSink {
 public:
  template <typename T>
  void Put(T v) {
    const size_t at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &v, sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void PutValue(const GgufValue& v) {
    switch (v.type) {
      case GgufValueType::kUint8: Put<uint8_t>(static_cast<uint8_t>(v.u)); break;
      case GgufValueType::kInt8: Put<int8_t>(static_cast<int8_t>(v.i)); break;
      case GgufValueType::kUint16: Put<uint16_t>(static_cast<uint16_t>(v.u)); break;
      case GgufValueType::kInt16: Put<int16_t>(static_cast<int16_t>(v.i)); break;
      case GgufValueType::kUint32: Put<uint32_t>(static_cast<uint32_t>(v.u)); break;
      case GgufValueType::kInt32: Put<int32_t>(static_cast<int32_t>(v.i)); break;
      case GgufValueType::kUint64: Put<uint64_t>(v.u); break;
      case GgufValueType::kInt64: Put<int64_t>(v.i); break;
      case GgufValueType::kFloat32: Put<float>(static_cast<float>(v.f)); break;
      case GgufValueType::kFloat64: Put<double>(v.f); break;
      case GgufValueType::kBool: Put<uint8_t>(v.u ? 1 : 0); break;
      case GgufValueType::kString: PutString(v.s); break;
      case GgufValueType::kArray:
        Put<uint32_t>(static_cast<uint32_t>(v.elem_type));
        Put<uint64_t>(v.array.size());
        for (const GgufValue& e : v.array) PutValue(e);
        break;
    }
  }
  void PadTo(uint64_t alignment) {
    while (bytes.size() % alignment != 0) bytes.push_back(0);
  }
  std::vector<uint8_t> bytes;
};

}  // namespace

void WriteGguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& kv,
               const std::vector<GgufTensorOut>& tensors) {
  uint64_t alignment = 32;
  for (const auto& [key, v] : kv) {
    if (key == "general.alignment") {
      if (v.type != GgufValueType::kUint32 || v.u == 0 || (v.u & (v.u - 1)) != 0) {
        Fail("{}: general.alignment {}, expected a uint32 power of two", path, v.Describe());
      }
      alignment = v.u;
    }
  }
  ByteSink h;
  h.Put<uint32_t>(kGgufMagic);
  h.Put<uint32_t>(3);
  h.Put<uint64_t>(tensors.size());
  h.Put<uint64_t>(kv.size());
  for (const auto& [key, v] : kv) {
    h.PutString(key);
    h.Put<uint32_t>(static_cast<uint32_t>(v.type));
    h.PutValue(v);
  }
  uint64_t offset = 0;
  for (const GgufTensorOut& t : tensors) {
    int64_t be = 0, bb = 0, elements = 1;
    if (!GgmlBlockLayout(t.type, &be, &bb))
      Fail("{}: tensor {}: unknown type {}", path, t.name, t.type);
    for (int64_t d : t.ne) elements *= d;
    if (t.ne.empty() || t.ne.size() > kMaxDims || t.ne[0] % be != 0 ||
        static_cast<int64_t>(t.data.size()) != elements / be * bb) {
      Fail("{}: tensor {}: {} bytes for a {} tensor of {} elements, expected {}", path, t.name,
           t.data.size(), GgmlTypeName(t.type), elements, elements / be * bb);
    }
    h.PutString(t.name);
    h.Put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) h.Put<uint64_t>(static_cast<uint64_t>(d));
    h.Put<uint32_t>(t.type);
    h.Put<uint64_t>(offset);
    offset += (t.data.size() + alignment - 1) / alignment * alignment;
  }
  h.PadTo(alignment);
  AtomicFile out(path);
  out.Write(h.bytes.data(), h.bytes.size(), "the GGUF header");
  const std::vector<uint8_t> zeros(alignment, 0);
  for (const GgufTensorOut& t : tensors) {
    out.Write(t.data.data(), t.data.size(), "tensor " + t.name);
    const size_t pad = (alignment - t.data.size() % alignment) % alignment;
    if (pad) out.Write(zeros.data(), pad, "padding");
  }
  out.Commit();
}

// An integer element of an array, as int64 (the unsigned ones above INT64_MAX as -1, which every
// caller refuses).
int64_t GgufElementInt(const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::kUint8:
    case GgufValueType::kUint16:
    case GgufValueType::kUint32:
    case GgufValueType::kUint64:
      return v.u > static_cast<uint64_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v.u);
    default: return v.i;
  }
}

}  // namespace stretch
