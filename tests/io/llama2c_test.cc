// Tests of the llama2.c checkpoint loader and exporter (src/io/llama2c.h). Files are written here
// by small writers of the test's own (from the format description in llama2c.h, not through the
// library), so that a layout mistake in the library cannot cancel out in a round trip.
#include "src/io/llama2c.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "tests/testing/config_checks.h"
#include "tests/testing/files.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

using testing::ExpectSameConfig;

// ---------------------------------------------------------------------------------------------
// Helpers

const std::string kStoriesRel = "models/stories260K/stories260K.bin";

std::string TempFile(const std::string& name) {
  // The process id keeps concurrent runs (two build trees, ctest -j) off each other's files.
  return (testing::ProgramTempDir("stretch_io_llama2c_") / name).string();
}

using Bytes = std::vector<unsigned char>;

void AppendU32(Bytes& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<unsigned char>(v >> (8 * i)));
}
void AppendI32(Bytes& b, int32_t v) { AppendU32(b, static_cast<uint32_t>(v)); }
void AppendFloats(Bytes& b, const std::vector<float>& v) {
  const size_t at = b.size();
  b.resize(at + v.size() * 4);
  if (!v.empty()) std::memcpy(b.data() + at, v.data(), v.size() * 4);
}
void PatchI32(Bytes& b, size_t offset, int32_t v) {
  for (int i = 0; i < 4; ++i)
    b[offset + i] = static_cast<unsigned char>(static_cast<uint32_t>(v) >> (8 * i));
}

void WriteFile(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  ASSERT_TRUE(f.good()) << path;
}

Bytes ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The legacy layout, as run.c's memory_map_weights() reads it. `rope_fill` is written into the two
// unused RoPE tables: a value the loader must never let into a weight.
Bytes LegacyFile(const Model& m, float rope_fill = 1e30f) {
  const ModelConfig& c = m.config;
  const ModelWeights& w = m.weights;
  Bytes b;
  const int32_t hdr[7] = {c.dim,        c.hidden_dim,
                          c.n_layers,   c.n_heads,
                          c.n_kv_heads, c.shared_classifier ? c.vocab_size : -c.vocab_size,
                          c.seq_len};
  for (int32_t v : hdr) AppendI32(b, v);
  AppendFloats(b, w.token_embedding);
  for (const auto& l : w.layers) AppendFloats(b, l.attn_norm);
  for (const auto& l : w.layers) AppendFloats(b, l.wq);
  for (const auto& l : w.layers) AppendFloats(b, l.wk);
  for (const auto& l : w.layers) AppendFloats(b, l.wv);
  for (const auto& l : w.layers) AppendFloats(b, l.wo);
  for (const auto& l : w.layers) AppendFloats(b, l.ffn_norm);
  for (const auto& l : w.layers) AppendFloats(b, l.w1);
  for (const auto& l : w.layers) AppendFloats(b, l.w2);
  for (const auto& l : w.layers) AppendFloats(b, l.w3);
  AppendFloats(b, w.final_norm);
  const size_t rope = static_cast<size_t>(c.seq_len) * static_cast<size_t>(c.head_dim() / 2);
  AppendFloats(b, std::vector<float>(2 * rope, rope_fill));
  if (!c.shared_classifier) AppendFloats(b, w.classifier);
  return b;
}

