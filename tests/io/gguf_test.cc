// Tests of the GGUF reader and writer (src/io/gguf.h) and of the llama model mapping
// (src/io/gguf_model.h). The parser's files are built here byte by byte from the format's
// description (gguf.md), not through the library's writer, so that a layout mistake cannot cancel
// out; the quantized blocks are packed here from ggml's block definitions and compared with values
// computed in double.
#include "src/io/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "src/io/gguf_model.h"
#include "src/io/llama2c.h"
#include "src/io/model_file.h"
#include "src/io/tokenizer/tokenizer.h"
#include "tests/testing/random_model.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

std::string TempFile(const std::string& name) {
  return ::testing::TempDir() + "stretch_io_gguf_" + std::to_string(getpid()) + "_" + name;
}

using Bytes = std::vector<uint8_t>;

struct Builder {
  Bytes b;
  template <typename T>
  void Put(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));
    b.insert(b.end(), tmp, tmp + sizeof(T));
  }
  void Str(const std::string& s) {
    Put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void Pad(size_t a) {
    while (b.size() % a) b.push_back(0);
  }
};

void WriteBytes(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// Offsets of fields in the file Sample() builds, for the corruption tests.
struct SampleLayout {
  size_t tensor_count = 8, kv_count = 16;
  size_t name_len = 0;         // the first key's length field
  size_t array_count = 0;      // tokens' element count
  size_t bool_value = 0;       // flag's value byte
  size_t t0_ndims = 0;         // tensor "a": n_dims
  size_t t0_dim0 = 0;          // tensor "a": ne[0]
  size_t t0_type = 0;          // tensor "a": type
  size_t t0_offset = 0;        // tensor "a": offset
  size_t t1_offset = 0;        // tensor "b": offset
  size_t alignment_value = 0;  // general.alignment's value
};

// A version-3 file: 6 metadata keys of several types (a string array among them), two tensors,
// "a" F32 {4, 2} = 0..7 and "b" F16 {8} = 1.5 each, 32-byte alignment.
Bytes Sample(SampleLayout* layout = nullptr, uint32_t version = 3) {
  SampleLayout l;
  Builder w;
  w.Put<uint32_t>(0x46554747);
  w.Put<uint32_t>(version);
  w.Put<uint64_t>(2);
  w.Put<uint64_t>(6);
  l.name_len = w.b.size();
  w.Str("general.architecture");
  w.Put<uint32_t>(8);
  w.Str("test");
  w.Str("general.alignment");
  w.Put<uint32_t>(4);
  l.alignment_value = w.b.size();
  w.Put<uint32_t>(32);
  w.Str("count");
  w.Put<uint32_t>(11);  // int64
  w.Put<int64_t>(-5);
  w.Str("ratio");
  w.Put<uint32_t>(6);
  w.Put<float>(0.25f);
  w.Str("flag");
  w.Put<uint32_t>(7);
  l.bool_value = w.b.size();
  w.Put<uint8_t>(1);
  w.Str("tokens");
  w.Put<uint32_t>(9);
  w.Put<uint32_t>(8);
  l.array_count = w.b.size();
  w.Put<uint64_t>(3);
  w.Str("x");
  w.Str("yy");
  w.Str("");
  // tensor infos
  w.Str("a");
  l.t0_ndims = w.b.size();
  w.Put<uint32_t>(2);
  l.t0_dim0 = w.b.size();
  w.Put<uint64_t>(4);
  w.Put<uint64_t>(2);
  l.t0_type = w.b.size();
  w.Put<uint32_t>(0);
  l.t0_offset = w.b.size();
  w.Put<uint64_t>(0);
  w.Str("b");
  w.Put<uint32_t>(1);
  w.Put<uint64_t>(8);
  w.Put<uint32_t>(1);
  l.t1_offset = w.b.size();
  w.Put<uint64_t>(32);
  w.Pad(32);
  for (int k = 0; k < 8; ++k) w.Put<float>(static_cast<float>(k));
  w.Pad(32);
  for (int k = 0; k < 8; ++k) w.Put<uint16_t>(0x3e00);  // 1.5 in binary16
  if (layout) *layout = l;
  return w.b;
}

std::string OpenError(const Bytes& b, const std::string& name) {
  const std::string path = TempFile(name);
  WriteBytes(path, b);
  try {
    GgufFile::Open(path);
  } catch (const Error& e) {
    std::remove(path.c_str());
    return e.what();
  }
  std::remove(path.c_str());
  return "";
}

TEST(Gguf, ReadsEveryPartOfAHandBuiltFile) {
  const std::string path = TempFile("sample.gguf");
  WriteBytes(path, Sample());
  ASSERT_TRUE(GgufFile::Looks(path));
  const GgufFile g = GgufFile::Open(path);
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(g.String("general.architecture"), "test");
  EXPECT_EQ(g.Int("count"), -5);
  EXPECT_EQ(g.Float("ratio"), 0.25);
  EXPECT_EQ(g.Find("flag")->u, 1u);
  const GgufValue* tokens = g.Find("tokens");
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->array.size(), 3u);
  EXPECT_EQ(tokens->array[1].s, "yy");
  EXPECT_EQ(tokens->array[2].s, "");
  EXPECT_EQ(g.IntOr("missing", 7), 7);
  EXPECT_THROW(g.Int("general.architecture"), Error);  // a string asked for as an integer
  ASSERT_EQ(g.tensors().size(), 2u);
  const GgufTensorInfo* a = g.FindTensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->ne, (std::vector<int64_t>{4, 2}));
  std::vector<float> x(8);
  g.ReadFloats(*a, x);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(x[static_cast<size_t>(k)], static_cast<float>(k));
  const GgufTensorInfo* b = g.FindTensor("b");
  ASSERT_NE(b, nullptr);
  g.ReadFloats(*b, x);
  for (float v : x) EXPECT_EQ(v, 1.5f);
  std::remove(path.c_str());
}

