// llama2.c checkpoints. Formats as written by llama2.c (Karpathy, MIT):
//   legacy:    export.py legacy_export() and the reader memory_map_weights() in run.c;
//   version 1: export.py version1_export().
// The layouts are summarized in llama2c.h; this file is written from those descriptions.
#include "src/io/llama2c.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/io/binary_reader.h"
#include "src/io/output_file.h"
#include "src/model/family.h"

namespace stretch {
namespace {

enum class Format { kLegacy, kVersion1 };

constexpr std::string_view FormatName(Format f) {
  return f == Format::kLegacy ? "llama2.c legacy" : "llama2.c version 1";
}

// "ak42" read as a little-endian uint32, written first by version1_export().
constexpr uint32_t kVersion1Magic = 0x616b3432;
constexpr int32_t kVersion1 = 1;  // 2 is llama2.c's int8 (Q8_0) export, which we do not read
constexpr int64_t kVersion1HeaderBytes = 256;
// magic (4) + version (4) + 7 int32 (28) + shared_classifier (1); zeros follow up to 256.
constexpr int64_t kVersion1UsedHeaderBytes = 37;
constexpr int64_t kLegacyHeaderBytes = 7 * 4;

// Upper bounds on header counts. They are far above any published LLaMA-family model (the largest
// have dim 16384, hidden 53248, 126 layers, vocab 256000, contexts of 128k-1M) and exist so that a
// corrupt header is rejected by name, and so that every size below fits comfortably in int64:
// with these bounds the largest possible byte count is about 3 * 2^56 < 2^63.
constexpr int32_t kMaxDim = 1 << 20;
constexpr int32_t kMaxHiddenDim = 1 << 22;
constexpr int32_t kMaxLayers = 1 << 12;
constexpr int32_t kMaxVocab = 1 << 24;
constexpr int32_t kMaxSeqLen = 1 << 24;

constexpr const char* kFieldNames[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                        "n_kv_heads", "vocab_size", "seq_len"};

// int64 arithmetic that reports overflow as bad input instead of wrapping. The bounds above make
// overflow impossible at those bounds; this keeps the size check exact if they are ever raised.
int64_t MulSize(const std::string& path, int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    Fail("{}: the header's sizes overflow a 64-bit count", path);
  return r;
}
int64_t AddSize(const std::string& path, int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    Fail("{}: the header's sizes overflow a 64-bit count", path);
  return r;
}

// The number of floats the file stores, in the order and shapes of llama2c.h.
int64_t FloatCount(const std::string& path, Format format, const ModelConfig& c) {
  const int64_t C = c.dim, F = c.hidden_dim, L = c.n_layers, V = c.vocab_size, S = c.seq_len;
  const int64_t D = c.head_dim(), KV = c.kv_dim();
  auto mul = [&](int64_t a, int64_t b) { return MulSize(path, a, b); };
  auto add = [&](int64_t a, int64_t b) { return AddSize(path, a, b); };
  int64_t per_layer = mul(C, 2);                   // attn_norm, ffn_norm
  per_layer = add(per_layer, mul(mul(C, C), 2));   // wq, wo
  per_layer = add(per_layer, mul(mul(KV, C), 2));  // wk, wv
  per_layer = add(per_layer, mul(mul(F, C), 3));   // w1, w2, w3
  const int64_t embedding = mul(V, C);
  int64_t total = add(add(mul(per_layer, L), embedding), C);                 // + final norm
  if (format == Format::kLegacy) total = add(total, mul(mul(S, D / 2), 2));  // two RoPE tables
  if (!c.shared_classifier) total = add(total, embedding);
  return total;
}

std::string DescribeConfig(const ModelConfig& c) {
  return fmt::format(
      "dim={} hidden_dim={} n_layers={} n_heads={} n_kv_heads={} vocab_size={} seq_len={} "
      "shared_classifier={}",
      c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len,
      c.shared_classifier ? 1 : 0);
}

// Validates the 7 header ints (vocab_size already made positive for legacy files) and returns the
// config. Nothing is allocated from the header before this returns.
ModelConfig ValidateFields(const std::string& path, Format format, const int32_t (&f)[7],
                           bool shared_classifier) {
  const std::string_view fmt_name = FormatName(format);
  for (int i = 0; i < 7; ++i) {
    if (f[i] > 0) continue;
    const std::string_view name = kFieldNames[i];
    if (name == "n_heads" && f[i] == 0) {
      Fail(
          "{}: n_heads=0 in the {} header: a model needs at least one attention head "
          "(expected n_heads >= 1)",
          path, fmt_name);
    }
    if (name == "n_kv_heads" && f[i] == 0) {
      Fail(
          "{}: n_kv_heads=0 in the {} header: attention needs at least one key/value head "
          "(expected n_kv_heads >= 1)",
          path, fmt_name);
    }
    if (name == "n_layers" && f[i] == 0) {
      Fail("{}: n_layers=0 in the {} header: expected at least one Transformer block", path,
           fmt_name);
    }
    Fail("{}: {}={} in the {} header: expected a positive count", path, name, f[i], fmt_name);
  }
  const int32_t limits[7] = {kMaxDim, kMaxHiddenDim, kMaxLayers, kMaxDim,
                             kMaxDim, kMaxVocab,     kMaxSeqLen};
  for (int i = 0; i < 7; ++i) {
    if (f[i] > limits[i]) {
      Fail(
          "{}: {}={} in the {} header exceeds the limit {}: expected a value in 1..{} "
          "(corrupt header?)",
          path, kFieldNames[i], f[i], fmt_name, limits[i], limits[i]);
    }
  }
  ModelConfig c;
  c.dim = f[0];
  c.hidden_dim = f[1];
  c.n_layers = f[2];
  c.n_heads = f[3];
  c.n_kv_heads = f[4];
  c.vocab_size = f[5];
  c.seq_len = f[6];
  c.shared_classifier = shared_classifier;
  // llama2.c's fixed hyperparameters (run.c: 10000.0f in the RoPE loop, 1e-5f in rmsnorm); the
  // file format has no field for either.
  c.rope_base = 10000.0f;
  c.norm_eps = 1e-5f;
  if (c.dim % c.n_heads != 0) {
    Fail(
        "{}: dim={} is not divisible by n_heads={}: expected head_dim = dim / n_heads to be an "
        "integer",
        path, c.dim, c.n_heads);
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    Fail(
        "{}: n_kv_heads={} does not divide n_heads={}: expected a divisor for grouped-query "
        "attention",
        path, c.n_kv_heads, c.n_heads);
  }
  if (c.head_dim() % 2 != 0) {
    Fail(
        "{}: head_dim={} (dim={} / n_heads={}) is odd: expected an even head_dim, RoPE rotates "
        "pairs",
        path, c.head_dim(), c.dim, c.n_heads);
  }
  return c;
}

struct ParsedHeader {
  Llama2cHeader header;
  Format format = Format::kLegacy;
};

// Reads and validates the header, leaves `r` at the first weight, and checks the file's size
// against the exact size the header implies.
ParsedHeader ParseHeader(BinaryReader& r) {
  const std::string& path = r.path();
  if (r.size() < kLegacyHeaderBytes) {
    Fail(
        "{}: truncated header: found {} bytes, expected at least {} (llama2.c legacy: 7 int32) "
        "or {} (llama2.c version 1)",
        path, r.size(), kLegacyHeaderBytes, kVersion1HeaderBytes);
  }
  const uint32_t first = r.ReadU32("magic or dim");
  int32_t fields[7];
  bool shared = true;
  Format format;
  if (first == kVersion1Magic) {
    format = Format::kVersion1;
    if (r.size() < kVersion1HeaderBytes) {
      Fail(
          "{}: truncated header: found {} bytes, expected at least {} (llama2.c version 1 "
          "header)",
          path, r.size(), kVersion1HeaderBytes);
    }
    const int32_t version = r.ReadI32("version");
    if (version != kVersion1) {
      Fail(
          "{}: version={} after the llama2.c magic 0x616b3432: expected version 1 (float32; "
          "version 2 is llama2.c's int8 export, not supported)",
          path, version);
    }
    for (int i = 0; i < 7; ++i) fields[i] = r.ReadI32(kFieldNames[i]);
    const uint8_t flag = r.ReadU8("shared_classifier");
    if (flag > 1) {
      Fail("{}: shared_classifier={} (byte at offset {}): expected 0 or 1", path, flag,
           kVersion1UsedHeaderBytes - 1);
    }
    shared = flag == 1;
    unsigned char pad[kVersion1HeaderBytes - kVersion1UsedHeaderBytes];
    r.ReadBytes(pad, sizeof(pad), "header padding");
    for (size_t i = 0; i < sizeof(pad); ++i) {
      if (pad[i] != 0) {
        Fail(
            "{}: header padding byte at offset {} is 0x{:02x}: expected 0 (version 1 pads the "
            "header with zeros to {} bytes)",
            path, kVersion1UsedHeaderBytes + static_cast<int64_t>(i), pad[i], kVersion1HeaderBytes);
      }
    }
  } else {
    format = Format::kLegacy;
    fields[0] = static_cast<int32_t>(first);
    for (int i = 1; i < 7; ++i) fields[i] = r.ReadI32(kFieldNames[i]);
    // Legacy in-band flag: a negative vocab_size means a separate classifier follows.
    if (fields[5] < 0) {
      if (fields[5] == std::numeric_limits<int32_t>::min()) {
        Fail(
            "{}: vocab_size={} in the llama2.c legacy header: expected a count in 1..{} (or "
            "its negative for a separate classifier)",
            path, fields[5], kMaxVocab);
      }
      fields[5] = -fields[5];
      shared = false;
    }
  }

  ParsedHeader p;
  p.format = format;
  p.header.format = std::string(FormatName(format));
  p.header.config = ValidateFields(path, format, fields, shared);
  const int64_t header_bytes =
      format == Format::kLegacy ? kLegacyHeaderBytes : kVersion1HeaderBytes;
  p.header.expected_bytes =
      AddSize(path, MulSize(path, FloatCount(path, format, p.header.config), 4), header_bytes);
  if (r.size() < p.header.expected_bytes) {
    throw Llama2cSizeError(fmt::format(
        "{}: truncated: found {} bytes, expected {} (the size implied by the {} header: {})", path,
        r.size(), p.header.expected_bytes, p.header.format, DescribeConfig(p.header.config)));
  }
  if (r.size() > p.header.expected_bytes) {
    throw Llama2cSizeError(fmt::format(
        "{}: oversized / trailing bytes: found {} bytes, expected {} (the size implied by the {} "
        "header: {})",
        path, r.size(), p.header.expected_bytes, p.header.format, DescribeConfig(p.header.config)));
  }
  return p;
}

// Calls visit(name, vector*, count) for each tensor in the file's order. vector* is nullptr for
// the legacy RoPE tables, which are stored but unused (llama2.c computes RoPE on the fly). The
// vectors must already have their sizes. Weights is ModelWeights or const ModelWeights.
template <typename Weights, typename Visit>
void ForEachTensor(Format format, const ModelConfig& c, Weights& w, Visit&& visit) {
  const int L = c.n_layers;
  auto per_layer = [&](const char* name, auto member) {
    for (int l = 0; l < L; ++l) {
      auto& v = w.layers[static_cast<size_t>(l)].*member;
      visit(fmt::format("layers[{}].{}", l, name), &v, static_cast<int64_t>(v.size()));
    }
  };
  auto one = [&](const char* name, auto& v) {
    visit(std::string(name), &v, static_cast<int64_t>(v.size()));
  };
  using Vec = std::remove_reference_t<decltype(w.final_norm)>;
  if (format == Format::kLegacy) {
    one("token_embedding", w.token_embedding);
    per_layer("attn_norm", &LayerWeights::attn_norm);
    per_layer("wq", &LayerWeights::wq);
    per_layer("wk", &LayerWeights::wk);
    per_layer("wv", &LayerWeights::wv);
    per_layer("wo", &LayerWeights::wo);
    per_layer("ffn_norm", &LayerWeights::ffn_norm);
    per_layer("w1", &LayerWeights::w1);
    per_layer("w2", &LayerWeights::w2);
    per_layer("w3", &LayerWeights::w3);
    one("final_norm", w.final_norm);
    const int64_t rope = static_cast<int64_t>(c.seq_len) * (c.head_dim() / 2);
    visit(std::string("rope_freq_cis_real (unused)"), static_cast<Vec*>(nullptr), rope);
    visit(std::string("rope_freq_cis_imag (unused)"), static_cast<Vec*>(nullptr), rope);
  } else {
    per_layer("attn_norm", &LayerWeights::attn_norm);
    per_layer("ffn_norm", &LayerWeights::ffn_norm);
    one("final_norm", w.final_norm);
    one("token_embedding", w.token_embedding);
    per_layer("wq", &LayerWeights::wq);
    per_layer("wk", &LayerWeights::wk);
    per_layer("wv", &LayerWeights::wv);
    per_layer("wo", &LayerWeights::wo);
    per_layer("w1", &LayerWeights::w1);
    per_layer("w2", &LayerWeights::w2);
    per_layer("w3", &LayerWeights::w3);
  }
  if (!c.shared_classifier) one("classifier", w.classifier);
}

// The number of values a tensor of the family table holds for one configuration.
int64_t Values(const FamilyTensorAt& t) {
  int64_t n = 1;
  for (const int64_t d : t.shape) n *= d;
  return n;
}

// Sizes every vector of `w` for config `c` (after validation and the file-size check): the LLaMA
// family's tensors (src/model/families/llama.cc), which llama2.c files hold in an order of their
// own (ForEachTensor).
void SizeWeights(const ModelConfig& c, ModelWeights& w) {
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (const FamilyTensorAt& t : FamilyTensors(LlamaFamily(), c, WeightFormat::kGguf)) {
    FamilyTensorData(w, t).resize(static_cast<size_t>(Values(t)));
  }
}

// True when every vector of `w` has the size `c` implies (for the exporter's checks).
bool WeightsMatchConfig(const ModelConfig& c, const ModelWeights& w) {
  if (w.layers.size() != static_cast<size_t>(c.n_layers)) return false;
  if (c.shared_classifier && !w.classifier.empty()) return false;
  for (const FamilyTensorAt& t : FamilyTensors(LlamaFamily(), c, WeightFormat::kGguf)) {
    if (FamilyTensorData(w, t).size() != static_cast<size_t>(Values(t))) return false;
  }
  return true;
}

}  // namespace

Llama2cHeader ReadLlama2cHeader(const std::string& path) {
  BinaryReader r(path, "a llama2.c checkpoint");
  return ParseHeader(r).header;
}

Model LoadLlama2c(const std::string& path) {
  BinaryReader r(path, "a llama2.c checkpoint");
  const ParsedHeader p = ParseHeader(r);  // the file's size now equals what the header implies
  Model m;
  m.config = p.header.config;
  m.source = fmt::format("{} ({})", path, p.header.format);
  SizeWeights(m.config, m.weights);
  ForEachTensor(p.format, m.config, m.weights,
                [&](const std::string& name, std::vector<float>* v, int64_t count) {
                  if (v == nullptr) {
                    r.Skip(count * 4, name);
                  } else {
                    r.ReadF32s(std::span<float>(*v), name);
                  }
                });
  STRETCH_CHECK(r.remaining() == 0, "{}: {} bytes left after the last tensor", path, r.remaining());
  return m;
}

void SaveLlama2cVersion1(const Model& model, const std::string& path) {
  const ModelConfig& c = model.config;
  // The format holds a plain LLaMA model (RoPE at its base, full attention, 1/sqrt(D)): a trained
  // layout, a GAU block or a trained interpolation would be lost, so such models are refused.
  if (!c.attention.IsPlain() || c.Gau() || c.rope_interpolation != 1.0f || c.qkv_bias ||
      c.qk_norm || c.explicit_head_dim > 0 || !c.UntrainedBlock().empty()) {
    Fail(
        "{}: llama2.c files hold plain LLaMA models; {} has {} (expected the default RoPE, "
        "full-attention LLaMA layout)",
        path, model.source,
        c.Gau()                       ? std::string("the GAU block")
        : !c.UntrainedBlock().empty() ? c.UntrainedBlock() + " (write GGUF or an HF folder)"
        : c.qkv_bias ? std::string("q/k/v biases (a Qwen 2 model: write GGUF or an HF folder)")
        : c.qk_norm
            ? std::string(
                  "norms of each head's q and k (a Qwen 3 model: write GGUF or an HF folder)")
        : c.explicit_head_dim > 0
            ? fmt::format("heads {} wide, not dim / heads (write GGUF or an HF folder)",
                          c.head_dim())
        : c.rope_interpolation != 1.0f
            ? fmt::format("a trained RoPE interpolation {}", c.rope_interpolation)
            : std::string("a trained attention layout (per-layer positions or windows, "
                          "norms, logit scale or another variant)"));
  }
  STRETCH_CHECK(c.dim > 0 && c.hidden_dim > 0 && c.n_layers > 0 && c.n_heads > 0 &&
                    c.n_kv_heads > 0 && c.vocab_size > 0 && c.seq_len > 0,
                "non-positive config: {}", DescribeConfig(c));
  STRETCH_CHECK(c.dim % c.n_heads == 0 && c.n_heads % c.n_kv_heads == 0, "inconsistent heads: {}",
                DescribeConfig(c));
  STRETCH_CHECK(WeightsMatchConfig(c, model.weights), "weight sizes differ from the config: {}",
                DescribeConfig(c));

  // Written to a temporary name and renamed, so that `path` never holds a partial checkpoint.
  AtomicFile out(path);
  auto write = [&](const void* data, size_t bytes, std::string_view what) {
    out.Write(data, bytes, what);
  };
  {
    unsigned char header[kVersion1HeaderBytes] = {};
    auto put_u32 = [&](size_t at, uint32_t v) {
      for (int i = 0; i < 4; ++i) header[at + i] = static_cast<unsigned char>(v >> (8 * i));
    };
    put_u32(0, kVersion1Magic);
    put_u32(4, static_cast<uint32_t>(kVersion1));
    const int32_t fields[7] = {c.dim,        c.hidden_dim, c.n_layers, c.n_heads,
                               c.n_kv_heads, c.vocab_size, c.seq_len};
    for (int i = 0; i < 7; ++i)
      put_u32(8 + 4 * static_cast<size_t>(i), static_cast<uint32_t>(fields[i]));
    header[kVersion1UsedHeaderBytes - 1] = c.shared_classifier ? 1 : 0;
    write(header, sizeof(header), "header");
    ForEachTensor(Format::kVersion1, c, model.weights,
                  [&](const std::string& name, const std::vector<float>* v, int64_t) {
                    write(v->data(), v->size() * sizeof(float), name);
                  });
  }
  out.Commit();
}

}  // namespace stretch
