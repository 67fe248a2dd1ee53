// GGUF matrices kept in their file's type (WeightStorage::kAsStored, src/kernels/packed.h) give
// the logits of the same file loaded as float32 (the exact path), for every packed type and for
// the families whose files hold their matrices differently: LLaMA (as stretch holds them), Qwen 3
// (q and k rows in rotate-half order, which the loader puts back), Phi-3 (q, k, v fused into one
// tensor, and gate and up) and Gemma 2 (the classifier is the embedding). Corrupt blocks are
// refused by tensor name on both paths. A Hugging Face folder's F16 and BF16 matrices kept as
// stored give the logits of the same folder loaded as float32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/hf_model.h"
#include "src/io/safetensors.h"
#include "src/kernels/ops.h"
#include "src/kernels/packed_bf16.h"
#include "src/model/family.h"
#include "src/model/transformer.h"
#include "tests/testing/files.h"
#include "tests/testing/logits.h"
#include "tests/testing/packed_bounds.h"
#include "tests/testing/random_model.h"

namespace stretch {
namespace {

std::string TempPath(const std::string& name) {
  return (testing::ProgramTempDir("stretch_packed_") / name).string();
}

// A random model of `family` whose every matrix has rows of whole K-quant blocks (256 values).
Model FamilyModel(const char* family, uint64_t seed) {
  ModelConfig c;
  c.dim = 256;
  c.hidden_dim = 512;
  c.n_layers = 2;
  c.n_heads = 4;  // heads of 64, 2 kv heads
  c.n_kv_heads = 2;
  c.vocab_size = 300;
  c.seq_len = 64;
  c.norm_eps = 1e-5f;
  c.family = family;
  const ModelFamily* f = FindFamilyByGguf(family);
  EXPECT_NE(f, nullptr) << family;
  SetFamilyBlock(*f, c);
  if (f->softcaps) {  // Gemma 2: llama.cpp's files of it hold a tied classifier and local layers
    c.attn_softcap = 50.0;
    c.final_softcap = 30.0;
    c.shared_classifier = true;
    SetSwaPattern(c, {2, 16, 0.0});
  }
  return testing::RandomModel(c, seed);
}

// The ggml type of a packed type.
GgmlType GgmlOf(PackedType t) {
  switch (t) {
    case PackedType::kF16: return GgmlType::kF16;
    case PackedType::kBF16: return GgmlType::kBF16;
    case PackedType::kQ8_0: return GgmlType::kQ8_0;
    case PackedType::kQ4_0: return GgmlType::kQ4_0;
    case PackedType::kQ4_K: return GgmlType::kQ4_K;
    case PackedType::kQ5_K: return GgmlType::kQ5_K;
    case PackedType::kQ6_K: return GgmlType::kQ6_K;
  }
  return GgmlType::kF32;
}

// `blocks` random blocks of Q4_0 or a K-quant for a matrix with rows of `cols` values: random
// quants and sub-block scales, d (and Q4_K's and Q5_K's dmin) chosen so that the weights have the
// float model's size (mean 0, rms about 1 / sqrt(cols), as testing::RandomModel's), with sc and m
// uniform in 0..63 (mean 31.5, mean square 1333.5, variance 341.25):
//   - Q4_K: d sc q (q uniform in 0..15: mean 7.5, mean square 77.5) has mean 31.5 * 7.5 d and the
//     mins dmin m take off 31.5 dmin, so dmin = 7.5 d; the rest varies by sqrt(1333.5 * 77.5 -
//     236.25^2 + 7.5^2 * 341.25) d, about 258 d (250 below);
//   - Q5_K: q uniform in 0..31 (mean 15.5, mean square 325.5), so dmin = 15.5 d and the rms is
//     sqrt(1333.5 * 325.5 - 488.25^2 + 15.5^2 * 341.25) d, about 527 d;
//   - Q6_K: d sc (q - 32) varies by about 1330 d (sc an int8, q - 32 in -32..31);
//   - Q4_0: d (q - 8), q uniform in 0..15: mean -0.5 d (no mins to take it off; small beside the
//     rms), mean square 77.5 - 16 * 7.5 + 64 = 21.5, so an rms of sqrt(21.5) d, about 4.64 d.
// stretch writes none of these (llama.cpp's llama-quantize does), and random blocks exercise every
// bit of the decoders as well as quantized weights would.
std::vector<uint8_t> RandomBlocks(PackedType t, int64_t blocks, int64_t cols, Rng& rng) {
  const int64_t bb = PackedBlockBytes(t);
  const double rms = 1.0 / std::sqrt(static_cast<double>(cols));
  std::vector<uint8_t> out(static_cast<size_t>(blocks * bb));
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng.Uniform() * 256.0);
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* blk = out.data() + b * bb;
    auto put = [&](int at, double v) {
      const uint16_t h = FloatToHalf(static_cast<float>(v));
      std::memcpy(blk + at, &h, 2);
    };
    const double jitter = 0.8 + 0.4 * rng.Uniform();
    switch (t) {
      case PackedType::kQ4_K:
        put(0, jitter * rms / 250);
        put(2, jitter * 7.5 * rms / 250);
        break;
      case PackedType::kQ5_K:
        put(0, jitter * rms / 527);
        put(2, jitter * 15.5 * rms / 527);
        break;
      case PackedType::kQ6_K: put(208, jitter * rms / 1330); break;
      case PackedType::kQ4_0: put(0, jitter * rms / 4.64); break;
      default: ADD_FAILURE() << "no random blocks of " << PackedTypeName(t);
    }
  }
  return out;
}