TEST(Gguf, VersionTwoIsReadAndVersionOneRefused) {
  EXPECT_EQ(OpenError(Sample(nullptr, 2), "v2.gguf"), "");
  EXPECT_NE(OpenError(Sample(nullptr, 1), "v1.gguf").find("version 1"), std::string::npos);
  EXPECT_NE(OpenError(Sample(nullptr, 4), "v4.gguf").find("expected 2 or 3"), std::string::npos);
}

TEST(Gguf, EveryTruncationIsAnError) {
  const Bytes full = Sample();
  // Any prefix: the header, a key, a value, a tensor info or the data cut short.
  for (size_t n = 0; n < full.size(); ++n) {
    const Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_NE(OpenError(cut, "cut.gguf"), "") << "prefix of " << n << " bytes opened";
  }
}

TEST(Gguf, CorruptedFieldsAreRefusedByName) {
  SampleLayout l;
  const Bytes good = Sample(&l);
  struct Case {
    const char* what;
    size_t at;
    uint64_t value;
    int width;
    const char* expect;
  };
  const Case cases[] = {
      {"huge tensor count", l.tensor_count, uint64_t{1} << 60, 8, "tensor_count"},
      {"huge key-value count", l.kv_count, uint64_t{1} << 60, 8, "metadata_kv_count"},
      {"huge key length", l.name_len, uint64_t{1} << 62, 8, "metadata key #0"},
      {"huge array", l.array_count, uint64_t{1} << 61, 8, "tokens"},
      {"bool of 2", l.bool_value, 2, 1, "flag"},
      {"no dimensions", l.t0_ndims, 0, 4, "tensor a: n_dims 0"},
      {"five dimensions", l.t0_ndims, 5, 4, "tensor a: n_dims 5"},
      {"zero dimension", l.t0_dim0, 0, 8, "tensor a: dimension 0"},
      {"huge dimension", l.t0_dim0, uint64_t{1} << 62, 8, "tensor a"},
      {"unknown type", l.t0_type, 99, 4, "tensor a: type 99"},
      {"unaligned offset", l.t0_offset, 4, 8, "multiple of the alignment"},
      {"offset past the end", l.t1_offset, 1 << 20, 8, "tensor b"},
      {"overlapping tensors", l.t1_offset, 0, 8, "overlap"},
      {"alignment not a power of two", l.alignment_value, 24, 4, "general.alignment"},
      {"alignment zero", l.alignment_value, 0, 4, "general.alignment"},
  };
  for (const Case& c : cases) {
    Bytes b = good;
    std::memcpy(b.data() + c.at, &c.value, static_cast<size_t>(c.width));
    const std::string err = OpenError(b, "bad.gguf");
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.what << ": " << err;
  }
  Bytes magic = good;
  magic[0] = 'X';
  EXPECT_NE(OpenError(magic, "magic.gguf").find("not a GGUF file"), std::string::npos);
}

