// safetensors files (Hugging Face, https://huggingface.co/docs/safetensors), read and written.
//
// Layout:
//   bytes [0, 8)        N, the header's length: an unsigned 64-bit little-endian integer
//   bytes [8, 8 + N)    a UTF-8 JSON object, optionally followed by spaces:
//                         {"NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]},
//                          ..., "__metadata__": {"KEY": "VALUE", ...}}
//   bytes [8 + N, EOF)  the data buffer. Each tensor occupies [BEGIN, END) of it (offsets relative
//                       to the buffer's first byte), contiguous, row-major, little-endian; the
//                       tensors cover the buffer exactly, with no gap and no overlap.
// A shape [] is a scalar (one element); a shape with a 0 is an empty tensor (BEGIN == END).
// "__metadata__" is optional and maps strings to strings only.
//
// Reading (SafetensorsFile) validates the whole header before allocating anything from it: the
// header length against the file size and a 100,000,000-byte cap (the reference implementation's
// limit), the JSON, every field of every tensor (a known dtype, non-negative dims, shape product x
// dtype size == END - BEGIN without overflow), names unique, and the offsets, sorted, tiling the
// buffer from 0 to its end. Errors name the file, the tensor or field, what was found and what was
// expected. Tensor data are then read with pread straight into the caller's memory, with a typed
// check of dtype and shape (SafetensorsFile::Read).
//
// Writing (SafetensorsWriter::Write) is atomic (AtomicFile, src/io/output_file.h): a hidden
// temporary file ".<name>.partial-<pid>-<n>" beside the target (never ending in ".safetensors", so
// no glob for checkpoints picks it up) is renamed over it once complete; on any failure whatever
// was at the target before is untouched. The header is padded with spaces to a multiple of 8 bytes and the
// tensors are laid out by decreasing element size (then in the order they were added), so every
// tensor starts at a multiple of its element size in the file, as the reference writer does; the
// JSON lists the tensors in that data order.
//
// Reserved names in stretch's own files (the trainer fills them; the file layer does not interpret
// them). Metadata values are strings, so our JSON documents are stored as JSON text:
//   "stretch.format"       "stretch-checkpoint": the magic that says the file is ours
//   "stretch.version"      the checkpoint layout's version, a decimal integer ("1")
//   "stretch.config"       the model config, with its position scheme (JSON)
//   "stretch.train"        the training run's settings: optimizer, schedule, data, seed (JSON)
//   "stretch.converted_from"  a checkpoint written by `stretch convert --to stretch`: the model it
//                          came from (such a file has no stretch.train: it was not trained here)
//   "stretch.tokenizer"    the tokenizer's description (JSON); its binary model, when it has one
//                          (a serialized SentencePiece model), is the U8 tensor "tokenizer.model"
// Tensor names: model weights by their model names; "optim.*" the optimizer's state (src/train/
// optim.h: "optim.adamw.step" U64 [], "optim.adamw.m.<param>" and "optim.adamw.v.<param>" F32);
// "train.*" the trainer's counters (e.g. "train.step" U64 []); "rng.*" generator states as U64
// tensors (e.g. "rng.data" U64 [4], the four xoshiro256** words), so that they are restored bit
// for bit without going through decimal text (a counter that a resume needs is a tensor, never a
// metadata string).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace stretch {

// Tensor bytes are copied as they are between memory and file, which is little-endian.
static_assert(
    std::endian::native == std::endian::little,
    "safetensors data are little-endian and copied byte for byte; add swapping for this host");

// The dtypes of the safetensors specification whose element is a whole number of bytes. Those
// without a C++ type here (BOOL, F16, BF16, F8_*) can be read as bytes (ReadBytesInto).
enum class SafetensorsDtype {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
};

// "F32", "U8", ...: the name in the JSON header.
std::string_view SafetensorsDtypeName(SafetensorsDtype dtype);
// Bytes per element.
int64_t SafetensorsDtypeSize(SafetensorsDtype dtype);
// The dtype with that JSON name; nullopt when the name is not one of the specification's.
std::optional<SafetensorsDtype> ParseSafetensorsDtype(std::string_view name);