// `src` (an F32 GGUF file) written again to `dst` with every matrix whose rows are whole blocks of
// `type`: the 16-bit floats and Q8_0 encoded from the values, Q4_0 and the K-quants random blocks.
void Requantize(const std::string& src, const std::string& dst, PackedType type, uint64_t seed) {
  const GgufFile g = GgufFile::Open(src);
  std::vector<GgufTensorOut> tensors;
  Rng rng(seed);
  for (const GgufTensorInfo& t : g.tensors()) {
    GgufTensorOut o{t.name, t.ne, t.type, {}};
    const std::span<const uint8_t> bytes = g.TensorData(t);
    o.data.assign(bytes.begin(), bytes.end());
    if (t.ne.size() == 2 && t.ne[0] % PackedBlockElems(type) == 0) {
      o.type = static_cast<uint32_t>(GgmlOf(type));
      if (type == PackedType::kQ4_0 || type == PackedType::kQ4_K || type == PackedType::kQ5_K ||
          type == PackedType::kQ6_K) {
        o.data = RandomBlocks(type, t.elements / PackedBlockElems(type), t.ne[0], rng);
      } else {
        std::vector<float> values(static_cast<size_t>(t.elements));
        g.ReadFloats(t, values);
        o.data = EncodeTensor(values, GgmlOf(type));
      }
    }
    tensors.push_back(std::move(o));
  }
  WriteGguf(dst, g.metadata(), tensors);
}