TEST(Gguf, RandomDamageNeverCrashes) {
  // Flipped bytes anywhere in the header: each damaged file either opens or is refused with a
  // stretch::Error (the sanitizer build checks that no read strays while doing so).
  const Bytes good = Sample();
  std::mt19937 rng(7);
  const size_t header = good.size() - 64;  // the data section is plain numbers
  int refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Bytes b = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) b[rng() % header] = static_cast<uint8_t>(rng());
    if (!OpenError(b, "rand.gguf").empty()) ++refused;
  }
  EXPECT_GT(refused, 100);  // the damage is real: many files are refused
}

// ---- number formats and blocks ------------------------------------------------------------------

// binary16 -> double by its definition: (-1)^s 2^(e-15) (1 + m/1024), subnormal 2^-14 (m/1024).
double HalfByDefinition(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  const double sign = s ? -1.0 : 1.0;
  if (e == 31) return m ? std::nan("") : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m / 1024.0, -14);
  return sign * std::ldexp(1.0 + m / 1024.0, e - 15);
}

TEST(Gguf, HalfPrecisionBothWaysOnEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const double want = HalfByDefinition(static_cast<uint16_t>(h));
    const float got = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(got), want) << h;
    // Every half survives the trip back (-0 included).
    ASSERT_EQ(FloatToHalf(got), h) << h;
  }
  // Rounding to nearest, ties to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // rounds up to infinity
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // half of the smallest subnormal: even
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(BFloat16ToFloat(0x3fc0), 1.5f);
}

TEST(Gguf, Q8_0BlocksDecodeToScaleTimesQuant) {
  Bytes blk(34);
  const uint16_t d = FloatToHalf(0.125f);
  std::memcpy(blk.data(), &d, 2);
  for (int j = 0; j < 32; ++j)
    blk[2 + static_cast<size_t>(j)] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
  std::vector<float> y(32);
  DequantizeQ8_0(blk.data(), y.data(), 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[static_cast<size_t>(j)], 0.125f * (j * 8 - 128));
}

// Q4_K (ggml-common.h block_q4_K): f16 d, f16 dmin, 12 bytes of 6-bit scales and mins for 8
// sub-blocks of 32, 128 bytes of nibbles. Sub-block s of 64-value group g = s / 2 takes the low
// nibbles of qs[32 g .. 32 g + 31] when s is even, the high nibbles when odd. The 12 bytes: for
// s < 4, scale = byte[s] & 63 and min = byte[s + 4] & 63; for s >= 4, scale = (byte[s + 4] & 15)
// | (byte[s - 4] >> 6) << 4 and min = (byte[s + 4] >> 4) | (byte[s] >> 6) << 4.
void PackScalesMins(const int sc[8], const int mn[8], uint8_t out[12]) {
  std::memset(out, 0, 12);
  for (int s = 0; s < 4; ++s) {
    out[s] = static_cast<uint8_t>(sc[s] & 63);
    out[s + 4] = static_cast<uint8_t>(mn[s] & 63);
  }
  for (int s = 4; s < 8; ++s) {
    out[s + 4] = static_cast<uint8_t>((sc[s] & 15) | ((mn[s] & 15) << 4));
    out[s - 4] |= static_cast<uint8_t>((sc[s] >> 4) << 6);
    out[s] |= static_cast<uint8_t>((mn[s] >> 4) << 6);
  }
}