// The version 1 layout, as llama2.c export.py's version1_export() writes it.
Bytes Version1File(const Model& m) {
  const ModelConfig& c = m.config;
  const ModelWeights& w = m.weights;
  Bytes b;
  AppendU32(b, 0x616b3432);
  AppendI32(b, 1);
  for (int32_t v :
       {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len}) {
    AppendI32(b, v);
  }
  b.push_back(c.shared_classifier ? 1 : 0);
  b.resize(256, 0);
  for (const auto& l : w.layers) AppendFloats(b, l.attn_norm);
  for (const auto& l : w.layers) AppendFloats(b, l.ffn_norm);
  AppendFloats(b, w.final_norm);
  AppendFloats(b, w.token_embedding);
  for (const auto& l : w.layers) AppendFloats(b, l.wq);
  for (const auto& l : w.layers) AppendFloats(b, l.wk);
  for (const auto& l : w.layers) AppendFloats(b, l.wv);
  for (const auto& l : w.layers) AppendFloats(b, l.wo);
  for (const auto& l : w.layers) AppendFloats(b, l.w1);
  for (const auto& l : w.layers) AppendFloats(b, l.w2);
  for (const auto& l : w.layers) AppendFloats(b, l.w3);
  if (!c.shared_classifier) AppendFloats(b, w.classifier);
  return b;
}

ModelConfig SmallConfig(bool shared) {
  ModelConfig c;
  c.dim = 16;
  c.hidden_dim = 24;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 11;
  c.seq_len = 6;
  c.shared_classifier = shared;
  return c;
}

// Every float distinct (a running counter plus noise), so that any swapped, shifted or skipped
// tensor shows up as a mismatch.
Model SyntheticModel(const ModelConfig& c, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> noise(0.0f, 0.5f);
  float counter = 1.0f;
  auto fill = [&](std::vector<float>& v, size_t n) {
    v.resize(n);
    for (float& x : v) x = (counter += 1.0f) + noise(gen);
  };
  const size_t C = static_cast<size_t>(c.dim), F = static_cast<size_t>(c.hidden_dim);
  const size_t KV = static_cast<size_t>(c.kv_dim()), V = static_cast<size_t>(c.vocab_size);
  Model m;
  m.config = c;
  fill(m.weights.token_embedding, V * C);
  m.weights.layers.resize(static_cast<size_t>(c.n_layers));
  for (auto& l : m.weights.layers) {
    fill(l.attn_norm, C);
    fill(l.wq, C * C);
    fill(l.wk, KV * C);
    fill(l.wv, KV * C);
    fill(l.wo, C * C);
    fill(l.ffn_norm, C);
    fill(l.w1, F * C);
    fill(l.w2, C * F);
    fill(l.w3, F * C);
  }
  fill(m.weights.final_norm, C);
  if (!c.shared_classifier) fill(m.weights.classifier, V * C);
  return m;
}

// Bit-exact comparison of two float vectors (a float round-trips a file unchanged).
::testing::AssertionResult SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  }
  if (!a.empty() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0) {
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
        return ::testing::AssertionFailure()
               << "first difference at " << i << ": " << a[i] << " vs " << b[i];
      }
    }
  }
  return ::testing::AssertionSuccess();
}

void ExpectSameWeights(const ModelWeights& a, const ModelWeights& b) {
  EXPECT_TRUE(SameBits(a.token_embedding, b.token_embedding)) << "token_embedding";
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    const LayerWeights &x = a.layers[i], &y = b.layers[i];
    EXPECT_TRUE(SameBits(x.attn_norm, y.attn_norm)) << "layer " << i << " attn_norm";
    EXPECT_TRUE(SameBits(x.wq, y.wq)) << "layer " << i << " wq";
    EXPECT_TRUE(SameBits(x.wk, y.wk)) << "layer " << i << " wk";
    EXPECT_TRUE(SameBits(x.wv, y.wv)) << "layer " << i << " wv";
    EXPECT_TRUE(SameBits(x.wo, y.wo)) << "layer " << i << " wo";
    EXPECT_TRUE(SameBits(x.ffn_norm, y.ffn_norm)) << "layer " << i << " ffn_norm";
    EXPECT_TRUE(SameBits(x.w1, y.w1)) << "layer " << i << " w1";
    EXPECT_TRUE(SameBits(x.w2, y.w2)) << "layer " << i << " w2";
    EXPECT_TRUE(SameBits(x.w3, y.w3)) << "layer " << i << " w3";
  }
  EXPECT_TRUE(SameBits(a.final_norm, b.final_norm)) << "final_norm";
  EXPECT_TRUE(SameBits(a.classifier, b.classifier)) << "classifier";
}