// Logits of every position of `tokens` run at once (prefill) and of the same tokens one at a
// time through the cache (decode: the one-row products).
struct Outputs {
  std::vector<float> prefill, decode;
};
Outputs PrefillAndDecode(const Model& m, const std::vector<int>& tokens) {
  Outputs o;
  o.prefill = testing::Logits(m, "direct", tokens);
  Transformer model(m);
  KvCache cache(m.config, static_cast<int64_t>(tokens.size()));
  std::vector<float> hidden, row(static_cast<size_t>(m.config.vocab_size));
  for (const int t : tokens) {
    model.Forward(std::span<const int>(&t, 1), cache, hidden);
    model.Logits(hidden.data(), 1, row.data());
    o.decode.insert(o.decode.end(), row.begin(), row.end());
  }
  return o;
}

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (const float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// The two paths multiply the same float values (the packed decoders equal the float32 loader's,
// tests/kernels/packed_test.cc) and differ only in the order of each product's sums: in prefill
// none (these products are one sgemm call of the same shape on the same values either way), in
// decode the packed kernels' blocks and per-block scales against the float one-row product.
// Measured here: prefill bit for bit; decode up to 1.4e-5 of the largest logit (Q6_K, whose random
// int8 sub-block scales make weights and dots large beside their sums), 1e-6 and less for the
// others. 1e-4 leaves room for other machines' vector widths and stays far below what one
// changed weight block does (the Perturbed test: 1.7e-3).
constexpr double kRelativeBudget = 1e-4;

struct Case {
  const char* family;
  PackedType type;
};

class PackedWeights : public ::testing::TestWithParam<Case> {};

TEST_P(PackedWeights, EqualTheFloat32PathInPrefillAndDecode) {
  const Case k = GetParam();
  const Model m = FamilyModel(k.family, 7);
  const std::string f32 = TempPath(std::string(k.family) + ".f32.gguf");
  const std::string path = TempPath(std::string(k.family) + "." + PackedTypeName(k.type) + ".gguf");
  SaveGgufModel(m, f32, static_cast<uint32_t>(GgmlType::kF32), nullptr);
  Requantize(f32, path, k.type, 11);
  const Model exact = LoadGgufModel(path, WeightStorage::kFloat32);
  const Model packed = LoadGgufModel(path, WeightStorage::kAsStored);
  std::remove(f32.c_str());
  std::remove(path.c_str());
  ASSERT_FALSE(exact.weights.HasPacked());
  ASSERT_TRUE(packed.weights.HasPacked());
  // Every matrix of the layers is packed (their rows are whole blocks), and the embedding.
  for (const LayerWeights& l : packed.weights.layers) {
    EXPECT_EQ(l.packed.size(), 7u) << "wq wk wv wo w1 w2 w3";
    EXPECT_TRUE(l.wq.empty() && l.w2.empty());
  }
  EXPECT_FALSE(packed.weights.packed_embedding.empty());
  EXPECT_TRUE(packed.weights.token_embedding.empty());

  const std::vector<int> tokens = testing::RandomTokens(40, m.config.vocab_size, 3);
  const Outputs a = PrefillAndDecode(exact, tokens);
  // Decode in integers (STRETCH_PACKED_DOT=int8: x quantized to 8 bits per product where the CPU
  // has the kernels). The quantization moves each product by 0.3-0.6% rms of its size
  // (tests/kernels/packed_int8_test.cc checks the kernels tightly against the quantized x), which
  // these random models carry to 0.7-4% of their largest logit (measured: Q4_K and Q6_K blocks
  // 0.7-3.9%, Q8_0 of the sharper float model 1.1-2.4%). So this checks the wiring, that each
  // product multiplies its own input quantized for its own type: a wrong or stale input moves the
  // logits by their whole size. The mean per-token loss over these 119 tokens moved by -0.006 to
  // +0.002 nats with K-quant blocks and by +0.04 to +0.15 with Q8_0 of the sharper model.
  {
    const testing::ProductsFor integers(PackedProducts::kInt8WhereAvailable);
    const Outputs q = PrefillAndDecode(packed, tokens);
    EXPECT_LT(testing::MaxAbsDiff(a.decode, q.decode), 0.1 * MaxAbs(a.decode))
        << k.family << " " << PackedTypeName(k.type);
  }
  const testing::ProductsFor floats(PackedProducts::kFloat);
  const Outputs b = PrefillAndDecode(packed, tokens);
  const double scale = MaxAbs(a.prefill);
  ASSERT_GT(scale, 0.0);
  EXPECT_LT(testing::MaxAbsDiff(a.prefill, b.prefill), kRelativeBudget * scale)
      << k.family << " " << PackedTypeName(k.type) << " prefill, largest logit " << scale;
  EXPECT_LT(testing::MaxAbsDiff(a.decode, b.decode), kRelativeBudget * scale)
      << k.family << " " << PackedTypeName(k.type) << " decode, largest logit " << scale;
  // The default (STRETCH_PACKED_DOT unset: fast): prefill in floats, within the float budget,
  // but for BF16 where the CPU has the bfloat16 kernel (x rounded to bfloat16: 0.2-0.4% rms of
  // each product, tests/kernels/packed_bf16_test.cc, so the wiring's budget of the integer
  // products); decode as the integer products, within theirs.
  {
    const testing::ProductsFor fast(PackedProducts::kFast);
    const Outputs q = PrefillAndDecode(packed, tokens);
    const bool bf16 = k.type == PackedType::kBF16 && PackedBf16Available();
    EXPECT_LT(testing::MaxAbsDiff(a.prefill, q.prefill), (bf16 ? 0.1 : kRelativeBudget) * scale)
        << k.family << " " << PackedTypeName(k.type) << " prefill (default products)";
    if (bf16) {
      EXPECT_GT(testing::MaxAbsDiff(a.prefill, q.prefill), 0.0)
          << "BF16 prefill did not take the bfloat16 products";
    }
    EXPECT_LT(testing::MaxAbsDiff(a.decode, q.decode), 0.1 * MaxAbs(a.decode))
        << k.family << " " << PackedTypeName(k.type) << " decode (default products)";
  }
}

INSTANTIATE_TEST_SUITE_P(
    TypesAndFamilies, PackedWeights,
    ::testing::Values(Case{"llama", PackedType::kF16}, Case{"llama", PackedType::kBF16},
                      Case{"llama", PackedType::kQ8_0}, Case{"llama", PackedType::kQ4_K},
                      Case{"llama", PackedType::kQ6_K}, Case{"llama", PackedType::kQ4_0},
                      Case{"llama", PackedType::kQ5_K}, Case{"qwen3", PackedType::kQ4_K},
                      Case{"qwen3", PackedType::kQ8_0}, Case{"phi3", PackedType::kQ6_K},
                      Case{"gemma2", PackedType::kQ4_K}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(info.param.family) + "_" + PackedTypeName(info.param.type);
    });

// The file whose mapping (in /proc/self/maps) holds address p: its path, or "[heap]" or "" for
// memory the program allocated.
std::string MappedFileOf(const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode, path;
    in >> range >> perms >> offset >> dev >> inode;
    std::getline(in >> std::ws, path);
    const size_t dash = range.find('-');
    const uintptr_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
    const uintptr_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (at >= lo && at < hi) return path;
  }
  return "";
}