TEST(Gguf, Q4_KBlocksMatchTheirDefinition) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    Bytes blk(144);
    const float d = 0.01f * static_cast<float>(1 + rng() % 100),
                dmin = 0.003f * static_cast<float>(rng() % 100);
    const uint16_t dh = FloatToHalf(d), mh = FloatToHalf(dmin);
    std::memcpy(blk.data(), &dh, 2);
    std::memcpy(blk.data() + 2, &mh, 2);
    int sc[8], mn[8];
    for (int s = 0; s < 8; ++s)
      sc[s] = static_cast<int>(rng() % 64), mn[s] = static_cast<int>(rng() % 64);
    PackScalesMins(sc, mn, blk.data() + 4);
    int q[256];
    for (int g = 0; g < 4; ++g) {
      for (int l = 0; l < 32; ++l) {
        const int lo = static_cast<int>(rng() % 16), hi = static_cast<int>(rng() % 16);
        blk[16 + static_cast<size_t>(32 * g + l)] = static_cast<uint8_t>(lo | hi << 4);
        q[64 * g + l] = lo;
        q[64 * g + 32 + l] = hi;
      }
    }
    std::vector<float> y(256);
    DequantizeQ4_K(blk.data(), y.data(), 256);
    const double D = HalfToFloat(dh), M = HalfToFloat(mh);
    for (int k = 0; k < 256; ++k) {
      const int s = k / 32;
      const double want = D * sc[s] * q[k] - M * mn[s];
      // Two float roundings (d * sc and dmin * m) and one of the result: a few ulp of the terms.
      const double tol = 4e-7 * (std::fabs(D * sc[s] * q[k]) + std::fabs(M * mn[s])) + 1e-30;
      ASSERT_NEAR(y[static_cast<size_t>(k)], want, tol) << "trial " << trial << " k " << k;
    }
  }
}

// Q4_0 (block_q4_0): f16 d, 16 bytes of nibbles; value j < 16 = d * (low nibble of byte j - 8),
// value 16 + j = d * (its high nibble - 8). The products are exact in float (4-bit q - 8, 11-bit
// d), so they are compared with ==.
TEST(Gguf, Q4_0BlocksMatchTheirDefinition) {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 50; ++trial) {
    Bytes blk(18);
    const uint16_t dh =
        FloatToHalf(0.01f * static_cast<float>(1 + rng() % 100) * (trial % 2 == 0 ? 1.0f : -1.0f));
    std::memcpy(blk.data(), &dh, 2);
    int q[32];
    for (int j = 0; j < 16; ++j) {
      q[j] = static_cast<int>(rng() % 16);
      q[16 + j] = static_cast<int>(rng() % 16);
      blk[2 + static_cast<size_t>(j)] = static_cast<uint8_t>(q[j] | q[16 + j] << 4);
    }
    std::vector<float> y(32);
    DequantizeQ4_0(blk.data(), y.data(), 32);
    const double D = HalfToFloat(dh);
    for (int k = 0; k < 32; ++k) {
      ASSERT_EQ(y[static_cast<size_t>(k)], D * (q[k] - 8)) << "trial " << trial << " k " << k;
    }
  }
}

// Q5_K (block_q5_K): f16 d, f16 dmin, Q4_K's 12 bytes of scales and mins, qh[32], qs[128]. Value k
// of sub-block s = k / 32 (l = k % 32) is d * scale_s * q - dmin * min_s, q 5 bits: its low 4 bits
// the nibble of qs[32 (s / 2) + l] (low for even s, high for odd), its bit 4 bit s of qh[l].
TEST(Gguf, Q5_KBlocksMatchTheirDefinition) {
  std::mt19937 rng(6);
  for (int trial = 0; trial < 50; ++trial) {
    Bytes blk(176, 0);
    const float d = 0.01f * static_cast<float>(1 + rng() % 100),
                dmin = 0.003f * static_cast<float>(rng() % 100);
    const uint16_t dh = FloatToHalf(d), mh = FloatToHalf(dmin);
    std::memcpy(blk.data(), &dh, 2);
    std::memcpy(blk.data() + 2, &mh, 2);
    int sc[8], mn[8];
    for (int s = 0; s < 8; ++s)
      sc[s] = static_cast<int>(rng() % 64), mn[s] = static_cast<int>(rng() % 64);
    PackScalesMins(sc, mn, blk.data() + 4);
    int q[256];
    for (int k = 0; k < 256; ++k) {
      q[k] = static_cast<int>(rng() % 32);
      const int s = k / 32, l = k % 32;
      blk[48 + static_cast<size_t>(32 * (s / 2) + l)] |=
          static_cast<uint8_t>((q[k] & 15) << (s % 2 == 0 ? 0 : 4));
      blk[16 + static_cast<size_t>(l)] |= static_cast<uint8_t>((q[k] >> 4) << s);
    }
    std::vector<float> y(256);
    DequantizeQ5_K(blk.data(), y.data(), 256);
    const double D = HalfToFloat(dh), M = HalfToFloat(mh);
    for (int k = 0; k < 256; ++k) {
      const int s = k / 32;
      const double want = D * sc[s] * q[k] - M * mn[s];
      // As Q4_K: two float roundings (d * sc and dmin * m) and one of the result.
      const double tol = 4e-7 * (std::fabs(D * sc[s] * q[k]) + std::fabs(M * mn[s])) + 1e-30;
      ASSERT_NEAR(y[static_cast<size_t>(k)], want, tol) << "trial " << trial << " k " << k;
    }
  }
}