// The dtype that holds a C++ element type (the typed reads and writes use it).
template <typename T>
constexpr SafetensorsDtype SafetensorsDtypeOf() {
  if constexpr (std::is_same_v<T, float>)
    return SafetensorsDtype::kF32;
  else if constexpr (std::is_same_v<T, double>)
    return SafetensorsDtype::kF64;
  else if constexpr (std::is_same_v<T, int64_t>)
    return SafetensorsDtype::kI64;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return SafetensorsDtype::kU64;
  else if constexpr (std::is_same_v<T, int32_t>)
    return SafetensorsDtype::kI32;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return SafetensorsDtype::kU32;
  else if constexpr (std::is_same_v<T, int16_t>)
    return SafetensorsDtype::kI16;
  else if constexpr (std::is_same_v<T, uint16_t>)
    return SafetensorsDtype::kU16;
  else if constexpr (std::is_same_v<T, int8_t>)
    return SafetensorsDtype::kI8;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return SafetensorsDtype::kU8;
  else
    static_assert(sizeof(T) == 0, "no safetensors dtype for this element type");
}

// "[2, 3]"; "[]" for a scalar.
std::string FormatShape(const std::vector<int64_t>& shape);

// One tensor of a file, as its header describes it.
struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;  // row-major; [] is a scalar
  int64_t begin = 0;           // data_offsets, relative to the data buffer
  int64_t end = 0;

  int64_t numel() const;  // product of shape (1 for a scalar)
  int64_t bytes() const { return end - begin; }
};

// A safetensors file opened for reading: the header is parsed and validated by the constructor;
// tensor data are read on request. Holds the file open (move-only).
class SafetensorsFile {
 public:
  // The largest header accepted, in bytes (the reference implementation's MAX_HEADER_SIZE).
  static constexpr int64_t kMaxHeaderBytes = 100'000'000;

