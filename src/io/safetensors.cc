#include "src/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "src/core/check.h"
#include "src/core/content_hash.h"
#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/io/output_file.h"

namespace stretch {
namespace {

struct DtypeRow {
  SafetensorsDtype dtype;
  std::string_view name;
  int64_t size;
};
// The specification's names (safetensors' Dtype enum) for the whole-byte dtypes.
constexpr DtypeRow kDtypes[] = {
    {SafetensorsDtype::kBool, "BOOL", 1},      {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kI8, "I8", 1},          {SafetensorsDtype::kF8E5M2, "F8_E5M2", 1},
    {SafetensorsDtype::kF8E4M3, "F8_E4M3", 1}, {SafetensorsDtype::kI16, "I16", 2},
    {SafetensorsDtype::kU16, "U16", 2},        {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2},      {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kU32, "U32", 4},        {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF64, "F64", 8},        {SafetensorsDtype::kI64, "I64", 8},
    {SafetensorsDtype::kU64, "U64", 8},
};

const DtypeRow& Row(SafetensorsDtype dtype) {
  for (const DtypeRow& r : kDtypes) {
    if (r.dtype == dtype) return r;
  }
  STRETCH_CHECK(false, "dtype {} missing from the table", static_cast<int>(dtype));
  return kDtypes[0];
}

std::string KnownDtypeNames() {
  std::string out;
  for (const DtypeRow& r : kDtypes) {
    if (!out.empty()) out += ", ";
    out += r.name;
  }
  return out;
}

// shape product x element size, or nullopt when it does not fit in int64.
std::optional<int64_t> CheckedBytes(const std::vector<int64_t>& shape, int64_t element_size) {
  int64_t n = element_size;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

// A JSON value's kind, for messages: "a string", "an array", "the number -2", ...
std::string Kind(const nlohmann::json& v) {
  if (v.is_number_float() || (v.is_number_integer() && !v.is_number_unsigned())) {
    return fmt::format("the number {}", v.dump());
  }
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  if (v.is_boolean()) return "a boolean";
  return "null";
}

// A JSON number that must be a non-negative integer; `what` names it for the message.
int64_t NonNegativeInt(const nlohmann::json& v, const std::string& path, const std::string& what) {
  if (!v.is_number_unsigned()) {
    Fail("{}: {} is {}, expected a non-negative integer", path, what, Kind(v));
  }
  const uint64_t u = v.get<uint64_t>();
  if (u > static_cast<uint64_t>(INT64_MAX)) {
    Fail("{}: {} is {}, expected at most {}", path, what, u, INT64_MAX);
  }
  return static_cast<int64_t>(u);
}

constexpr std::string_view kMetadataKey = "__metadata__";

// The header as JSON. nlohmann::json keeps the last of two equal keys silently; the parse
// callback sees every key, so duplicates (two tensors of one name, two "dtype" fields) are
// refused here.
nlohmann::json ParseHeaderJson(const std::string& path, const std::string& header) {
  struct Frame {
    std::set<std::string> keys;
    std::string last_key;
  };
  std::vector<Frame> frames;
  std::string duplicate;
  auto callback = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) {
      frames.emplace_back();
    } else if (event == Event::object_end) {
      if (!frames.empty()) frames.pop_back();
    } else if (event == Event::key && !frames.empty()) {
      std::string key = parsed.get<std::string>();
      if (!frames.back().keys.insert(key).second && duplicate.empty()) {
        if (frames.size() == 1) {
          duplicate = key == kMetadataKey ? fmt::format("'{}' appears twice", key)
                                          : fmt::format("tensor '{}' appears twice", key);
        } else {
          std::string where;
          for (size_t i = 0; i + 1 < frames.size(); ++i) {
            where += (i == 0 ? "" : ".") + frames[i].last_key;
          }
          duplicate = fmt::format("'{}': key '{}' appears twice", where, key);
        }
      }
      frames.back().last_key = std::move(key);
    }
    return true;
  };
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(header, callback);
  } catch (const nlohmann::json::exception& e) {
    Fail("{}: the header is not valid JSON: {}", path, e.what());
  }
  if (!duplicate.empty()) Fail("{}: header: {}: expected unique names", path, duplicate);
  STRETCH_CHECK(root.is_object(), "a header beginning with '{{' parsed as {}", root.type_name());
  return root;
}