// Q6_K (block_q6_K): ql[128] low 4 bits, qh[64] high 2 bits, int8 scales[16] (one per 16
// values), f16 d; value = d * scale * (q - 32) with q 6 bits. For value k: half h = k / 128,
// r = k % 128, quarter c = r / 32, l = r % 32: the low nibble is ql[64 h + l + 32 (c & 1)], low
// half for c < 2, high half otherwise; the high bits are bits 2c..2c+1 of qh[32 h + l]; the scale
// is scales[8 h + 2 c + l / 16].
TEST(Gguf, Q6_KBlocksMatchTheirDefinition) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    Bytes blk(210, 0);
    int q[256];
    int8_t scales[16];
    for (int s = 0; s < 16; ++s)
      scales[s] = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
    for (int k = 0; k < 256; ++k) {
      q[k] = static_cast<int>(rng() % 64);
      const int h = k / 128, r = k % 128, c = r / 32, l = r % 32;
      uint8_t& lo = blk[static_cast<size_t>(64 * h + l + 32 * (c & 1))];
      lo |= static_cast<uint8_t>((q[k] & 15) << (c < 2 ? 0 : 4));
      blk[128 + static_cast<size_t>(32 * h + l)] |= static_cast<uint8_t>((q[k] >> 4) << (2 * c));
    }
    std::memcpy(blk.data() + 192, scales, 16);
    const float d = 0.001f * static_cast<float>(1 + rng() % 1000);
    const uint16_t dh = FloatToHalf(d);
    std::memcpy(blk.data() + 208, &dh, 2);
    std::vector<float> y(256);
    DequantizeQ6_K(blk.data(), y.data(), 256);
    const double D = HalfToFloat(dh);
    for (int k = 0; k < 256; ++k) {
      const int h = k / 128, r = k % 128, c = r / 32, l = r % 32;
      const double want = D * scales[8 * h + 2 * c + l / 16] * (q[k] - 32);
      ASSERT_NEAR(y[static_cast<size_t>(k)], want, 3e-7 * std::fabs(want) + 1e-30)
          << "trial " << trial << " k " << k;
    }
  }
}

TEST(Gguf, WriterOutputReadsBackBitForBit) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  std::vector<float> x(64 * 3);
  for (float& v : x) v = nd(rng);
  std::vector<GgufTensorOut> ts;
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0}) {
    GgufTensorOut o;
    o.name = GgmlTypeName(static_cast<uint32_t>(t));
    o.ne = {64, 3};
    o.type = static_cast<uint32_t>(t);
    o.data = EncodeTensor(x, t);
    ts.push_back(o);
  }
  const std::string path = TempFile("written.gguf");
  WriteGguf(path, {{"general.architecture", GgufString("test")}, {"n", GgufU32(7)}}, ts);
  const GgufFile g = GgufFile::Open(path);
  EXPECT_EQ(g.Int("n"), 7);
  std::vector<float> y(x.size());
  g.ReadFloats(*g.FindTensor("F32"), y);
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * 4), 0);
  g.ReadFloats(*g.FindTensor("F16"), y);
  for (size_t k = 0; k < x.size(); ++k) EXPECT_NEAR(y[k], x[k], std::fabs(x[k]) * 4.9e-4 + 6e-8);
  g.ReadFloats(*g.FindTensor("BF16"), y);
  for (size_t k = 0; k < x.size(); ++k) EXPECT_NEAR(y[k], x[k], std::fabs(x[k]) * 3.91e-3);
  g.ReadFloats(*g.FindTensor("Q8_0"), y);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j)
      amax = std::max(amax, std::fabs(x[b * 32 + static_cast<size_t>(j)]));
    // Half a quantization step (d = amax / 127), plus d's own F16 rounding over 127 steps.
    for (int j = 0; j < 32; ++j) {
      const size_t k = b * 32 + static_cast<size_t>(j);
      EXPECT_NEAR(y[k], x[k], amax / 127 * 0.5 + amax * 4.9e-4 + 1e-7);
    }
  }
  std::remove(path.c_str());
}