// Both entry points must reject the file with stretch::Error whose message holds every fragment.
void ExpectRejected(const std::string& path, std::initializer_list<std::string> fragments) {
  for (int entry = 0; entry < 2; ++entry) {
    SCOPED_TRACE(entry == 0 ? "LoadLlama2c" : "ReadLlama2cHeader");
    try {
      if (entry == 0) {
        LoadLlama2c(path);
      } else {
        ReadLlama2cHeader(path);
      }
      ADD_FAILURE() << "no error for " << path;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << "message lacks the path: " << msg;
      for (const std::string& f : fragments) {
        EXPECT_NE(msg.find(f), std::string::npos) << "message lacks \"" << f << "\": " << msg;
      }
    }
  }
}

// A valid small legacy file with header field `index` (0 dim .. 6 seq_len) replaced by `value`.
std::string LegacyWithField(const std::string& name, int index, int32_t value) {
  Bytes b = LegacyFile(SyntheticModel(SmallConfig(true), 1));
  PatchI32(b, 4 * static_cast<size_t>(index), value);
  const std::string path = TempFile(name);
  WriteFile(path, b);
  return path;
}

// ---------------------------------------------------------------------------------------------
// The real checkpoint

// Floats read from the file with plain stdio at a float index counted from the end of the header.
std::vector<float> ReadFloatsAt(const std::string& path, int64_t header_bytes, int64_t index,
                                size_t count) {
  std::vector<float> v(count);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return {};
  std::fseek(f, static_cast<long>(header_bytes + 4 * index), SEEK_SET);
  const size_t got = std::fread(v.data(), 4, count, f);
  std::fclose(f);
  if (got != count) return {};
  return v;
}

TEST(Llama2c, Stories260KHeader) {
  const std::string path = testing::SharedPath(kStoriesRel);
  STRETCH_SKIP_IF_MISSING(path);
  const Llama2cHeader h = ReadLlama2cHeader(path);
  EXPECT_EQ(h.format, "llama2.c legacy");
  EXPECT_EQ(h.config.dim, 64);
  EXPECT_EQ(h.config.hidden_dim, 172);
  EXPECT_EQ(h.config.n_layers, 5);
  EXPECT_EQ(h.config.n_heads, 8);
  EXPECT_EQ(h.config.n_kv_heads, 4);
  EXPECT_EQ(h.config.vocab_size, 512);
  EXPECT_EQ(h.config.seq_len, 512);
  EXPECT_TRUE(h.config.shared_classifier);
  EXPECT_EQ(h.config.head_dim(), 8);
  EXPECT_EQ(h.config.rope_base, 10000.0f);
  EXPECT_EQ(h.config.norm_eps, 1e-5f);
  // 28 header bytes + 4 x (260,032 parameters + 2 RoPE tables of 512 x 4 floats) = 1,056,540,
  // the file's published size. (../shared/README.md writes "28 + 4 x 263,128", a typo for
  // 264,128: 28 + 4 x 263,128 would be 1,052,540.)
  EXPECT_EQ(h.expected_bytes, 1056540);
  EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(path)), 1056540);
}

