// Tests of the safetensors reader and writer (src/io/safetensors.h). Files for the reader's
// checks are assembled here byte by byte from the format's description (8-byte little-endian
// length, JSON, data), and the writer's output is taken apart here the same way, so that a layout
// mistake in the library cannot cancel out in a round trip.
#include "src/io/safetensors.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<unsigned char>;

// A fresh directory per test (the process id keeps concurrent runs apart), removed at the end.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = ::testing::TempDir() + "stretch_io_safetensors_" + std::to_string(getpid()) + "_" +
           info->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::vector<std::string> DirEntries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string dir_;
};

void WriteFile(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  ASSERT_TRUE(f.good()) << path;
}

Bytes ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A file from a header string and a data buffer: the length is the header's byte count.
Bytes MakeFile(const std::string& header, const Bytes& data, uint64_t length_field) {
  Bytes b;
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<unsigned char>(length_field >> (8 * i)));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}
Bytes MakeFile(const std::string& header, const Bytes& data) {
  return MakeFile(header, data, header.size());
}

template <typename T>
Bytes AsBytes(const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The message of the stretch::Error that opening `path` throws ("" when it opens).
std::string OpenError(const std::string& path) {
  try {
    SafetensorsFile file(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Round trip

TEST_F(SafetensorsTest, RoundTripsEveryDtypeScalarsAndEmptyTensors) {
  const std::vector<float> f32 = {1.5f,  -2.25f, 3e-38f, std::numeric_limits<float>::infinity(),
                                  -0.0f, 6.0f};
  const std::vector<double> f64 = {1.0 / 3.0, -1e300, 5e-324, 0.0};
  const std::vector<int64_t> i64 = {-(int64_t{1} << 62) - 7};
  const std::vector<uint64_t> u64 = {0xfedcba9876543210ULL, 0, 1, UINT64_MAX};
  const std::vector<int32_t> i32 = {-1, 2, INT32_MIN, INT32_MAX, 0, 7};
  const std::vector<uint8_t> u8 = {0, 255, 7, 128, 9};
  const std::vector<float> empty_f32;
  const std::vector<uint8_t> empty_u8;

  SafetensorsWriter w;
  // Added smallest first, so the writer's reordering by element size is exercised.
  w.Add<uint8_t>("bytes", {5}, u8);
  w.Add<float>("matrix", {2, 3}, f32);
  w.Add<double>("vector", {4}, f64);
  w.Add<int64_t>("scalar", {}, i64);
  w.AddOwned<uint64_t>("words", {2, 2}, u64);
  w.Add<int32_t>("cube", {3, 1, 2}, i32);
  w.Add<float>("empty", {0}, empty_f32);
  w.Add<uint8_t>("empty2", {2, 0, 3}, empty_u8);
  w.SetMetadata("stretch.config", R"({"dim": 64, "rope": "yarn:factor=8"})");
  w.SetMetadata("note", "ünïcode ✓");
  const std::string path = Path("a.safetensors");
  w.Write(path);

  SafetensorsFile file(path);
  EXPECT_EQ(file.tensors().size(), 8u);
  EXPECT_EQ(file.Read<float>("matrix", {2, 3}), f32);
  const std::vector<double> f64_back = file.Read<double>("vector", {4});
  EXPECT_EQ(std::memcmp(f64_back.data(), f64.data(), 32), 0);  // -0.0 and denormals too
  const std::vector<float> f32_back = file.Read<float>("matrix", {2, 3});
  EXPECT_EQ(std::memcmp(f32_back.data(), f32.data(), 24), 0);
  EXPECT_EQ(file.Read<int64_t>("scalar", {}), i64);
  EXPECT_EQ(file.Read<uint64_t>("words", {2, 2}), u64);
  EXPECT_EQ(file.Read<int32_t>("cube", {3, 1, 2}), i32);
  EXPECT_EQ(file.Read<uint8_t>("bytes", {5}), u8);
  EXPECT_EQ(file.Read<uint8_t>("bytes"), u8);  // any shape
  EXPECT_TRUE(file.Read<float>("empty", {0}).empty());
  EXPECT_TRUE(file.Read<uint8_t>("empty2", {2, 0, 3}).empty());
  EXPECT_EQ(file.Get("scalar").shape, std::vector<int64_t>{});
  EXPECT_EQ(file.Get("scalar").numel(), 1);
  EXPECT_EQ(file.Get("empty2").numel(), 0);
  EXPECT_EQ(file.Get("cube").dtype, SafetensorsDtype::kI32);
  EXPECT_EQ(file.GetMetadata("stretch.config"), R"({"dim": 64, "rope": "yarn:factor=8"})");
  EXPECT_EQ(file.GetMetadata("note"), "ünïcode ✓");
  EXPECT_EQ(file.metadata().size(), 2u);
  EXPECT_EQ(file.FindMetadata("absent"), std::nullopt);
  EXPECT_EQ(file.Find("absent"), nullptr);

  // tensors() lists the data order: 8-byte elements, then 4, then 1; within a size, Add order.
  std::vector<std::string> order;
  for (const SafetensorsTensor& t : file.tensors()) order.push_back(t.name);
  EXPECT_EQ(order, (std::vector<std::string>{"vector", "scalar", "words", "matrix", "cube", "empty",
                                             "bytes", "empty2"}));
}

TEST_F(SafetensorsTest, ReadsIntoTheCallersBufferAndRawBytes) {
  const std::vector<float> x = {1, 2, 3, 4};
  SafetensorsWriter w;
  w.Add<float>("x", {2, 2}, x);
  const uint16_t bf16[3] = {0x3f80, 0x4000, 0xc040};  // 1, 2, -3 in bfloat16
  w.AddRaw("h", SafetensorsDtype::kBF16, {3}, std::as_bytes(std::span<const uint16_t>(bf16)));
  w.Write(Path("b.safetensors"));

  SafetensorsFile file(Path("b.safetensors"));
  std::vector<float> dst(4, -1.0f);
  file.ReadInto<float>("x", {2, 2}, std::span<float>(dst));
  EXPECT_EQ(dst, x);
  std::vector<std::byte> raw(6);
  file.ReadBytesInto("h", raw);
  EXPECT_EQ(std::memcmp(raw.data(), bf16, 6), 0);
  EXPECT_EQ(file.Get("h").dtype, SafetensorsDtype::kBF16);
}

TEST_F(SafetensorsTest, WrittenFileMatchesTheFormatDescription) {
  const std::vector<float> a = {1, 2, 3};
  const std::vector<uint8_t> b = {9, 8};
  const std::vector<double> c = {0.5, -0.25};
  SafetensorsWriter w;
  w.Add<float>("a", {3}, a);
  w.Add<uint8_t>("b", {2}, b);
  w.Add<double>("c", {1, 2}, c);
  w.SetMetadata("stretch.format", "stretch-checkpoint");
  const std::string path = Path("c.safetensors");
  w.Write(path);

  // Taken apart here, without the library's reader.
  const Bytes file = ReadFile(path);
  ASSERT_GE(file.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(file[i]) << (8 * i);
  ASSERT_LE(8 + n, file.size());
  EXPECT_EQ(n % 8, 0u) << "the header is padded so that the data start 8-aligned";
  const std::string header(file.begin() + 8, file.begin() + 8 + static_cast<int64_t>(n));
  EXPECT_EQ(header, w.Header());
  EXPECT_EQ(header.front(), '{');
  const nlohmann::json j = nlohmann::json::parse(header);  // trailing spaces are JSON whitespace
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.size(), 4u);
  EXPECT_EQ(j.at("__metadata__"), (nlohmann::json{{"stretch.format", "stretch-checkpoint"}}));
  const Bytes data(file.begin() + 8 + static_cast<int64_t>(n), file.end());
  struct Expected {
    std::string name, dtype;
    std::vector<int64_t> shape;
    Bytes bytes;
    int64_t element_size;
  };
  const std::vector<Expected> expected = {{"a", "F32", {3}, AsBytes(a), 4},
                                          {"b", "U8", {2}, AsBytes(b), 1},
                                          {"c", "F64", {1, 2}, AsBytes(c), 8}};
  uint64_t total = 0;
  for (const Expected& e : expected) {
    SCOPED_TRACE(e.name);
    const nlohmann::json& t = j.at(e.name);
    EXPECT_EQ(t.size(), 3u);
    EXPECT_EQ(t.at("dtype"), e.dtype);
    EXPECT_EQ(t.at("shape").get<std::vector<int64_t>>(), e.shape);
    const auto offsets = t.at("data_offsets").get<std::vector<uint64_t>>();
    ASSERT_EQ(offsets.size(), 2u);
    ASSERT_LE(offsets[0], offsets[1]);
    ASSERT_LE(offsets[1], data.size());
    EXPECT_EQ((8 + n + offsets[0]) % e.element_size, 0u) << "aligned to the element size";
    EXPECT_EQ(Bytes(data.begin() + offsets[0], data.begin() + offsets[1]), e.bytes);
    total += offsets[1] - offsets[0];
  }
  EXPECT_EQ(total, data.size()) << "the tensors cover the buffer";
}

// The example file of the reference implementation's documentation (SafeTensors::deserialize):
// a 60-byte header, one I32 [2, 2] tensor of zeros. Written here byte for byte.
TEST_F(SafetensorsTest, ReadsTheReferenceDocumentationExample) {
  const std::string header = R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})";
  ASSERT_EQ(header.size(), 60u);  // the '<' (0x3c) of the example's first byte
  const std::string path = Path("doc.safetensors");
  WriteFile(path, MakeFile(header, Bytes(16, 0)));
  SafetensorsFile file(path);
  EXPECT_EQ(file.header_bytes(), 60);
  EXPECT_EQ(file.Read<int32_t>("test", {2, 2}), (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_TRUE(file.metadata().empty());
}

TEST_F(SafetensorsTest, ReadsAFileWithNoTensors) {
  const std::string path = Path("none.safetensors");
  WriteFile(path, MakeFile(R"({"__metadata__":{"k":"v"}})", {}));
  SafetensorsFile file(path);
  EXPECT_TRUE(file.tensors().empty());
  EXPECT_EQ(file.GetMetadata("k"), "v");
  // And the writer's own empty file.
  SafetensorsWriter w;
  w.Write(Path("empty.safetensors"));
  EXPECT_TRUE(SafetensorsFile(Path("empty.safetensors")).tensors().empty());
}

TEST_F(SafetensorsTest, TypedReadsCheckNameDtypeAndShape) {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  SafetensorsWriter w;
  w.Add<float>("layers.0.wq", {2, 3}, x);
  const std::string path = Path("t.safetensors");
  w.Write(path);
  SafetensorsFile file(path);
  auto message = [&](auto&& read) -> std::string {
    try {
      read();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message([&] {
              file.Read<float>("layers.0.wq", {3, 2});
            }),
            path + ": tensor 'layers.0.wq': shape [2, 3], expected [3, 2]");
  EXPECT_EQ(message([&] {
              file.Read<double>("layers.0.wq", {2, 3});
            }),
            path + ": tensor 'layers.0.wq': dtype F32, expected F64");
  EXPECT_EQ(message([&] {
              file.Read<float>("layers.0.wk", {2, 3});
            }),
            path + ": no tensor named 'layers.0.wk' (the file has 1 tensors)");
  EXPECT_EQ(message([&] { file.GetMetadata("stretch.config"); }),
            path + ": no metadata key 'stretch.config' (the file has 0 keys)");
}

// ---------------------------------------------------------------------------------------------
// Rejected files: each names the file, the tensor or field, what was found and what was expected.

struct BadFile {
  std::string what;
  Bytes bytes;
  std::vector<std::string> message_parts;
};

TEST_F(SafetensorsTest, RejectsCorruptedFilesWithMessages) {
  const std::string f32_2 = R"("dtype":"F32","shape":[2])";
  const std::vector<BadFile> cases = {
      {"shorter than the length field", Bytes{1, 2, 3}, {"file is 3 bytes, expected at least 8"}},
      {"header cut short",
       [] {
         Bytes b = MakeFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", {});
         b.resize(30);
         return b;
       }(),
       {"header length 54 is larger than the 22 bytes that follow it"}},
      {"header length larger than the file",
       MakeFile(R"({})", {}, 1000),
       {"header length 1000 is larger than the 2 bytes that follow it"}},
      {"header length over the cap",
       MakeFile(R"({})", {}, uint64_t{1} << 40),
       {"header length 1099511627776 exceeds the limit of 100000000 bytes"}},
      {"not JSON", MakeFile(R"({"a": [1, 2)", {}), {"the header is not valid JSON"}},
      {"not an object", MakeFile(R"([1, 2])", {}), {"does not begin with '{'", "byte 0x5b"}},
      {"unknown dtype",
       MakeFile(R"({"w":{"dtype":"F7","shape":[2],"data_offsets":[0,8]}})", Bytes(8)),
       {"tensor 'w': unknown dtype 'F7', expected one of BOOL, U8", "F32"}},
      {"overlapping offsets",
       MakeFile(R"({"a":{)" + f32_2 + R"(,"data_offsets":[0,8]},"b":{)" + f32_2 +
                    R"(,"data_offsets":[4,12]}})",
                Bytes(12)),
       {"tensor 'b' at data_offsets [4, 12] overlaps tensor 'a' at [0, 8]"}},
      {"gap between tensors",
       MakeFile(R"({"a":{)" + f32_2 + R"(,"data_offsets":[0,8]},"b":{)" + f32_2 +
                    R"(,"data_offsets":[12,20]}})",
                Bytes(20)),
       {"bytes [8, 12) of the data buffer belong to no tensor (a gap before tensor 'b')"}},
      {"gap at the start",
       MakeFile(R"({"a":{)" + f32_2 + R"(,"data_offsets":[4,12]}})", Bytes(12)),
       {"bytes [0, 4) of the data buffer belong to no tensor"}},
      {"trailing data",
       MakeFile(R"({"a":{)" + f32_2 + R"(,"data_offsets":[0,8]}})", Bytes(9)),
       {"bytes [8, 9) of the data buffer belong to no tensor (trailing data)"}},
      {"data cut short",
       MakeFile(R"({"a":{)" + f32_2 + R"(,"data_offsets":[0,8]}})", Bytes(5)),
       {"tensor 'a': data_offsets [0, 8] reach past the data buffer, which holds 5 bytes"}},
      {"shape and size disagree",
       MakeFile(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,8]}})", Bytes(8)),
       {"tensor 'a': F32 [2, 3] needs 24 bytes, but data_offsets [0, 8] hold 8"}},
      {"shape product overflows",
       MakeFile(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                Bytes(8)),
       {"tensor 'a': F64 [4294967296, 4294967296] needs more than 2^63 bytes"}},
      {"duplicate tensor name",
       MakeFile(R"({"a":{)" + f32_2 + R"(,"data_offsets":[0,8]},"a":{)" + f32_2 +
                    R"(,"data_offsets":[8,16]}})",
                Bytes(16)),
       {"tensor 'a' appears twice: expected unique names"}},
      {"duplicate field",
       MakeFile(R"({"a":{"dtype":"F32","dtype":"U8","shape":[2],"data_offsets":[0,8]}})", Bytes(8)),
       {"'a': key 'dtype' appears twice"}},
      {"duplicate metadata key",
       MakeFile(R"({"__metadata__":{"k":"1","k":"2"}})", {}),
       {"'__metadata__': key 'k' appears twice"}},
      {"negative dimension",
       MakeFile(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", Bytes(8)),
       {"tensor 'a': shape[0] is the number -2, expected a non-negative integer"}},
      {"fractional offset",
       MakeFile(R"({"a":{)" + f32_2 + R"(,"data_offsets":[0,8.5]}})", Bytes(8)),
       {"tensor 'a': data_offsets[1] is the number 8.5, expected a non-negative integer"}},
      {"offsets not a pair",
       MakeFile(R"({"a":{)" + f32_2 + R"(,"data_offsets":[0]}})", Bytes(8)),
       {"tensor 'a': data_offsets is an array of 1, expected an array [begin, end]"}},
      {"offsets reversed",
       MakeFile(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", Bytes(8)),
       {"tensor 'a': data_offsets [8, 0] end before they begin"}},
      {"missing field",
       MakeFile(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", Bytes(8)),
       {"tensor 'a': no 'shape' field"}},
      {"unknown field",
       MakeFile(R"({"a":{)" + f32_2 + R"(,"data_offsets":[0,8],"strides":[1]}})", Bytes(8)),
       {"tensor 'a': unknown field 'strides'"}},
      {"tensor not an object",
       MakeFile(R"({"a":3})", {}),
       {"tensor 'a' is a number, expected an object with dtype, shape and data_offsets"}},
      {"metadata value not a string",
       MakeFile(R"({"__metadata__":{"step":5}})", {}),
       {"__metadata__['step'] is a number, expected a string"}},
  };
  for (const BadFile& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = Path("bad.safetensors");
    WriteFile(path, c.bytes);
    const std::string message = OpenError(path);
    ASSERT_FALSE(message.empty()) << "accepted";
    EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
    for (const std::string& part : c.message_parts) {
      EXPECT_NE(message.find(part), std::string::npos) << message << "\n  lacks: " << part;
    }
  }
}

TEST_F(SafetensorsTest, RejectsMissingFilesAndDirectories) {
  EXPECT_NE(OpenError(Path("absent.safetensors")).find("No such file or directory"),
            std::string::npos);
  EXPECT_NE(OpenError(dir_).find("not a regular file"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Atomic writes

TEST_F(SafetensorsTest, LeavesOnlyTheTargetAndOverwritesIt) {
  const std::vector<float> one = {1};
  const std::vector<float> two = {2, 2};
  SafetensorsWriter w1;
  w1.Add<float>("x", {1}, one);
  w1.Write(Path("ckpt.safetensors"));
  EXPECT_EQ(DirEntries(), std::vector<std::string>{"ckpt.safetensors"});
  SafetensorsWriter w2;
  w2.Add<float>("x", {2}, two);
  w2.Write(Path("ckpt.safetensors"));
  EXPECT_EQ(DirEntries(), std::vector<std::string>{"ckpt.safetensors"});
  EXPECT_EQ(SafetensorsFile(Path("ckpt.safetensors")).Read<float>("x", {2}), two);
}

TEST_F(SafetensorsTest, FailsInAMissingDirectoryNamingThePath) {
  const std::vector<float> x = {1};
  SafetensorsWriter w;
  w.Add<float>("x", {1}, x);
  const std::string path = Path("no/such/dir/ckpt.safetensors");
  try {
    w.Write(path);
    FAIL() << "wrote into a missing directory";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind(path + ": cannot create the temporary file", 0), 0u) << m;
    EXPECT_NE(m.find(std::strerror(ENOENT)), std::string::npos) << m;
  }
  EXPECT_TRUE(DirEntries().empty());
}

// A write that fails part way (the file-size limit stops it with EFBIG after 4 KB) throws, removes
// its temporary file and leaves the earlier checkpoint at the target as it was.
TEST_F(SafetensorsTest, FailedWriteLeavesTheOldFileIntact) {
  const std::vector<float> old_values = {1, 2, 3};
  SafetensorsWriter old_writer;
  old_writer.Add<float>("x", {3}, old_values);
  const std::string path = Path("ckpt.safetensors");
  old_writer.Write(path);
  const Bytes before = ReadFile(path);

  const std::vector<float> big(100000, 7.0f);  // 400 KB: well past the limit
  SafetensorsWriter new_writer;
  new_writer.Add<float>("x", {100000}, big);

  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto* const old_handler = signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal
  rlimit limited = saved;
  limited.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string message;
  try {
    new_writer.Write(path);
  } catch (const Error& e) {
    message = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, old_handler);

  ASSERT_FALSE(message.empty()) << "the write past the file-size limit did not fail";
  EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
  EXPECT_NE(message.find(std::strerror(EFBIG)), std::string::npos) << message;
  EXPECT_EQ(DirEntries(), std::vector<std::string>{"ckpt.safetensors"}) << "temporary file left";
  EXPECT_EQ(ReadFile(path), before);
  EXPECT_EQ(SafetensorsFile(path).Read<float>("x", {3}), old_values);
}

TEST_F(SafetensorsTest, FailsInAReadOnlyDirectoryLeavingTheOldFile) {
  const std::vector<float> x = {1, 2};
  const std::vector<float> y = {3, 4};
  SafetensorsWriter w;
  w.Add<float>("x", {2}, x);
  const std::string path = Path("ckpt.safetensors");
  w.Write(path);
  fs::permissions(dir_, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                  fs::perm_options::remove);
  if (access(dir_.c_str(), W_OK) == 0) {
    GTEST_SKIP() << "running as a user who can write to a read-only directory (root); "
                    "FailedWriteLeavesTheOldFileIntact covers the failure path";
  }
  SafetensorsWriter w2;
  w2.Add<float>("x", {2}, y);
  try {
    w2.Write(path);
    FAIL() << "wrote into a read-only directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::strerror(EACCES)), std::string::npos) << e.what();
  }
  EXPECT_EQ(SafetensorsFile(path).Read<float>("x", {2}), x);
  EXPECT_EQ(DirEntries(), std::vector<std::string>{"ckpt.safetensors"});
}

// ---------------------------------------------------------------------------------------------
// Files from other writers

// Any .safetensors file under ../shared (written by the Hugging Face library or another tool):
// its header is read and validated, and a tensor is read.
TEST(SafetensorsSharedTest, ReadsSharedFiles) {
  const std::string root = ::stretch::testing::SharedPath("");
  STRETCH_SKIP_IF_MISSING(root);
  std::vector<std::string> found;
  for (const auto& e :
       fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied)) {
    if (e.is_regular_file() && e.path().extension() == ".safetensors") found.push_back(e.path());
  }
  if (found.empty()) {
    GTEST_SKIP() << "no .safetensors file under " << root
                 << ": nothing from another writer to read (the format is checked against the "
                    "reference documentation's example in ReadsTheReferenceDocumentationExample)";
  }
  std::sort(found.begin(), found.end());
  for (const std::string& path : found) {
    SCOPED_TRACE(path);
    SafetensorsFile file(path);
    ASSERT_FALSE(file.tensors().empty());
    // The smallest tensor, as raw bytes: the reader's offsets land inside the file.
    const SafetensorsTensor* smallest = &file.tensors()[0];
    for (const SafetensorsTensor& t : file.tensors()) {
      if (t.bytes() < smallest->bytes()) smallest = &t;
    }
    std::vector<std::byte> raw(static_cast<size_t>(smallest->bytes()));
    file.ReadBytesInto(smallest->name, raw);
    EXPECT_EQ(smallest->numel() * SafetensorsDtypeSize(smallest->dtype), smallest->bytes());
  }
}

}  // namespace
}  // namespace stretch