// A Hugging Face folder in F16 or BF16: its matrices read as stored (q and k rows put back from
// rotate-half order, Phi-3's fused tensors split, Gemma's tied classifier) give the float32 load's
// logits within the same budget: the same 16-bit values, widened in the products instead of once.
struct HfCase {
  const char* family;
  SafetensorsDtype dtype;
};

class PackedHfWeights : public ::testing::TestWithParam<HfCase> {};

TEST_P(PackedHfWeights, EqualTheFloat32Path) {
  const testing::ProductsFor floats(PackedProducts::kFloat);
  const HfCase k = GetParam();
  const Model m = FamilyModel(k.family, 5);
  const std::string dir =
      TempPath(std::string("hf-") + k.family + "-" + std::string(SafetensorsDtypeName(k.dtype)));
  SaveHfModel(m, dir, k.dtype, {}, nullptr);
  const Model exact = LoadHfModel(dir, WeightStorage::kFloat32);
  const Model packed = LoadHfModel(dir, WeightStorage::kAsStored);
  const StoredWeights stored = HfStoredWeightBytes(dir);
  // The matrices are used where the safetensors file's mapping holds them (as a GGUF file's),
  // but q's, whose rows are put back from rotate-half order in a copy.
  const LayerWeights& first = packed.weights.layers[0];
  ASSERT_NE(first.Matrix(first.w2).packed, nullptr);
  ASSERT_NE(first.Matrix(first.wq).packed, nullptr);
  EXPECT_TRUE(MappedFileOf(first.Matrix(first.w2).packed->data).starts_with(dir))
      << MappedFileOf(first.Matrix(first.w2).packed->data);
  EXPECT_FALSE(MappedFileOf(first.Matrix(first.wq).packed->data).starts_with(dir));
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(exact.weights.HasPacked());
  ASSERT_TRUE(packed.weights.HasPacked());
  for (const LayerWeights& l : packed.weights.layers) {
    EXPECT_EQ(l.packed.size(), 7u) << "wq wk wv wo w1 w2 w3";
    EXPECT_TRUE(l.wq.empty() && l.w2.empty());
    EXPECT_FALSE(l.attn_norm.empty());  // vectors stay float32
  }
  EXPECT_FALSE(packed.weights.packed_embedding.empty());
  EXPECT_EQ(stored.types, SafetensorsDtypeName(k.dtype));
  // 2 bytes a weight for the matrices, 4 for the norms
  const int64_t norms = m.config.dim * (2 * m.config.n_layers + 1) +
                        (m.config.post_norms ? 2 * m.config.n_layers * m.config.dim : 0) +
                        (m.config.qk_norm ? 2 * m.config.n_layers * m.config.head_dim() : 0);
  EXPECT_EQ(stored.bytes, 2 * (m.config.ParameterCount() - norms) + 4 * norms) << k.family;

  const std::vector<int> tokens = testing::RandomTokens(40, m.config.vocab_size, 3);
  const Outputs a = PrefillAndDecode(exact, tokens), b = PrefillAndDecode(packed, tokens);
  const double scale = MaxAbs(a.prefill);
  ASSERT_GT(scale, 0.0);
  EXPECT_LT(testing::MaxAbsDiff(a.prefill, b.prefill), kRelativeBudget * scale) << k.family;
  EXPECT_LT(testing::MaxAbsDiff(a.decode, b.decode), kRelativeBudget * scale) << k.family;
}