  // Opens and validates `path`. Throws stretch::Error naming the file, the tensor or field, what
  // was found and what was expected (see the file comment for every check).
  explicit SafetensorsFile(std::string path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t header_bytes() const { return header_bytes_; }  // N, padding included
  int64_t file_bytes() const { return file_bytes_; }
  // Every tensor, in the order of its data in the file.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // "__metadata__" (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor named `name`, or nullptr.
  const SafetensorsTensor* Find(std::string_view name) const;
  // The tensor named `name`; throws "<path>: no tensor named 'x' (the file has N tensors)".
  const SafetensorsTensor& Get(std::string_view name) const;
  // The metadata value under `key`, or nullopt / throws naming the key.
  std::optional<std::string> FindMetadata(std::string_view key) const;
  // ContentHash of the metadata (every key but `skip_key`, in key order, each key and value with
  // their lengths) followed by the data section, in file order. Reads the whole data section.
  // SafetensorsWriter::ContentDigest gives the same number for what it writes.
  uint64_t ContentDigest(std::string_view skip_key) const;
  const std::string& GetMetadata(std::string_view key) const;

  // Reads tensor `name` into `dst`. Throws when the tensor is missing, its dtype is not T's, its
  // shape differs from `expected_shape`, or the file cannot be read:
  //   "ckpt.safetensors: tensor 'layers.0.wq': shape [8, 4], expected [4, 4]".
  // A dst whose size differs from the expected shape's product is a programming error.
  template <typename T>
  void ReadInto(std::string_view name, const std::vector<int64_t>& expected_shape,
                std::span<T> dst) const {
    ReadChecked(name, SafetensorsDtypeOf<T>(), &expected_shape, dst.data(),
                static_cast<int64_t>(dst.size_bytes()));
  }
  template <typename T>
  std::vector<T> Read(std::string_view name, const std::vector<int64_t>& expected_shape) const {
    std::vector<T> out(static_cast<size_t>(ShapeNumel(expected_shape)));
    ReadInto<T>(name, expected_shape, std::span<T>(out));
    return out;
  }
  // Reads tensor `name` whatever its shape (Get(name).shape tells it); the dtype is still checked.
  template <typename T>
  std::vector<T> Read(std::string_view name) const {
    const SafetensorsTensor& t = Get(name);
    std::vector<T> out(static_cast<size_t>(t.numel()));
    ReadChecked(name, SafetensorsDtypeOf<T>(), nullptr, out.data(),
                static_cast<int64_t>(out.size() * sizeof(T)));
    return out;
  }
  // Reads a tensor of any dtype as raw little-endian bytes (for BF16, F16, ...); dst must hold
  // exactly Get(name).bytes() bytes (else a programming error).
  void ReadBytesInto(std::string_view name, std::span<std::byte> dst) const;
  // Tensor `name`'s bytes where a read-only mapping of the file holds them, for weights used in
  // place (kept in their file's type): the file is mapped once, on the first call, and the
  // mapping lives while an `owner` is held (after the SafetensorsFile is gone too).
  struct Mapped {
    const std::byte* data = nullptr;
    std::shared_ptr<const void> owner;
  };
  Mapped MapTensor(std::string_view name) const;

 private:
  static int64_t ShapeNumel(const std::vector<int64_t>& shape);
  void ReadChecked(std::string_view name, SafetensorsDtype dtype,
                   const std::vector<int64_t>* expected_shape, void* dst, int64_t dst_bytes) const;
  void ReadAt(int64_t file_offset, void* dst, int64_t n, std::string_view what) const;

  std::string path_;
  int fd_ = -1;
  int64_t file_bytes_ = 0;
  int64_t header_bytes_ = 0;
  std::vector<SafetensorsTensor> tensors_;            // sorted by begin
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
  mutable std::shared_ptr<const void> map_;  // MapTensor's mapping of the whole file
  mutable const std::byte* map_data_ = nullptr;
};

// Collects tensors and metadata, then writes them as one safetensors file, atomically.
// Add() borrows the caller's memory: it must stay alive and unchanged until Write() returns.
// AddOwned() takes the data over (for small values made on the spot: a step count, an RNG state).
class SafetensorsWriter {
 public:
  // writer.Add<float>("wq", {C, C}, wq): borrows wq's memory.
  template <typename T>
  void Add(std::string name, std::vector<int64_t> shape, std::span<const T> data) {
    AddEntry(Entry{std::move(name),
                   SafetensorsDtypeOf<T>(),
                   std::move(shape),
                   std::as_bytes(data),
                   {},
                   false});
  }
  // A temporary would be gone before Write(): use AddOwned for it.
  template <typename T>
  void Add(std::string name, std::vector<int64_t> shape, std::vector<T>&& data) = delete;
  template <typename T>
  void AddOwned(std::string name, std::vector<int64_t> shape, std::vector<T> data) {
    std::vector<std::byte> owned(data.size() * sizeof(T));
    if (!owned.empty()) std::memcpy(owned.data(), data.data(), owned.size());
    AddEntry(Entry{
        std::move(name), SafetensorsDtypeOf<T>(), std::move(shape), {}, std::move(owned), true});
  }
  // Any dtype, from raw little-endian bytes (borrowed), e.g. BF16 weights.
  void AddRaw(std::string name, SafetensorsDtype dtype, std::vector<int64_t> shape,
              std::span<const std::byte> data) {
    AddEntry(Entry{std::move(name), dtype, std::move(shape), data, {}, false});
  }
  // Sets "__metadata__"[key] = value (replacing an earlier value of the same key).
  void SetMetadata(std::string key, std::string value);

  // SafetensorsFile::ContentDigest of the file Write() would write (metadata set so far).
  uint64_t ContentDigest(std::string_view skip_key) const;
  // The JSON header this writer writes, padding included (for tests and inspection).
  std::string Header() const;
  // Writes the file; throws stretch::Error naming the path and the system's reason on failure,
  // leaving any earlier file at `path` as it was.
  void Write(const std::string& path) const;

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string name;
    SafetensorsDtype dtype;
    std::vector<int64_t> shape;
    std::span<const std::byte> borrowed;  // the caller's bytes (Add, AddRaw), or
    std::vector<std::byte> owned;         // ours (AddOwned)
    bool is_owned = false;
    std::span<const std::byte> bytes() const {
      return is_owned ? std::span<const std::byte>(owned) : borrowed;
    }
  };
  // Names must be unique, non-empty and not "__metadata__"; dims non-negative; the data must hold
  // shape product x dtype size bytes. Each is a programming error (STRETCH_CHECK) otherwise.
  void AddEntry(Entry entry);
  // Entries in the order of their data: decreasing element size, then the order of Add.
  std::vector<const Entry*> DataOrder() const;

  std::vector<Entry> entries_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace stretch