TEST(Llama2c, Stories260KWeightsMatchAPlainRead) {
  const std::string path = testing::SharedPath(kStoriesRel);
  STRETCH_SKIP_IF_MISSING(path);
  const Model m = LoadLlama2c(path);
  EXPECT_EQ(m.source, path + " (llama2.c legacy)");
  // V*C + L*(2C + 2C^2 + 2*KV*C + 3*F*C) + C = 32768 + 5*45440 + 64.
  EXPECT_EQ(m.config.ParameterCount(), 260032);
  EXPECT_TRUE(m.weights.classifier.empty());
  ASSERT_EQ(m.weights.layers.size(), 5u);

  // Float offsets in the legacy layout, computed here independently of the loader.
  const int64_t C = 64, F = 172, L = 5, V = 512, KV = 32;
  const int64_t emb = 0, attn_norm = V * C, wq = attn_norm + L * C, wk = wq + L * C * C,
                wv = wk + L * KV * C, wo = wv + L * KV * C, ffn_norm = wo + L * C * C,
                w1 = ffn_norm + L * C, w2 = w1 + L * F * C, w3 = w2 + L * C * F,
                final_norm = w3 + L * F * C, rope = final_norm + C;
  EXPECT_EQ(rope + 2 * 512 * 4, (1056540 - 28) / 4);
  const auto& w = m.weights;
  auto first = [](const std::vector<float>& v, size_t n) {
    return std::vector<float>(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
  };
  EXPECT_TRUE(SameBits(first(w.token_embedding, 64), ReadFloatsAt(path, 28, emb, 64)));
  EXPECT_TRUE(SameBits(w.layers[0].attn_norm, ReadFloatsAt(path, 28, attn_norm, 64)));
  EXPECT_TRUE(SameBits(w.layers[4].attn_norm, ReadFloatsAt(path, 28, attn_norm + 4 * C, 64)));
  EXPECT_TRUE(SameBits(first(w.layers[2].wq, 100), ReadFloatsAt(path, 28, wq + 2 * C * C, 100)));
  EXPECT_TRUE(SameBits(w.layers[3].wk, ReadFloatsAt(path, 28, wk + 3 * KV * C, KV * C)));
  EXPECT_TRUE(SameBits(w.layers[1].wv, ReadFloatsAt(path, 28, wv + 1 * KV * C, KV * C)));
  EXPECT_TRUE(SameBits(w.layers[4].wo, ReadFloatsAt(path, 28, wo + 4 * C * C, C * C)));
  EXPECT_TRUE(SameBits(w.layers[2].ffn_norm, ReadFloatsAt(path, 28, ffn_norm + 2 * C, 64)));
  EXPECT_TRUE(SameBits(w.layers[0].w1, ReadFloatsAt(path, 28, w1, F * C)));
  EXPECT_TRUE(SameBits(w.layers[4].w2, ReadFloatsAt(path, 28, w2 + 4 * C * F, C * F)));
  EXPECT_TRUE(SameBits(w.layers[4].w3, ReadFloatsAt(path, 28, w3 + 4 * F * C, F * C)));
  EXPECT_TRUE(SameBits(w.final_norm, ReadFloatsAt(path, 28, final_norm, 64)));

  // A checksum over all 260,032 parameters against the same sum over the file's bytes (in the
  // same order, in double: both sides add identical floats in identical order, so equality is
  // exact).
  const std::vector<float> all = ReadFloatsAt(path, 28, 0, static_cast<size_t>(rope));
  ASSERT_EQ(all.size(), static_cast<size_t>(rope));
  double file_sum = 0, model_sum = 0;
  for (float x : all) file_sum += x;
  auto add = [&model_sum](const std::vector<float>& v) {
    for (float x : v) model_sum += x;
  };
  add(w.token_embedding);
  for (auto member : {&LayerWeights::attn_norm, &LayerWeights::wq, &LayerWeights::wk,
                      &LayerWeights::wv, &LayerWeights::wo, &LayerWeights::ffn_norm,
                      &LayerWeights::w1, &LayerWeights::w2, &LayerWeights::w3}) {
    for (const auto& l : w.layers) add(l.*member);
  }
  add(w.final_norm);
  EXPECT_EQ(model_sum, file_sum);
  // RMSNorm gains of a trained model are O(1) and positive on average; a shifted read would land
  // in a weight matrix (mean ~0).
  double norm_mean = 0;
  for (float x : w.final_norm) norm_mean += x / 64.0;
  EXPECT_GT(norm_mean, 0.3);
}

TEST(Llama2c, Stories260KRoundTripsThroughVersion1) {
  const std::string path = testing::SharedPath(kStoriesRel);
  STRETCH_SKIP_IF_MISSING(path);
  const Model m = LoadLlama2c(path);
  const std::string out = TempFile("stories_v1.bin");
  SaveLlama2cVersion1(m, out);
  // Byte for byte what the test's own version-1 writer produces.
  const Bytes written = ReadFile(out);
  EXPECT_EQ(written.size(), 256u + 4u * 260032u);
  EXPECT_TRUE(written == Version1File(m)) << "SaveLlama2cVersion1 differs from version1_export";
  EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));

  const Llama2cHeader h = ReadLlama2cHeader(out);
  EXPECT_EQ(h.format, "llama2.c version 1");
  EXPECT_EQ(h.expected_bytes, 256 + 4 * 260032);
  const Model back = LoadLlama2c(out);
  EXPECT_EQ(back.source, out + " (llama2.c version 1)");
  ExpectSameConfig(m.config, back.config);
  ExpectSameWeights(m.weights, back.weights);
  std::filesystem::remove(out);
}