// One tensor's entry of the header, checked against the data buffer's size.
SafetensorsTensor ParseTensorEntry(const std::string& path, const std::string& name,
                                   const nlohmann::json& value, int64_t buffer_bytes) {
  const std::string where = fmt::format("{}: tensor '{}'", path, name);
  if (!value.is_object()) {
    Fail("{} is {}, expected an object with dtype, shape and data_offsets", where, Kind(value));
  }
  for (const auto& [field, unused] : value.items()) {
    if (field != "dtype" && field != "shape" && field != "data_offsets") {
      Fail("{}: unknown field '{}', expected only dtype, shape and data_offsets", where, field);
    }
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(field)) Fail("{}: no '{}' field", where, field);
  }
  SafetensorsTensor t;
  t.name = name;
  const nlohmann::json& dtype = value.at("dtype");
  if (!dtype.is_string()) Fail("{}: dtype is {}, expected a string", where, Kind(dtype));
  const std::optional<SafetensorsDtype> parsed = ParseSafetensorsDtype(dtype.get<std::string>());
  if (!parsed) {
    Fail("{}: unknown dtype '{}', expected one of {}", where, dtype.get<std::string>(),
         KnownDtypeNames());
  }
  t.dtype = *parsed;
  const nlohmann::json& shape = value.at("shape");
  if (!shape.is_array()) Fail("{}: shape is {}, expected an array of integers", where, Kind(shape));
  for (size_t i = 0; i < shape.size(); ++i) {
    t.shape.push_back(NonNegativeInt(shape[i], where, fmt::format("shape[{}]", i)));
  }
  const nlohmann::json& offsets = value.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2) {
    Fail("{}: data_offsets is {}, expected an array [begin, end]", where,
         offsets.is_array() ? fmt::format("an array of {}", offsets.size()) : Kind(offsets));
  }
  t.begin = NonNegativeInt(offsets[0], where, "data_offsets[0]");
  t.end = NonNegativeInt(offsets[1], where, "data_offsets[1]");
  if (t.end < t.begin) {
    Fail("{}: data_offsets [{}, {}] end before they begin", where, t.begin, t.end);
  }
  if (t.end > buffer_bytes) {
    Fail(
        "{}: data_offsets [{}, {}] reach past the data buffer, which holds {} bytes: the file "
        "is truncated or the header is wrong",
        where, t.begin, t.end, buffer_bytes);
  }
  const std::optional<int64_t> need = CheckedBytes(t.shape, SafetensorsDtypeSize(t.dtype));
  if (!need || *need != t.end - t.begin) {
    Fail("{}: {} {} needs {} bytes, but data_offsets [{}, {}] hold {}", where,
         SafetensorsDtypeName(t.dtype), FormatShape(t.shape),
         need ? fmt::format("{}", *need) : std::string("more than 2^63"), t.begin, t.end,
         t.end - t.begin);
  }
  return t;
}

// The tensors, sorted by offset, must tile [0, buffer_bytes) exactly.
void CheckTensorsTileBuffer(const std::string& path, std::vector<SafetensorsTensor>& tensors,
                            int64_t buffer_bytes) {
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                   });
  int64_t covered = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsTensor& t = tensors[i];
    if (t.begin < covered) {
      Fail(
          "{}: tensor '{}' at data_offsets [{}, {}] overlaps tensor '{}' at [{}, {}]: expected "
          "disjoint tensors",
          path, t.name, t.begin, t.end, tensors[i - 1].name, tensors[i - 1].begin,
          tensors[i - 1].end);
    }
    if (t.begin > covered) {
      Fail(
          "{}: bytes [{}, {}) of the data buffer belong to no tensor (a gap before tensor '{}'): "
          "expected the tensors to cover the buffer",
          path, covered, t.begin, t.name);
    }
    covered = t.end;
  }
  if (covered != buffer_bytes) {
    Fail(
        "{}: bytes [{}, {}) of the data buffer belong to no tensor (trailing data): expected the "
        "tensors to cover the buffer",
        path, covered, buffer_bytes);
  }
}

}  // namespace