// ---- the llama mapping ---------------------------------------------------------------------------

const std::string kStoriesRel = "models/stories260K/stories260K.bin";
const std::string kTokRel = "models/stories260K/tok512.bin";

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(GgufModel, Stories260KRoundTripIsBitIdentical) {
  const std::string bin = testing::SharedPath(kStoriesRel);
  STRETCH_SKIP_IF_MISSING(bin);
  const Model m = LoadLlama2c(bin);
  const Tokenizer tok = Tokenizer::LoadLlama2c(testing::SharedPath(kTokRel));
  const std::string gguf = TempFile("s260.gguf"), back = TempFile("s260_back.bin");
  SaveGgufModel(m, gguf, static_cast<uint32_t>(GgmlType::kF32), &tok);
  const GgufModelHeader h = ReadGgufModelHeader(gguf);
  EXPECT_EQ(h.format, "GGUF version 3 (llama, F32)");
  const Model g = LoadGgufModel(gguf);
  EXPECT_EQ(g.config.dim, m.config.dim);
  EXPECT_EQ(g.config.hidden_dim, m.config.hidden_dim);
  EXPECT_EQ(g.config.n_layers, m.config.n_layers);
  EXPECT_EQ(g.config.n_heads, m.config.n_heads);
  EXPECT_EQ(g.config.n_kv_heads, m.config.n_kv_heads);
  EXPECT_EQ(g.config.vocab_size, m.config.vocab_size);
  EXPECT_EQ(g.config.seq_len, m.config.seq_len);
  EXPECT_EQ(g.config.shared_classifier, m.config.shared_classifier);
  EXPECT_EQ(g.config.rope_base, m.config.rope_base);
  EXPECT_EQ(g.config.norm_eps, m.config.norm_eps);
  EXPECT_TRUE(SameBits(g.weights.token_embedding, m.weights.token_embedding));
  EXPECT_TRUE(SameBits(g.weights.final_norm, m.weights.final_norm));
  for (size_t l = 0; l < m.weights.layers.size(); ++l) {
    const LayerWeights &a = m.weights.layers[l], &b = g.weights.layers[l];
    for (auto p : {&LayerWeights::attn_norm, &LayerWeights::wq, &LayerWeights::wk,
                   &LayerWeights::wv, &LayerWeights::wo, &LayerWeights::ffn_norm, &LayerWeights::w1,
                   &LayerWeights::w2, &LayerWeights::w3}) {
      EXPECT_TRUE(SameBits(a.*p, b.*p)) << "layer " << l;
    }
  }
  // The vocabulary in SentencePiece's spelling (what llama.cpp needs to load the file).
  const GgufFile f = GgufFile::Open(gguf);
  const GgufValue* tokens = f.Find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->array.size(), 512u);
  EXPECT_EQ(tokens->array[1].s, "<s>");
  EXPECT_EQ(tokens->array[2].s, "</s>");
  for (int id = 3; id < 512; ++id) {
    std::string want = tok.Piece(id);
    for (size_t at; (at = want.find(' ')) != std::string::npos;)
      want.replace(at, 1, "\xe2\x96\x81");
    EXPECT_EQ(tokens->array[static_cast<size_t>(id)].s, want) << id;
  }
  // And back to llama2.c: the same weights again.
  SaveLlama2cVersion1(g, back);
  const Model r = LoadLlama2c(back);
  EXPECT_TRUE(SameBits(r.weights.token_embedding, m.weights.token_embedding));
  EXPECT_TRUE(SameBits(r.weights.layers[4].w2, m.weights.layers[4].w2));
  std::remove(gguf.c_str());
  std::remove(back.c_str());
}