INSTANTIATE_TEST_SUITE_P(Families, PackedHfWeights,
                         ::testing::Values(HfCase{"llama", SafetensorsDtype::kBF16},
                                           HfCase{"llama", SafetensorsDtype::kF16},
                                           HfCase{"qwen3", SafetensorsDtype::kBF16},
                                           HfCase{"phi3", SafetensorsDtype::kF16},
                                           HfCase{"gemma2", SafetensorsDtype::kBF16}),
                         [](const ::testing::TestParamInfo<HfCase>& info) {
                           return std::string(info.param.family) + "_" +
                                  std::string(SafetensorsDtypeName(info.param.dtype));
                         });

// The budget above can fail: one weight block of one matrix changed by a quant step in the file
// (the packed load of the changed file against the float32 load of the original) moves the
// logits by far more than it.
TEST(PackedWeightsPerturbed, OneChangedBlockExceedsTheBudget) {
  const testing::ProductsFor floats(PackedProducts::kFloat);
  const Model m = FamilyModel("llama", 7);
  const std::string f32 = TempPath("perturbed.f32.gguf"), path = TempPath("perturbed.q8.gguf"),
                    changed = TempPath("perturbed.changed.gguf");
  SaveGgufModel(m, f32, static_cast<uint32_t>(GgmlType::kF32), nullptr);
  Requantize(f32, path, PackedType::kQ8_0, 11);
  {
    const GgufFile g = GgufFile::Open(path);
    std::vector<GgufTensorOut> tensors;
    for (const GgufTensorInfo& t : g.tensors()) {
      const std::span<const uint8_t> bytes = g.TensorData(t);
      tensors.push_back({t.name, t.ne, t.type, {bytes.begin(), bytes.end()}});
      if (t.name == "blk.0.attn_v.weight") tensors.back().data[2] += 9;  // block 0's first quant
    }
    WriteGguf(changed, g.metadata(), tensors);
  }
  const Model exact = LoadGgufModel(path, WeightStorage::kFloat32);
  const Model packed = LoadGgufModel(changed, WeightStorage::kAsStored);
  for (const std::string& p : {f32, path, changed}) std::remove(p.c_str());
  const std::vector<int> tokens = testing::RandomTokens(40, m.config.vocab_size, 3);
  const Outputs a = PrefillAndDecode(exact, tokens), b = PrefillAndDecode(packed, tokens);
  EXPECT_GT(testing::MaxAbsDiff(a.prefill, b.prefill), kRelativeBudget * MaxAbs(a.prefill));
}

// A block whose scale is NaN or infinite is refused when the model loads, naming the tensor,
// whether its matrices stay packed or become float32.
TEST(PackedWeightsCorrupt, ANonFiniteScaleIsRefusedByName) {
  const Model m = FamilyModel("llama", 7);
  const std::string f32 = TempPath("corrupt.f32.gguf");
  SaveGgufModel(m, f32, static_cast<uint32_t>(GgmlType::kF32), nullptr);
  for (const PackedType type : {PackedType::kQ8_0, PackedType::kQ4_0, PackedType::kQ4_K,
                                PackedType::kQ5_K, PackedType::kQ6_K}) {
    for (const uint16_t bad : {uint16_t{0x7e00}, uint16_t{0x7c00}, uint16_t{0xfc00}}) {
      const std::string path = TempPath("corrupt.gguf"), broken = TempPath("corrupt.bad.gguf");
      Requantize(f32, path, type, 11);
      {
        const GgufFile g = GgufFile::Open(path);
        std::vector<GgufTensorOut> tensors;
        for (const GgufTensorInfo& t : g.tensors()) {
          const std::span<const uint8_t> bytes = g.TensorData(t);
          tensors.push_back({t.name, t.ne, t.type, {bytes.begin(), bytes.end()}});
          if (t.name == "blk.1.ffn_down.weight") {  // the scale of its third block
            const int at = 2 * static_cast<int>(PackedBlockBytes(type)) +
                           (type == PackedType::kQ6_K ? 208 : 0);
            std::memcpy(tensors.back().data.data() + at, &bad, 2);
          }
        }
        WriteGguf(broken, g.metadata(), tensors);
      }
      for (const WeightStorage s : {WeightStorage::kAsStored, WeightStorage::kFloat32}) {
        try {
          LoadGgufModel(broken, s);
          ADD_FAILURE() << PackedTypeName(type) << " scale " << bad << " was accepted";
        } catch (const Error& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("blk.1.ffn_down.weight"), std::string::npos) << what;
          EXPECT_NE(what.find("block 2"), std::string::npos) << what;
          EXPECT_NE(what.find("NaN or infinite"), std::string::npos) << what;
        }
      }
      std::remove(path.c_str());
      std::remove(broken.c_str());
    }
  }
  std::remove(f32.c_str());
}

}  // namespace
}  // namespace stretch