std::string_view SafetensorsDtypeName(SafetensorsDtype dtype) { return Row(dtype).name; }
int64_t SafetensorsDtypeSize(SafetensorsDtype dtype) { return Row(dtype).size; }

std::optional<SafetensorsDtype> ParseSafetensorsDtype(std::string_view name) {
  for (const DtypeRow& r : kDtypes) {
    if (r.name == name) return r.dtype;
  }
  return std::nullopt;
}

std::string FormatShape(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated not to overflow when the header was read
  return n;
}

// ---------------------------------------------------------------------------------------------
// Reading

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  InputFile in(path_, "a safetensors file");  // a device or FIFO has no size to check against
  file_bytes_ = in.size();
  fd_ = in.Release();
  // From here on the destructor is not run if we throw, so a guard closes the file.
  struct CloseOnThrow {
    int* fd;
    ~CloseOnThrow() {
      if (fd != nullptr && *fd >= 0) {
        ::close(*fd);
        *fd = -1;
      }
    }
  } guard{&fd_};

  if (file_bytes_ < 8) {
    Fail("{}: file is {} bytes, expected at least 8 (the header length of a safetensors file)",
         path_, file_bytes_);
  }
  unsigned char len_bytes[8];
  ReadAt(0, len_bytes, 8, "the header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len_bytes[i]) << (8 * i);
  if (n > static_cast<uint64_t>(kMaxHeaderBytes)) {
    Fail(
        "{}: header length {} exceeds the limit of {} bytes: not a safetensors file, or a "
        "corrupted one",
        path_, n, kMaxHeaderBytes);
  }
  if (static_cast<int64_t>(n) > file_bytes_ - 8) {
    Fail(
        "{}: header length {} is larger than the {} bytes that follow it: the file is truncated "
        "or not a safetensors file",
        path_, n, file_bytes_ - 8);
  }
  header_bytes_ = static_cast<int64_t>(n);
  const int64_t buffer_bytes = file_bytes_ - 8 - header_bytes_;

  std::string header(static_cast<size_t>(header_bytes_), '\0');
  ReadAt(8, header.data(), header_bytes_, "the JSON header");
  if (header.empty() || header[0] != '{') {
    Fail("{}: the header does not begin with '{{' (found {}): expected a JSON object", path_,
         header.empty() ? std::string("an empty header")
                        : fmt::format("byte 0x{:02x}", static_cast<unsigned char>(header[0])));
  }

  const nlohmann::json root = ParseHeaderJson(path_, header);

  for (const auto& [name, value] : root.items()) {
    if (name == kMetadataKey) {
      if (!value.is_object()) {
        Fail("{}: '{}' is {}, expected an object of strings", path_, name, Kind(value));
      }
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string()) {
          Fail("{}: {}['{}'] is {}, expected a string (safetensors metadata holds strings only)",
               path_, name, key, Kind(v));
        }
        metadata_.emplace(key, v.get<std::string>());
      }
      continue;
    }
    tensors_.push_back(ParseTensorEntry(path_, name, value, buffer_bytes));
  }

  CheckTensorsTileBuffer(path_, tensors_, buffer_bytes);
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  guard.fd = nullptr;
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      file_bytes_(other.file_bytes_),
      header_bytes_(other.header_bytes_),
      tensors_(std::move(other.tensors_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)),
      map_(std::move(other.map_)),
      map_data_(std::exchange(other.map_data_, nullptr)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    file_bytes_ = other.file_bytes_;
    header_bytes_ = other.header_bytes_;
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
    map_ = std::move(other.map_);
    map_data_ = std::exchange(other.map_data_, nullptr);
  }
  return *this;
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SafetensorsTensor& SafetensorsFile::Get(std::string_view name) const {
  const SafetensorsTensor* t = Find(name);
  if (t == nullptr) {
    Fail("{}: no tensor named '{}' (the file has {} tensors)", path_, name, tensors_.size());
  }
  return *t;
}