// ---------------------------------------------------------------------------------------------
// Synthetic models in both formats, shared and separate classifier

struct FormatCase {
  const char* name;
  bool version1;
  bool shared;
};

void PrintTo(const FormatCase& c, std::ostream* os) { *os << c.name; }

class Llama2cSynthetic : public ::testing::TestWithParam<FormatCase> {};

TEST_P(Llama2cSynthetic, LoadsExactly) {
  const FormatCase fc = GetParam();
  // Two shapes: GQA with an odd vocabulary, and multi-head attention with one layer.
  ModelConfig shapes[2] = {SmallConfig(fc.shared), SmallConfig(fc.shared)};
  shapes[1].dim = 12;
  shapes[1].n_heads = 3;
  shapes[1].n_kv_heads = 3;
  shapes[1].n_layers = 1;
  shapes[1].hidden_dim = 7;
  shapes[1].vocab_size = 5;
  shapes[1].seq_len = 1;
  for (const ModelConfig& c : shapes) {
    const Model m = SyntheticModel(c, 42 + static_cast<uint32_t>(c.dim));
    const std::string path = TempFile(std::string(fc.name) + "_" + std::to_string(c.dim) + ".bin");
    WriteFile(path, fc.version1 ? Version1File(m) : LegacyFile(m));
    const Model back = LoadLlama2c(path);
    EXPECT_EQ(back.source, path + (fc.version1 ? " (llama2.c version 1)" : " (llama2.c legacy)"));
    ExpectSameConfig(c, back.config);
    ExpectSameWeights(m.weights, back.weights);
    EXPECT_EQ(back.weights.classifier.empty(), fc.shared);
    if (!fc.shared) {
      EXPECT_NE(back.weights.ClassifierData(), back.weights.token_embedding.data());
    }
    // The exporter writes the same bytes as the test's writer, and those reload exactly.
    if (fc.version1) {
      const std::string again = path + ".saved";
      SaveLlama2cVersion1(back, again);
      EXPECT_TRUE(ReadFile(again) == Version1File(m));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Llama2cSynthetic,
                         ::testing::Values(FormatCase{"legacy_shared", false, true},
                                           FormatCase{"legacy_separate", false, false},
                                           FormatCase{"v1_shared", true, true},
                                           FormatCase{"v1_separate", true, false}),
                         [](const auto& info) { return std::string(info.param.name); });

// The format holds plain LLaMA models only: a model trained with another layout, the GAU block
// or a RoPE interpolation is refused by name (its file would be read back as another model).
TEST(Llama2c, SavingAModelTheFormatCannotHoldIsRefused) {
  const std::string path = TempFile("not_plain.bin");
  auto refused = [&](const Model& m, const std::string& what) {
    try {
      SaveLlama2cVersion1(m, path);
      ADD_FAILURE() << what << ": not refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(path)) << what;
  };
  Model keynorm = SyntheticModel(SmallConfig(true), 3);
  keynorm.config.attention.key_norm = true;
  refused(keynorm, "a trained attention layout");
  Model pi = SyntheticModel(SmallConfig(true), 3);
  pi.config.rope_interpolation = 2.0f;
  refused(pi, "a trained RoPE interpolation 2");
  Model gau = SyntheticModel(SmallConfig(true), 3);
  gau.config.block = ModelBlock::kGau;
  refused(gau, "the GAU block");
}

// The legacy RoPE tables are skipped, not read into a weight: filled with a sentinel, they change
// nothing, and the separate classifier after them is read from the right offset.
TEST(Llama2c, LegacyRopeTablesAreSkipped) {
  const Model m = SyntheticModel(SmallConfig(false), 5);
  const std::string a = TempFile("rope_a.bin"), b = TempFile("rope_b.bin");
  WriteFile(a, LegacyFile(m, 1e30f));
  WriteFile(b, LegacyFile(m, -7.0f));
  const Model ma = LoadLlama2c(a), mb = LoadLlama2c(b);
  ExpectSameWeights(ma.weights, m.weights);
  ExpectSameWeights(mb.weights, m.weights);
}

// ---------------------------------------------------------------------------------------------
// Every error path: its own message naming the file, the field, what was found and expected.

TEST(Llama2cErrors, MissingFile) {
  ExpectRejected(TempFile("does_not_exist.bin"), {"cannot open", "No such file"});
}

TEST(Llama2cErrors, DirectoryIsNotAFile) {
  const std::string dir = TempFile("a_directory");
  std::filesystem::create_directories(dir);
  ExpectRejected(dir, {"not a regular file"});
}

TEST(Llama2cErrors, EmptyAndCutHeader) {
  const Bytes full = LegacyFile(SyntheticModel(SmallConfig(true), 1));
  for (size_t n : {0, 3, 10, 27}) {
    const std::string path = TempFile("cut_header_" + std::to_string(n) + ".bin");
    WriteFile(path, Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)));
    ExpectRejected(path, {"truncated header", "found " + std::to_string(n) + " bytes",
                          "expected at least 28"});
  }
}

TEST(Llama2cErrors, CutVersion1Header) {
  const Bytes full = Version1File(SyntheticModel(SmallConfig(true), 1));
  const std::string path = TempFile("cut_v1_header.bin");
  WriteFile(path, Bytes(full.begin(), full.begin() + 100));
  ExpectRejected(path,
                 {"truncated header", "found 100 bytes", "expected at least 256", "version 1"});
}

TEST(Llama2cErrors, TruncatedWeights) {
  for (bool v1 : {false, true}) {
    const Model m = SyntheticModel(SmallConfig(false), 2);
    Bytes b = v1 ? Version1File(m) : LegacyFile(m);
    const size_t full = b.size();
    for (size_t cut : {size_t{1}, size_t{4}, full / 2}) {
      Bytes cut_bytes(b.begin(), b.end() - static_cast<std::ptrdiff_t>(cut));
      const std::string path =
          TempFile("truncated_" + std::to_string(v1) + "_" + std::to_string(cut) + ".bin");
      WriteFile(path, cut_bytes);
      ExpectRejected(path, {"truncated: found " + std::to_string(full - cut) + " bytes",
                            "expected " + std::to_string(full),
                            v1 ? "llama2.c version 1" : "llama2.c legacy", "dim=16"});
    }
  }
}

TEST(Llama2cErrors, TrailingBytes) {
  for (bool v1 : {false, true}) {
    Bytes b = v1 ? Version1File(SyntheticModel(SmallConfig(true), 3))
                 : LegacyFile(SyntheticModel(SmallConfig(true), 3));
    const size_t full = b.size();
    b.push_back(0);
    const std::string path = TempFile("trailing_" + std::to_string(v1) + ".bin");
    WriteFile(path, b);
    ExpectRejected(path,
                   {"oversized / trailing bytes: found " + std::to_string(full + 1) + " bytes",
                    "expected " + std::to_string(full)});
  }
}

// A legacy file whose header says "shared" (positive vocab) but carries a separate classifier is
// caught by the size check: the classifier is V*C floats of trailing bytes.
TEST(Llama2cErrors, SharedFlagDisagreesWithSize) {
  Bytes b = LegacyFile(SyntheticModel(SmallConfig(false), 3));
  PatchI32(b, 20, 11);  // vocab_size -11 -> 11
  const std::string path = TempFile("flag_vs_size.bin");
  WriteFile(path, b);
  ExpectRejected(path, {"oversized / trailing bytes", "shared_classifier=1"});
}

TEST(Llama2cErrors, ZeroHeads) {
  ExpectRejected(LegacyWithField("zero_heads.bin", 3, 0),
                 {"n_heads=0", "at least one attention head", "expected n_heads >= 1"});
}

TEST(Llama2cErrors, ZeroKvHeads) {
  ExpectRejected(LegacyWithField("zero_kv_heads.bin", 4, 0),
                 {"n_kv_heads=0", "expected n_kv_heads >= 1"});
}

TEST(Llama2cErrors, ZeroLayers) {
  ExpectRejected(LegacyWithField("zero_layers.bin", 2, 0),
                 {"n_layers=0", "expected at least one Transformer block"});
}

TEST(Llama2cErrors, NonPositiveFields) {
  const char* names[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                          "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i) {
    if (i == 5) continue;  // a negative legacy vocab_size is the separate-classifier flag
    ExpectRejected(LegacyWithField(std::string("negative_") + names[i] + ".bin", i, -3),
                   {std::string(names[i]) + "=-3", "expected a positive count"});
  }
  ExpectRejected(LegacyWithField("zero_dim.bin", 0, 0), {"dim=0", "expected a positive count"});
  ExpectRejected(LegacyWithField("zero_vocab.bin", 5, 0),
                 {"vocab_size=0", "expected a positive count"});
  ExpectRejected(LegacyWithField("zero_seq_len.bin", 6, 0),
                 {"seq_len=0", "expected a positive count"});
  // -2^31 has no positive counterpart: no undefined negation.
  ExpectRejected(LegacyWithField("int_min_vocab.bin", 5, INT32_MIN),
                 {"vocab_size=-2147483648", "expected a count in 1..16777216"});
}

TEST(Llama2cErrors, KvHeadsDoNotDivideHeads) {
  // dim 16, n_heads 4, n_kv_heads 3.
  ExpectRejected(LegacyWithField("kv3.bin", 4, 3), {"n_kv_heads=3 does not divide n_heads=4"});
}

TEST(Llama2cErrors, DimNotDivisibleByHeads) {
  // dim 16, n_heads 6 (n_kv_heads 2 divides 6, so only the dim check can fire).
  ExpectRejected(LegacyWithField("heads6.bin", 3, 6),
                 {"dim=16 is not divisible by n_heads=6", "head_dim"});
}

TEST(Llama2cErrors, OddHeadDim) {
  // dim 16, n_heads 16: head_dim 1. (n_kv_heads 2 divides 16.)
  ExpectRejected(LegacyWithField("odd_head_dim.bin", 3, 16),
                 {"head_dim=1", "dim=16 / n_heads=16", "is odd", "expected an even head_dim"});
}

TEST(Llama2cErrors, AbsurdSizeBeyondLimit) {
  ExpectRejected(LegacyWithField("dim_2_30.bin", 0, 1 << 30),
                 {"dim=1073741824", "exceeds the limit 1048576", "expected a value in 1..1048576"});
  ExpectRejected(LegacyWithField("layers_huge.bin", 2, 1 << 20),
                 {"n_layers=1048576", "exceeds the limit 4096"});
  ExpectRejected(LegacyWithField("vocab_huge.bin", 5, -(1 << 30)),
                 {"vocab_size=1073741824", "exceeds the limit 16777216"});
}

// Every field at its limit: a header asking for ~2^58 bytes (hundreds of petabytes). The size
// check must reject it before anything is allocated (under ASan an attempt would abort the test),
// with the exact expected byte count computed here in 128-bit arithmetic.
TEST(Llama2cErrors, AbsurdSizeWithinLimitsFailsOnTheSizeCheck) {
  Bytes b = LegacyFile(SyntheticModel(SmallConfig(true), 1));
  const int32_t fields[7] = {1 << 20, 1 << 22, 1 << 12, 1 << 10, 1 << 10, 1 << 24, 1 << 24};
  for (int i = 0; i < 7; ++i) PatchI32(b, 4 * static_cast<size_t>(i), fields[i]);
  const std::string path = TempFile("huge_within_limits.bin");
  WriteFile(path, b);
  using U = unsigned __int128;
  const U C = fields[0], F = fields[1], L = fields[2], V = fields[5], S = fields[6];
  const U D = C / 1024, KV = D * 1024;
  const U floats = V * C + L * (2 * C + 2 * C * C + 2 * KV * C + 3 * F * C) + C + 2 * S * (D / 2);
  const U bytes = 28 + 4 * floats;
  ASSERT_LT(bytes, (U{1} << 63));
  ExpectRejected(path, {"truncated: found " + std::to_string(b.size()) + " bytes",
                        "expected " + std::to_string(static_cast<uint64_t>(bytes))});
}

TEST(Llama2cErrors, BadVersion) {
  Bytes b = Version1File(SyntheticModel(SmallConfig(true), 1));
  PatchI32(b, 4, 2);
  const std::string path = TempFile("version2.bin");
  WriteFile(path, b);
  ExpectRejected(path, {"version=2", "expected version 1"});
  PatchI32(b, 4, -1);
  WriteFile(path, b);
  ExpectRejected(path, {"version=-1", "expected version 1"});
}

TEST(Llama2cErrors, BadSharedFlag) {
  Bytes b = Version1File(SyntheticModel(SmallConfig(true), 1));
  b[36] = 7;
  const std::string path = TempFile("shared7.bin");
  WriteFile(path, b);
  ExpectRejected(path, {"shared_classifier=7", "offset 36", "expected 0 or 1"});
}

TEST(Llama2cErrors, NonZeroHeaderPadding) {
  Bytes b = Version1File(SyntheticModel(SmallConfig(true), 1));
  b[200] = 0xab;
  const std::string path = TempFile("padding.bin");
  WriteFile(path, b);
  ExpectRejected(path, {"padding byte at offset 200 is 0xab", "expected 0"});
}

TEST(Llama2cErrors, Version1NegativeVocab) {
  // Version 1 has an explicit flag; a negative vocab_size there is just invalid.
  Bytes b = Version1File(SyntheticModel(SmallConfig(true), 1));
  PatchI32(b, 8 + 4 * 5, -11);
  const std::string path = TempFile("v1_negative_vocab.bin");
  WriteFile(path, b);
  ExpectRejected(path,
                 {"vocab_size=-11", "llama2.c version 1 header", "expected a positive count"});
}

TEST(Llama2cErrors, SaveToUnwritablePath) {
  const Model m = SyntheticModel(SmallConfig(true), 1);
  const std::string path = TempFile("no_such_dir/model.bin");
  try {
    SaveLlama2cVersion1(m, path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create the temporary file"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("no_such_dir/model.bin:"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stretch