// A small llama model file written through the library's writer, then damaged one key or tensor
// at a time: each is refused naming what is wrong.
TEST(GgufModel, RefusesWhatItCannotRunByName) {
  auto write = [](const std::string& path, std::vector<std::pair<std::string, GgufValue>> kv,
                  bool extra_tensor, int64_t q_rows) {
    const int64_t C = 32, F = 64, V = 16;
    std::vector<GgufTensorOut> ts;
    auto add = [&](const std::string& n, std::vector<int64_t> ne) {
      int64_t count = 1;
      for (int64_t d : ne) count *= d;
      ts.push_back(
          {n, ne, 0,
           EncodeTensor(std::vector<float>(static_cast<size_t>(count), 0.5f), GgmlType::kF32)});
    };
    add("token_embd.weight", {C, V});
    add("blk.0.attn_norm.weight", {C});
    add("blk.0.attn_q.weight", {C, q_rows});
    add("blk.0.attn_k.weight", {C, C});
    add("blk.0.attn_v.weight", {C, C});
    add("blk.0.attn_output.weight", {C, C});
    add("blk.0.ffn_norm.weight", {C});
    add("blk.0.ffn_gate.weight", {C, F});
    add("blk.0.ffn_down.weight", {F, C});
    add("blk.0.ffn_up.weight", {C, F});
    add("output_norm.weight", {C});
    // LongRoPE's list without llama.rope.scaling.type longrope: a tensor of no use.
    if (extra_tensor) add("rope_factors_long.weight", {8});
    WriteGguf(path, kv, ts);
  };
  auto base = [] {
    return std::vector<std::pair<std::string, GgufValue>>{
        {"general.architecture", GgufString("llama")}, {"llama.context_length", GgufU32(64)},
        {"llama.embedding_length", GgufU32(32)},       {"llama.block_count", GgufU32(1)},
        {"llama.feed_forward_length", GgufU32(64)},    {"llama.attention.head_count", GgufU32(2)}};
  };
  const std::string path = TempFile("tiny.gguf");
  auto error = [&](std::vector<std::pair<std::string, GgufValue>> kv, bool extra, int64_t q_rows) {
    write(path, std::move(kv), extra, q_rows);
    try {
      LoadGgufModel(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(base(), false, 32), "");  // the undamaged file loads
  auto kv = base();
  kv[0].second = GgufString("gpt2");
  EXPECT_NE(error(kv, false, 32).find("general.architecture is \"gpt2\""), std::string::npos);
  // A relative of a family that no family reads: named with what stretch would get wrong.
  kv[0].second = GgufString("qwen2moe");
  EXPECT_NE(error(kv, false, 32).find("\"qwen2moe\" (its feed-forward is a mixture of experts)"),
            std::string::npos);
  kv[0].second = GgufString("gemma");
  EXPECT_NE(error(kv, false, 32).find("Gemma 1 is not read yet"), std::string::npos);
  kv = base();
  kv.push_back({"llama.rope.scaling.type", GgufString("su")});
  EXPECT_NE(error(kv, false, 32).find("llama.rope.scaling.type"), std::string::npos);
  kv = base();
  kv.erase(kv.begin() + 3);  // block_count
  EXPECT_NE(error(kv, false, 32).find("llama.block_count is missing"), std::string::npos);
  kv = base();
  kv[5].second = GgufU32(3);  // 32 not divisible by 3 heads
  EXPECT_NE(error(kv, false, 32).find("head_count"), std::string::npos);
  EXPECT_NE(error(base(), true, 32).find("rope_factors_long.weight"), std::string::npos);
  EXPECT_NE(error(base(), false, 16).find("blk.0.attn_q.weight has shape"), std::string::npos);
  std::remove(path.c_str());
}

TEST(GgufModel, VocabularyFilesOpenAndSayWhatTheyLack) {
  for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"}) {
    const std::string path = testing::SharedPath(std::string("models/ggml_vocab/") + name);
    STRETCH_SKIP_IF_MISSING(path);
    const GgufFile g = GgufFile::Open(path);
    const GgufValue* tokens = g.Find("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr) << name;
    EXPECT_GT(tokens->array.size(), 1000u) << name;
    EXPECT_EQ(tokens->elem_type, GgufValueType::kString);
    // A vocabulary-only file has no weights: loading it as a model names what is missing.
    try {
      ReadGgufModelHeader(path);
      ADD_FAILURE() << name << " loaded as a model";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

// llama.cpp's tokenizer test vectors (../shared/models/ggml_vocab: .inp holds the cases, each
// followed by "\n__ggml_vocab_test__\n"; .out one line of ids per case, no BOS).
std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

TEST(GgufTokenizer, LlamaSpmVocabularyPassesLlamaCppsTestVectors) {
  const std::string gguf = testing::SharedPath("models/ggml_vocab/ggml-vocab-llama-spm.gguf");
  STRETCH_SKIP_IF_MISSING(gguf);
  const Tokenizer t = ReadGgufTokenizer(gguf);
  EXPECT_EQ(t.vocab_size(), 32000);
  const std::string inp = ReadAll(gguf + ".inp"), out = ReadAll(gguf + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> cases;
  for (size_t at = 0; at < inp.size();) {
    const size_t end = inp.find(sep, at);
    ASSERT_NE(end, std::string::npos) << "a case without its separator at " << at;
    cases.push_back(inp.substr(at, end - at));
    at = end + sep.size();
  }
  std::vector<std::string> lines;
  for (size_t at = 0; at < out.size();) {
    const size_t end = out.find('\n', at);
    lines.push_back(out.substr(at, end - at));
    at = end == std::string::npos ? out.size() : end + 1;
  }
  ASSERT_EQ(cases.size(), lines.size());
  ASSERT_GT(cases.size(), 40u);
  for (size_t k = 0; k < cases.size(); ++k) {
    std::string got;
    for (int id : t.Encode(cases[k], /*bos=*/false, /*eos=*/false)) got += " " + std::to_string(id);
    EXPECT_EQ(got, lines[k]) << "case " << k << ": \"" << cases[k] << "\"";
  }
}

TEST(GgufTokenizer, RefusesAVocabularyItCannotRunByName) {
  const std::string gpt2 = testing::SharedPath("models/ggml_vocab/ggml-vocab-gpt-2.gguf");
  STRETCH_SKIP_IF_MISSING(gpt2);
  try {
    ReadGgufTokenizer(gpt2);
    ADD_FAILURE() << "a gpt2 vocabulary was read as SentencePiece";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model is \"gpt2\""), std::string::npos)
        << e.what();
  }
}

// A model file whose vocabulary is GPT-2's byte-level BPE: the loader gives that tokenizer, and a
// GGUF written from it carries the vocabulary over key for key.
TEST(GgufTokenizer, AModelWithAGpt2VocabularyEncodesWithIt) {
  const std::string gpt2 = testing::SharedPath("models/ggml_vocab/ggml-vocab-gpt-2.gguf");
  STRETCH_SKIP_IF_MISSING(gpt2);
  const GgufFile vocab = GgufFile::Open(gpt2);
  ModelConfig c;
  c.dim = 8;
  c.hidden_dim = 16;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.vocab_size = 50257;
  c.seq_len = 64;
  const std::string path =
      fmt::format("{}stretch_gguf_{}_gpt2.gguf", ::testing::TempDir(), getpid());
  const GgufKeys keys = GgufTokenizerKeys(vocab);
  SaveGgufModel(testing::RandomModel(c, 1), path, static_cast<uint32_t>(GgmlType::kF32), nullptr,
                nullptr, &keys);
  const LoadedModel m = LoadModelFile(path, {"", true});
  ASSERT_NE(m.tokenizer, nullptr);
  EXPECT_EQ(m.tokenizer->vocab_size(), 50257);
  // llama.cpp's vectors for this vocabulary: "Hello world" is 15496 995, no BOS added.
  EXPECT_EQ(m.tokenizer->EncodePrompt("Hello world"), (std::vector<int>{15496, 995}));
  const GgufFile written = GgufFile::Open(path);
  for (const auto& [key, value] : vocab.metadata()) {
    if (!key.starts_with("tokenizer.")) continue;
    const GgufValue* got = written.Find(key);
    ASSERT_NE(got, nullptr) << key;
    EXPECT_EQ(got->Describe(), value.Describe()) << key;
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace stretch