std::optional<std::string> SafetensorsFile::FindMetadata(std::string_view key) const {
  const auto it = metadata_.find(std::string(key));
  if (it == metadata_.end()) return std::nullopt;
  return it->second;
}

const std::string& SafetensorsFile::GetMetadata(std::string_view key) const {
  const auto it = metadata_.find(std::string(key));
  if (it == metadata_.end()) {
    Fail("{}: no metadata key '{}' (the file has {} keys)", path_, key, metadata_.size());
  }
  return it->second;
}

int64_t SafetensorsFile::ShapeNumel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    STRETCH_CHECK(d >= 0 && !__builtin_mul_overflow(n, d, &n), "bad expected shape {}",
                  FormatShape(shape));
  }
  return n;
}

void SafetensorsFile::ReadChecked(std::string_view name, SafetensorsDtype dtype,
                                  const std::vector<int64_t>* expected_shape, void* dst,
                                  int64_t dst_bytes) const {
  const SafetensorsTensor& t = Get(name);
  if (t.dtype != dtype) {
    Fail("{}: tensor '{}': dtype {}, expected {}", path_, name, SafetensorsDtypeName(t.dtype),
         SafetensorsDtypeName(dtype));
  }
  if (expected_shape != nullptr && t.shape != *expected_shape) {
    Fail("{}: tensor '{}': shape {}, expected {}", path_, name, FormatShape(t.shape),
         FormatShape(*expected_shape));
  }
  STRETCH_CHECK(dst_bytes == t.bytes(), "destination of {} bytes for tensor '{}' of {} bytes",
                dst_bytes, name, t.bytes());
  ReadAt(8 + header_bytes_ + t.begin, dst, t.bytes(), fmt::format("tensor '{}'", name));
}

void SafetensorsFile::ReadBytesInto(std::string_view name, std::span<std::byte> dst) const {
  const SafetensorsTensor& t = Get(name);
  STRETCH_CHECK(static_cast<int64_t>(dst.size()) == t.bytes(),
                "destination of {} bytes for tensor '{}' of {} bytes", dst.size(), name, t.bytes());
  ReadAt(8 + header_bytes_ + t.begin, dst.data(), t.bytes(), fmt::format("tensor '{}'", name));
}

SafetensorsFile::Mapped SafetensorsFile::MapTensor(std::string_view name) const {
  const SafetensorsTensor& t = Get(name);
  if (map_ == nullptr) {
    // The size was checked against the header when the file was opened; a file cut short since
    // then would fault on reading its missing pages, as a GGUF file's mapping would.
    void* p = ::mmap(nullptr, static_cast<size_t>(file_bytes_), PROT_READ, MAP_PRIVATE, fd_, 0);
    if (p == MAP_FAILED) {
      Fail("{}: cannot map {} bytes: {}", path_, file_bytes_, std::strerror(errno));
    }
    const size_t size = static_cast<size_t>(file_bytes_);
    map_ = std::shared_ptr<const void>(
        p, [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
    map_data_ = static_cast<const std::byte*>(p);
  }
  return {map_data_ + 8 + header_bytes_ + t.begin, map_};
}

namespace {

void HashMetadata(const std::map<std::string, std::string>& metadata, std::string_view skip_key,
                  ContentHash& hash) {
  for (const auto& [key, value] : metadata) {
    if (key == skip_key) continue;
    for (const std::string* text : {&key, &value}) {
      const uint64_t n = text->size();
      hash.Update(std::as_bytes(std::span(&n, 1)));
      hash.Update(*text);
    }
  }
}

}  // namespace

uint64_t SafetensorsFile::ContentDigest(std::string_view skip_key) const {
  ContentHash hash;
  HashMetadata(metadata_, skip_key, hash);
  const int64_t begin = 8 + header_bytes_;
  std::vector<std::byte> buffer(
      static_cast<size_t>(std::min<int64_t>(file_bytes_ - begin, 4 << 20)));
  for (int64_t at = begin; at < file_bytes_;) {
    const int64_t n = std::min<int64_t>(file_bytes_ - at, static_cast<int64_t>(buffer.size()));
    ReadAt(at, buffer.data(), n, "the data section");
    hash.Update(std::span<const std::byte>(buffer.data(), static_cast<size_t>(n)));
    at += n;
  }
  return hash.Digest();
}

uint64_t SafetensorsWriter::ContentDigest(std::string_view skip_key) const {
  ContentHash hash;
  HashMetadata(metadata_, skip_key, hash);
  for (const Entry* e : DataOrder()) hash.Update(e->bytes());
  return hash.Digest();
}

void SafetensorsFile::ReadAt(int64_t file_offset, void* dst, int64_t n,
                             std::string_view what) const {
  auto* out = static_cast<unsigned char*>(dst);
  int64_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, out + done, static_cast<size_t>(n - done),
                                static_cast<off_t>(file_offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      Fail("{}: read failed at offset {} reading {}: {}", path_, file_offset + done, what,
           std::strerror(errno));
    }
    if (got == 0) {
      // The sizes were checked against the file's size when it was opened.
      Fail("{}: file changed while reading {}: got {} of {} bytes at offset {}", path_, what, done,
           n, file_offset);
    }
    done += got;
  }
}

// ---------------------------------------------------------------------------------------------
// Writing

void SafetensorsWriter::AddEntry(Entry entry) {
  STRETCH_CHECK(!entry.name.empty() && entry.name != kMetadataKey, "tensor name '{}' is reserved",
                entry.name);
  STRETCH_CHECK(!index_.contains(entry.name), "tensor '{}' added twice", entry.name);
  const std::optional<int64_t> need = CheckedBytes(entry.shape, SafetensorsDtypeSize(entry.dtype));
  STRETCH_CHECK(need.has_value(), "tensor '{}': bad shape {}", entry.name,
                FormatShape(entry.shape));
  STRETCH_CHECK(static_cast<int64_t>(entry.bytes().size()) == *need,
                "tensor '{}': {} {} needs {} bytes, given {}", entry.name,
                SafetensorsDtypeName(entry.dtype), FormatShape(entry.shape), *need,
                entry.bytes().size());
  index_.emplace(entry.name, entries_.size());
  entries_.push_back(std::move(entry));
}

void SafetensorsWriter::SetMetadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

std::vector<const SafetensorsWriter::Entry*> SafetensorsWriter::DataOrder() const {
  std::vector<const Entry*> order;
  for (const Entry& e : entries_) order.push_back(&e);
  // Largest elements first: with the header padded to 8 bytes, every tensor then starts at a
  // multiple of its element size in the file.
  std::stable_sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return SafetensorsDtypeSize(a->dtype) > SafetensorsDtypeSize(b->dtype);
  });
  return order;
}

std::string SafetensorsWriter::Header() const {
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata_) meta[key] = value;
    root[std::string(kMetadataKey)] = std::move(meta);
  }
  int64_t offset = 0;
  for (const Entry* e : DataOrder()) {
    const int64_t bytes = static_cast<int64_t>(e->bytes().size());
    root[e->name] = {{"dtype", SafetensorsDtypeName(e->dtype)},
                     {"shape", e->shape},
                     {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header;
  try {
    header = root.dump();
  } catch (const nlohmann::json::exception& e) {
    Fail("safetensors header: a tensor name or metadata string is not valid UTF-8: {}", e.what());
  }
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

void SafetensorsWriter::Write(const std::string& path) const {
  const std::string header = Header();  // before any file exists: it may throw
  AtomicFile out(path);
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) {
    len_bytes[i] = static_cast<unsigned char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  }
  out.Write(len_bytes, 8, "the header length");
  out.Write(header.data(), header.size(), "the header");
  for (const Entry* e : DataOrder()) {
    out.Write(e->bytes().data(), e->bytes().size(), fmt::format("tensor '{}'", e->name));
  }
  out.Commit();
}

}  // namespace stretch
