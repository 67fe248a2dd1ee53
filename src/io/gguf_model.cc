#include "src/io/gguf_model.h"

#include "src/io/tokenizer/gguf_vocabulary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/io/gguf.h"
#include "src/io/text.h"
#include "src/io/tokenizer/tokenizer.h"
#include "src/model/family.h"
#include "src/position/method.h"
#include "src/position/method_internal.h"

namespace stretch {

namespace {

// Bounds that keep a corrupted count from turning into a huge allocation before the tensor shapes
// are checked (the shapes then pin every size to the file's own bytes).
constexpr int64_t kMaxDim = 1 << 16;
constexpr int64_t kMaxLayers = 1 << 10;
constexpr int64_t kMaxHidden = 1 << 20;
constexpr int64_t kMaxSeqLen = int64_t{1} << 26;

// An architecture's metadata key, "<general.architecture>.<key>", as llama.cpp names them
// (LLM_KV_CONTEXT_LENGTH "%s.context_length": "llama.context_length", "qwen2.context_length").
struct ArchKeys {
  std::string arch;
  std::string operator()(std::string_view key) const { return fmt::format("{}.{}", arch, key); }
};

int64_t CountKey(const GgufFile& g, const std::string& key, int64_t max) {
  const int64_t v = g.Int(key);
  if (v < 1 || v > max) Fail("{}: metadata {} is {}, expected 1..{}", g.path(), key, v, max);
  return v;
}

struct Parsed {
  GgufModelHeader header;
  // Tensor name -> the shape stretch expects, row-major (rows, cols) or (n).
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
};

std::string ShapeText(const std::vector<int64_t>& ne) {
  std::string s = "{";
  for (size_t k = 0; k < ne.size(); ++k) s += (k ? ", " : "") + std::to_string(ne[k]);
  return s + "}";
}

// A tensor of per-pair RoPE factors: d/2 positive numbers (ggml shape {d/2}).
std::vector<double> FactorList(const GgufFile& g, const std::string& name, int pairs) {
  const GgufTensorInfo* t = g.FindTensor(name);
  if (t == nullptr) Fail("{}: tensor {} is missing", g.path(), name);
  if (t->ne != std::vector<int64_t>{pairs} || !GgmlTypeReadable(t->type)) {
    Fail("{}: tensor {} is {} of shape {}, expected {} factors (head dim / 2)", g.path(), name,
         GgmlTypeName(t->type), ShapeText(t->ne), pairs);
  }
  std::vector<float> f(static_cast<size_t>(pairs));
  g.ReadFloats(*t, f);
  for (float v : f) {
    if (!(v > 0.0f) || !std::isfinite(v)) {
      Fail("{}: tensor {} holds the factor {}, expected positive finite numbers", g.path(), name,
           v);
    }
  }
  return std::vector<double>(f.begin(), f.end());
}

// RoPE scaling from llama.cpp's keys (named here for the llama architecture; every family's are
// its own general.architecture's, "qwen2.rope.scaling.type"), read as llama.cpp reads them (src/llama-model.cpp,
// load_hparams; src/llama-context.cpp, the YaRN attention factor), at d32676d:
//   llama.rope.scaling.type: "none", "linear" (the default when the key is absent), "yarn",
//     "longrope";
//   llama.rope.scaling.factor (older files: llama.rope.scale_linear): the scale s, 0 or absent
//     meaning 1;
//   llama.rope.scaling.original_context_length: the length the model was pre-trained at, before
//     the extension (YaRN's and LongRoPE's L; default llama.context_length);
//   llama.rope.scaling.attn_factor: a multiplier of the attention factor (default 1);
//   llama.rope.scaling.yarn_log_multiplier: HF's mscale_all_dim (0: none); llama.cpp then uses
//     get_mscale(s, 1) / get_mscale(s, m) instead of get_mscale(s, 1) = 0.1 ln s + 1;
//   llama.rope.scaling.yarn_beta_fast / yarn_beta_slow / yarn_ext_factor, where present;
//   tensor rope_freqs.weight: per-pair divisors of theta_t, applied at every length (LLaMA 3.1's
//     frequency rule, precomputed by llama.cpp's converter);
//   tensors rope_factors_long.weight / rope_factors_short.weight: LongRoPE's lists.
// Linear scaling is the model's own position interpolation (ModelConfig::rope_interpolation):
// llama.cpp divides positions by s at every length, as stretch does for a model trained with PI.
// The others become the method the file asks for (header.method_spec), which runs unless the
// user gives another; ModelConfig::seq_len becomes the original length, the L of every method's
// formulas. Returns the tensors it used.
std::vector<std::string> RopeScalingFromGguf(const GgufFile& g, int head_dim,
                                             GgufModelHeader& header) {
  const std::string& path = g.path();
  ModelConfig& c = header.config;
  std::vector<std::string>& from = header.provenance;
  const int pairs = head_dim / 2;
  const ArchKeys K{g.String("general.architecture")};
  const bool type_given = g.Find(K("rope.scaling.type")) != nullptr;
  // LongRoPE's lists without a type key: how llama.cpp's converter writes Phi-3 (phi3 reads the
  // tensors whatever the type).
  const bool longrope_lists = g.FindTensor("rope_factors_long.weight") != nullptr &&
                              g.FindTensor("rope_factors_short.weight") != nullptr;
  const std::string type =
      g.StringOr(K("rope.scaling.type"), longrope_lists ? "longrope" : "linear");
  const std::string factor_key = g.Find(K("rope.scaling.factor")) != nullptr
                                     ? K("rope.scaling.factor")
                                     : K("rope.scale_linear");
  const double factor = g.FloatOr(factor_key, 0.0);
  if (!(factor == 0.0 || (factor >= 1.0 && factor <= 1e6))) {
    Fail("{}: metadata {} is {}, expected 0 (none) or a number in [1, 1e6]", path, factor_key,
         factor);
  }
  const double s = factor == 0.0 ? 1.0 : factor;
  const int context = c.seq_len;
  auto original_length = [&] {
    const std::string key = K("rope.scaling.original_context_length");
    if (g.Find(key) == nullptr) {
      from.push_back(
          fmt::format("seq_len {} <- {} ({} absent)", c.seq_len, K("context_length"), key));
      return;
    }
    c.seq_len = static_cast<int>(CountKey(g, key, kMaxSeqLen));
    from.push_back(
        fmt::format("seq_len {} <- {} (the pre-trained length; {} {} is the extended one)",
                    c.seq_len, key, K("context_length"), context));
  };
  const double attn = g.FloatOr(K("rope.scaling.attn_factor"), 1.0);
  if (!(attn > 0.0) || !std::isfinite(attn)) {
    Fail("{}: metadata {} is {}, expected a positive number", path, K("rope.scaling.attn_factor"),
         attn);
  }
  const bool freqs = g.FindTensor("rope_freqs.weight") != nullptr;
  std::vector<std::string> used;
  Method m;
  std::string why;
  if (type == "none" || (type == "linear" && s == 1.0)) {
    from.push_back(fmt::format("seq_len {} <- {}", c.seq_len, K("context_length")));
    why = type_given ? fmt::format("{} \"{}\"", K("rope.scaling.type"), type)
                     : fmt::format("no {}.* keys", K("rope.scaling"));
  } else if (type == "linear") {
    if (freqs) {
      Fail(
          "{}: tensor rope_freqs.weight with linear scaling (metadata {} = {}): no source "
          "defines how the two compose",
          path, factor_key, factor);
    }
    c.rope_interpolation = static_cast<float>(s);
    from.push_back(fmt::format("seq_len {} <- {}", c.seq_len, K("context_length")));
    from.push_back(
        fmt::format("rope_interpolation {} <- {} (linear scaling{}: positions divided "
                    "by it at every length, as llama.cpp does)",
                    s, factor_key, type_given ? "" : ", llama.cpp's default type"));
    why = "linear scaling, the model's own position interpolation";
  } else if (type == "yarn") {
    original_length();
    m = ParseMethod("yarn");
    m.rope.factor = s;
    if (g.Find(K("rope.scaling.yarn_beta_fast")) != nullptr) {
      m.rope.beta_fast = g.Float(K("rope.scaling.yarn_beta_fast"));
    }
    if (g.Find(K("rope.scaling.yarn_beta_slow")) != nullptr) {
      m.rope.beta_slow = g.Float(K("rope.scaling.yarn_beta_slow"));
    }
    const double ext = g.FloatOr(K("rope.scaling.yarn_ext_factor"), 1.0);
    if (ext != 1.0 && ext >= 0.0) {  // negative: "not set", llama.cpp then uses 1
      Fail(
          "{}: metadata {} is {}, expected 1 (stretch's yarn is YaRN as defined, llama.cpp's "
          "ext_factor 1)",
          path, K("rope.scaling.yarn_ext_factor"), ext);
    }
    const double log_mul = g.FloatOr(K("rope.scaling.yarn_log_multiplier"), 0.0);
    if (!std::isfinite(log_mul) || log_mul < 0.0) {
      Fail("{}: metadata {} is {}, expected a number >= 0", path,
           K("rope.scaling.yarn_log_multiplier"), log_mul);
    }
    if (log_mul != 0.0 || attn != 1.0) {
      const double base_factor = log_mul != 0.0 ? method_internal::GetMscale(s, 1.0) /
                                                      method_internal::GetMscale(s, log_mul)
                                                : method_internal::GetMscale(s, 1.0);
      m.rope.attention_factor = attn * base_factor;
    }
    why = fmt::format("{} \"yarn\" and its {}.* keys", K("rope.scaling.type"), K("rope.scaling"));
  } else if (type == "longrope") {
    original_length();
    m = ParseMethod("longrope");
    m.rope.short_factor = FactorList(g, "rope_factors_short.weight", pairs);
    m.rope.long_factor = FactorList(g, "rope_factors_long.weight", pairs);
    used = {"rope_factors_short.weight", "rope_factors_long.weight"};
    // HF _compute_longrope_parameters: attention factor sqrt(1 + ln(f) / ln(orig)) for
    // f = max_position_embeddings / original_max_position_embeddings, applied at every length;
    // llama.cpp's converter stores it as attn_factor.
    const double f = static_cast<double>(context) / c.seq_len;
    m.rope.attention_factor =
        g.Find(K("rope.scaling.attn_factor")) != nullptr
            ? attn
            : (f <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(f) / std::log(c.seq_len)));
    why = type_given ? fmt::format("{} \"longrope\" and tensors rope_factors_short/long.weight",
                                   K("rope.scaling.type"))
                     : "tensors rope_factors_short/long.weight (LongRoPE's lists)";
  } else {
    Fail("{}: metadata {} is \"{}\", expected none, linear, yarn or longrope (llama.cpp's types)",
         path, K("rope.scaling.type"), type);
  }
  if (freqs) {
    if (type == "yarn" || type == "longrope") {
      Fail("{}: tensor rope_freqs.weight with {} \"{}\": expected one of the two", path,
           K("rope.scaling.type"), type);
    }
    // llama.cpp divides theta_t by rope_freqs[t] at every position: LongRoPE with the same list
    // for short and long and no attention factor is exactly that.
    m = ParseMethod("longrope");
    m.rope.short_factor = m.rope.long_factor = FactorList(g, "rope_freqs.weight", pairs);
    m.rope.attention_factor = 1.0;
    used.push_back("rope_freqs.weight");
    why = "tensor rope_freqs.weight (per-pair frequency divisors, as LLaMA 3.1 files carry)";
  }
  if (!(m == Method{})) header.method_spec = CanonicalSpec(m);
  header.method_source = why;
  return used;
}

// The family a GGUF file's general.architecture names; refuses the others by name.
const ModelFamily& GgufFamily(const GgufFile& g) {
  const std::string arch = g.String("general.architecture");
  const ModelFamily* family = FindFamilyByGguf(arch);
  if (family == nullptr) {
    Fail("{}: general.architecture is \"{}\"{}, expected one of {} (the families stretch reads)",
         g.path(), arch, FamilyRelativeReason(arch), KnownGgufArchitectures());
  }
  return *family;
}

// Gemma's local and global layers (ModelFamily::swa_pattern), as llama.cpp's gemma2 and gemma3
// read them (src/models/gemma2.cpp, gemma3.cpp): with ARCH.attention.sliding_window above 0 (absent:
// the family's gguf_default_window, gemma2's 4096; gemma3's 0), every layer l with l % P < P - 1
// (P: ARCH.attention.sliding_window_pattern, default the family's) is local, at
// ARCH.rope.freq_base_swa (default: the family's local base; gemma2: the model's RoPE); without a
// window, every layer is global. The query scale as llama.cpp sets it: 1/sqrt(head_dim), but
// hidden / heads at the family's gguf_wide_scale_layers (the 27B models, whose
// query_pre_attn_scalar is that in HF config.json). Gemma 2's soft caps, which llama.cpp's gemma2
// always applies (defaults 50 and 30).
void ParseSwaLayers(const GgufFile& g, const ModelFamily& family, const ArchKeys& K, ModelConfig& c,
                    std::vector<std::string>& from) {
  const std::string& path = g.path();
  if (family.gguf_wide_scale_layers > 0 && c.n_layers == family.gguf_wide_scale_layers &&
      c.n_heads > 0) {
    c.attention.logit_scale = 1.0 / std::sqrt(static_cast<double>(c.dim / c.n_heads));
    from.push_back(fmt::format("logit scale 1/sqrt({}) <- llama.cpp's rule for {} layers (27B)",
                               c.dim / c.n_heads, c.n_layers));
  }
  if (family.softcaps) {
    for (auto [key, cap, fallback] :
         {std::tuple{K("attn_logit_softcapping"), &c.attn_softcap, 50.0},
          std::tuple{K("final_logit_softcapping"), &c.final_softcap, 30.0}}) {
      *cap = g.FloatOr(key, fallback);
      if (!(*cap > 0.0) || *cap > 1e6) {
        Fail("{}: metadata {} is {}, expected a number in (0, 1e6] (llama.cpp always soft-caps)",
             path, key, *cap);
      }
      from.push_back(fmt::format("soft cap {} <- {}{}", *cap, key,
                                 g.Find(key) ? "" : " (absent: llama.cpp's default)"));
    }
  }
  const std::string wkey = K("attention.sliding_window");
  const bool has_window = g.Find(wkey) != nullptr;
  if (has_window ? g.Int(wkey) <= 0 : family.gguf_default_window == 0) {
    from.push_back(fmt::format("every layer global <- {} absent or 0", wkey));
    return;
  }
  SwaPattern p;
  p.window = has_window ? CountKey(g, wkey, kMaxSeqLen) : family.gguf_default_window;
  const std::string pkey = K("attention.sliding_window_pattern");
  p.period = family.swa_pattern;
  if (const GgufValue* v = g.Find(pkey); v != nullptr) {
    if (!v->IsInteger()) {
      Fail(
          "{}: metadata {} is not an integer (a per-layer list is not read yet), expected the "
          "period P of the local/global layers",
          path, pkey);
    }
    p.period = CountKey(g, pkey, kMaxLayers);
  }
  const std::string bkey = K("rope.freq_base_swa");
  if (family.swa_local_base > 0.0) {
    p.local_base = g.FloatOr(bkey, family.swa_local_base);
    if (!(p.local_base > 1.0) || p.local_base > 1e12) {
      Fail("{}: metadata {} is {}, expected a number above 1", path, bkey, p.local_base);
    }
  } else if (g.Find(bkey) != nullptr && static_cast<float>(g.FloatOr(bkey, 0.0)) != c.rope_base) {
    // llama.cpp's gemma2 would run its local layers at that base but with the global layers'
    // interpolation; stretch's Gemma 2 keeps one RoPE for all layers, as transformers does.
    Fail("{}: metadata {} is {}, expected none or {} ({}): {}'s local layers use the model's RoPE",
         path, bkey, g.FloatOr(bkey, 0.0), c.rope_base, K("rope.freq_base"), family.name);
  }
  SetSwaPattern(c, p);
  from.push_back(fmt::format(
      "local layers (window {}, {}), one global layer in every {} <- {}{}, {}{}{}", p.window,
      p.local_base > 0.0 ? fmt::format("RoPE base {}", p.local_base)
                         : std::string("the model's RoPE"),
      p.period, wkey, has_window ? "" : " (absent: llama.cpp's default)", pkey,
      g.Find(pkey) ? "" : " (absent: the family's default)",
      p.local_base > 0.0
          ? fmt::format(", {}{}", bkey, g.Find(bkey) ? "" : " (absent: the family's default)")
          : std::string()));
}

Parsed Parse(const GgufFile& g) {
  const std::string& path = g.path();
  const ModelFamily& family = GgufFamily(g);
  const ArchKeys K{family.gguf_architecture};
  Parsed p;
  ModelConfig& c = p.header.config;
  c.family = family.name;
  std::vector<std::string>& from = p.header.provenance;
  auto count = [&](const char* field, const std::string& key, int64_t max) {
    const int v = static_cast<int>(CountKey(g, key, max));
    from.push_back(fmt::format("{} {} <- {}", field, v, key));
    return v;
  };
  c.dim = count("dim", K("embedding_length"), kMaxDim);
  SetFamilyBlock(family, c);  // after dim: Gemma's embedding scale is sqrt(dim)
  c.n_layers = count("n_layers", K("block_count"), kMaxLayers);
  c.hidden_dim = count("hidden_dim", K("feed_forward_length"), kMaxHidden);
  c.n_heads = count("n_heads", K("attention.head_count"), kMaxDim);
  if (g.Find(K("attention.head_count_kv")) != nullptr) {
    c.n_kv_heads = count("n_kv_heads", K("attention.head_count_kv"), kMaxDim);
  } else {
    c.n_kv_heads = c.n_heads;
    from.push_back(fmt::format("n_kv_heads {} <- {} ({} absent)", c.n_kv_heads,
                               K("attention.head_count"), K("attention.head_count_kv")));
  }
  const double base = g.FloatOr(K("rope.freq_base"), 10000.0);
  if (!(base > 1.0) || base > 1e12) {
    Fail("{}: metadata {} is {}, expected a number above 1", path, K("rope.freq_base"), base);
  }
  c.rope_base = static_cast<float>(base);
  from.push_back(
      g.Find(K("rope.freq_base")) != nullptr
          ? fmt::format("rope_base {} <- {}", c.rope_base, K("rope.freq_base"))
          : fmt::format("rope_base 10000 <- llama.cpp's default ({} absent)", K("rope.freq_base")));
  const double eps = g.FloatOr(K("attention.layer_norm_rms_epsilon"), 1e-5);
  if (!(eps > 0.0) || eps > 1.0) {
    Fail("{}: metadata {} is {}, expected a number in (0, 1]", path,
         K("attention.layer_norm_rms_epsilon"), eps);
  }
  c.norm_eps = static_cast<float>(eps);
  from.push_back(
      g.Find(K("attention.layer_norm_rms_epsilon")) != nullptr
          ? fmt::format("norm_eps {} <- {}", c.norm_eps, K("attention.layer_norm_rms_epsilon"))
          : fmt::format("norm_eps 1e-05 <- default ({} absent)",
                        K("attention.layer_norm_rms_epsilon")));
  if (c.n_heads % c.n_kv_heads != 0) {
    Fail("{}: {} {} does not divide {} {}", path, K("attention.head_count_kv"), c.n_kv_heads,
         K("attention.head_count"), c.n_heads);
  }
  // The head width: attention.key_length when given (llama.cpp's n_embd_head_k, which Qwen 3 sets
  // apart from the model's width), else embedding_length / head_count.
  int D = 0;
  if (g.Find(K("attention.key_length")) != nullptr) {
    D = count("head_dim", K("attention.key_length"), kMaxDim);
    if (c.dim % c.n_heads != 0 || D != c.dim / c.n_heads) c.explicit_head_dim = D;
  } else {
    if (c.dim % c.n_heads != 0) {
      Fail("{}: {} {} is not divisible by {} {} (and {} is absent)", path, K("embedding_length"),
           c.dim, K("attention.head_count"), c.n_heads, K("attention.key_length"));
    }
    D = c.dim / c.n_heads;
  }
  if (D % 2 != 0) Fail("{}: head dimension {} is odd: RoPE rotates pairs", path, D);
  for (const std::string& key : {K("rope.dimension_count"), K("attention.value_length")}) {
    if (g.Find(key) != nullptr && g.Int(key) != D) {
      Fail(
          "{}: metadata {} is {}, expected {} (the head width): stretch supports values as wide "
          "as keys, with every pair rotated",
          path, key, g.Int(key), D);
    }
  }
  c.seq_len = static_cast<int>(CountKey(g, K("context_length"), kMaxSeqLen));
  const std::vector<std::string> rope_tensors = RopeScalingFromGguf(g, D, p.header);
  const int64_t context = g.Int(K("context_length"));
  if (const std::string key = K("attention.sliding_window");
      family.swa_pattern == 0 && g.Find(key) != nullptr && g.Int(key) != 0 &&
      g.Int(key) < context) {
    // A window on every layer (ModelFamily::hf_window_architecture): Mistral's as stretch writes
    // it, Phi-3's as llama.cpp's converter does (0 there: none). llama.cpp's llama architecture
    // does not read the key and its phi3 turns the window off; stretch keeps it, as transformers
    // does. A window of at least the context length is none, as in config.json.
    if (family.hf_window_architecture < 0) {
      Fail("{}: metadata {} is present: the {} family as stretch reads it has no sliding window",
           path, key, family.name);
    }
    const int64_t window = CountKey(g, key, kMaxSeqLen);
    if (!p.header.method_spec.empty()) {
      Fail(
          "{}: metadata {} ({}) and RoPE scaling ({}) together: layers with a sliding window keep "
          "plain RoPE in stretch, expected one or the other",
          path, key, window, p.header.method_spec);
    }
    c.attention.layers.assign(static_cast<size_t>(c.n_layers), LayerLayout{.window = window});
    from.push_back(fmt::format(
        "window {} on every layer <- {} (llama.cpp's {} architecture does not apply it and attends "
        "to every key)",
        window, key, family.gguf_architecture));
  }

  if (family.swa_pattern > 0) ParseSwaLayers(g, family, K, c, from);

  const GgufTensorInfo* emb = g.FindTensor("token_embd.weight");
  if (emb == nullptr) Fail("{}: tensor token_embd.weight is missing", path);
  if (emb->ne.size() != 2 || emb->ne[0] != c.dim) {
    Fail("{}: tensor token_embd.weight has shape {} (ggml order), expected {{{}, vocab}}", path,
         ShapeText(emb->ne), c.dim);
  }
  if (emb->ne[1] > (int64_t{1} << 22)) {
    Fail("{}: tensor token_embd.weight has {} rows, expected a vocabulary of at most {}", path,
         emb->ne[1], int64_t{1} << 22);
  }
  c.vocab_size = static_cast<int>(emb->ne[1]);
  if (g.Find(K("vocab_size")) != nullptr && g.Int(K("vocab_size")) != c.vocab_size) {
    Fail("{}: metadata {} is {}, but token_embd.weight has {} rows", path, K("vocab_size"),
         g.Int(K("vocab_size")), c.vocab_size);
  }
  c.shared_classifier = g.FindTensor("output.weight") == nullptr;

  auto& e = p.expected;
  for (const FamilyTensorAt& t : FamilyTensors(family, c, WeightFormat::kGguf)) {
    e.push_back({t.name, t.shape});
  }

  std::set<std::string> known(rope_tensors.begin(), rope_tensors.end());
  std::map<std::string, int> types;
  for (const auto& [name, shape] : e) {
    known.insert(name);
    const GgufTensorInfo* t = g.FindTensor(name);
    if (t == nullptr) Fail("{}: tensor {} is missing", path, name);
    const std::vector<int64_t> ggml_order(shape.rbegin(), shape.rend());
    if (t->ne != ggml_order) {
      Fail("{}: tensor {} has shape {} (ggml order), expected {}", path, name, ShapeText(t->ne),
           ShapeText(ggml_order));
    }
    if (!GgmlTypeReadable(t->type)) {
      Fail(
          "{}: tensor {} is {}: stretch reads F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K and Q6_K "
          "tensors",
          path, name, GgmlTypeName(t->type));
    }
    ++types[GgmlTypeName(t->type)];
  }
  for (const GgufTensorInfo& t : g.tensors()) {
    if (!known.count(t.name)) {
      Fail("{}: tensor {} ({}, shape {}) is not part of a {} model as stretch runs it", path,
           t.name, GgmlTypeName(t.type), ShapeText(t.ne), family.name);
    }
  }
  std::string type_text;
  for (const auto& [name, n] : types) type_text += (type_text.empty() ? "" : ", ") + name;
  p.header.format =
      fmt::format("GGUF version {} ({}, {})", g.version(), family.gguf_architecture, type_text);
  return p;
}

}  // namespace

GgufModelHeader ReadGgufModelHeader(const GgufFile& g) { return Parse(g).header; }
GgufModelHeader ReadGgufModelHeader(const std::string& path) {
  return ReadGgufModelHeader(GgufFile::Open(path));
}

namespace {

// The packed type of a ggml tensor type, when the products read it as it is.
std::optional<PackedType> PackedTypeOf(uint32_t ggml_type) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kF16: return PackedType::kF16;
    case GgmlType::kBF16: return PackedType::kBF16;
    case GgmlType::kQ8_0: return PackedType::kQ8_0;
    case GgmlType::kQ4_0: return PackedType::kQ4_0;
    case GgmlType::kQ4_K: return PackedType::kQ4_K;
    case GgmlType::kQ5_K: return PackedType::kQ5_K;
    case GgmlType::kQ6_K: return PackedType::kQ6_K;
    default: return std::nullopt;
  }
}

}  // namespace

Model LoadGgufModel(const std::string& path, WeightStorage storage) {
  return LoadGgufModel(GgufFile::Open(path), storage);
}
Model LoadGgufModel(const GgufFile& g, WeightStorage storage) {
  const std::string& path = g.path();
  const Parsed p = Parse(g);
  Model m;
  m.config = p.header.config;
  m.source = path + " (" + p.header.format + ")";
  ModelWeights& w = m.weights;
  w.layers.resize(static_cast<size_t>(m.config.n_layers));
  const ModelFamily& family = GgufFamily(g);
  for (const FamilyTensorAt& t : FamilyTensors(family, m.config, WeightFormat::kGguf)) {
    const GgufTensorInfo* info = g.FindTensor(t.name);
    if (const std::optional<PackedType> type = PackedTypeOf(info->type);
        storage == WeightStorage::kAsStored && type && t.spec->Matrix()) {
      const std::span<const uint8_t> bytes = g.TensorData(*info);
      SetFamilyTensorPacked(w, t,
                            MakePackedMatrix(fmt::format("{} of {}", t.name, path), *type,
                                             bytes.data(), static_cast<int64_t>(bytes.size()),
                                             t.shape[0], t.shape[1], g.MappingOwner()),
                            family.gguf_rope_halves);
      continue;
    }
    std::vector<float> values(static_cast<size_t>(info->elements));
    g.ReadFloats(*info, values);
    SetFamilyTensorValues(w, t, std::move(values), family.gguf_rope_halves);
  }
  return m;
}

StoredWeights GgufStoredWeightBytes(const GgufFile& g) {
  const Parsed p = Parse(g);
  StoredWeights out;
  std::set<std::string> types;
  for (const FamilyTensorAt& t :
       FamilyTensors(GgufFamily(g), p.header.config, WeightFormat::kGguf)) {
    const GgufTensorInfo* info = g.FindTensor(t.name);
    if (PackedTypeOf(info->type) && t.spec->Matrix()) {
      out.bytes += info->bytes;
      types.insert(GgmlTypeName(info->type));
    } else {
      out.bytes += 4 * info->elements;
    }
  }
  for (const std::string& name : types) out.types += (out.types.empty() ? "" : ", ") + name;
  return out;
}

GgufKeys GgufTokenizerKeys(const GgufFile& g) {
  GgufKeys kv;
  for (const auto& [key, value] : g.metadata()) {
    if (key.starts_with("tokenizer.")) kv.emplace_back(key, value);
  }
  return kv;
}

bool GgufHasVocabulary(const GgufFile& g) { return g.Find("tokenizer.ggml.tokens") != nullptr; }
bool GgufHasVocabulary(const std::string& path) { return GgufHasVocabulary(GgufFile::Open(path)); }

Tokenizer ReadGgufTokenizer(const std::string& path) {
  return ReadGgufTokenizer(GgufFile::Open(path));
}
Tokenizer ReadGgufTokenizer(const GgufFile& g) {
  const std::string& path = g.path();
  const GgufValue* tokens = g.Find("tokenizer.ggml.tokens");
  if (tokens == nullptr)
    Fail("{}: metadata tokenizer.ggml.tokens is missing: the file carries no vocabulary", path);
  const std::string kind = g.StringOr("tokenizer.ggml.model", "");
  if (kind != "llama") {
    Fail(
        "{}: metadata tokenizer.ggml.model is \"{}\", expected \"llama\" (a SentencePiece "
        "vocabulary; byte-level BPE vocabularies, \"gpt2\", are read by BpeTokenizer::FromGguf)",
        path, kind);
  }
  if (tokens->type != GgufValueType::kArray || tokens->elem_type != GgufValueType::kString) {
    Fail("{}: metadata tokenizer.ggml.tokens: {}, expected an array of strings", path,
         tokens->Describe());
  }
  const size_t n = tokens->array.size();
  std::vector<float> scores(n, 0.0f);
  if (const GgufValue* s = g.Find("tokenizer.ggml.scores")) {
    if (s->type != GgufValueType::kArray || s->elem_type != GgufValueType::kFloat32 ||
        s->array.size() != n) {
      Fail("{}: metadata tokenizer.ggml.scores: {}, expected an array of {} float32", path,
           s->Describe(), n);
    }
    for (size_t k = 0; k < n; ++k) scores[k] = static_cast<float>(s->array[k].f);
  }
  // llama.cpp's defaults for a SentencePiece vocabulary (llama_vocab::impl::load, type SPM):
  // <unk> 0, <s> 1, </s> 2, a leading space, BOS first; each key may say otherwise.
  SpmLayout layout;
  const auto id_key = [&](const char* key, int* id, bool none_ok) {
    if (g.Find(key) == nullptr) return;
    const int64_t v = g.Int(key);
    if (v < (none_ok ? -1 : 0) || v >= static_cast<int64_t>(n)) {
      Fail("{}: metadata {} is {}, expected a token id below {}", path, key, v, n);
    }
    *id = static_cast<int>(v);
  };
  id_key("tokenizer.ggml.unknown_token_id", &layout.unk, true);
  id_key("tokenizer.ggml.bos_token_id", &layout.bos, false);
  id_key("tokenizer.ggml.eos_token_id", &layout.eos, true);
  const auto bool_key = [&](const char* key, bool* value) {
    const GgufValue* v = g.Find(key);
    if (v == nullptr) return;
    if (v->type != GgufValueType::kBool)
      Fail("{}: metadata {} is {}, expected a bool", path, key, v->Describe());
    *value = v->u != 0;
  };
  bool_key("tokenizer.ggml.add_space_prefix", &layout.add_space_prefix);
  bool_key("tokenizer.ggml.add_bos_token", &layout.add_bos);
  std::vector<std::string> pieces;
  pieces.reserve(n);
  const std::string_view kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's space
  for (const GgufValue& v : tokens->array) pieces.push_back(ReplaceAll(v.s, kSpace, " "));
  if (const GgufValue* types = g.Find("tokenizer.ggml.token_type"); types != nullptr) {
    if (types->type != GgufValueType::kArray || types->array.size() != n ||
        !(n == 0 || types->array[0].IsInteger())) {
      Fail("{}: metadata tokenizer.ggml.token_type is {}, expected an array of {} integers", path,
           types->Describe(), n);
    }
    layout.types.resize(n);
    for (size_t id = 0; id < n; ++id) {
      const int64_t type = GgufElementInt(types->array[id]);
      if (type < 0 || type > 6) {
        Fail("{}: metadata tokenizer.ggml.token_type[{}] is {}, expected 0..6 (llama_token_type)",
             path, id, type);
      }
      layout.types[id] = static_cast<SpmTokenType>(type);
      // llama.cpp makes end-of-text and fill-in-the-middle names control tokens whatever their
      // type (ControlToLlamaCpp).
      if (layout.types[id] == SpmTokenType::kUserDefined &&
          ControlToLlamaCpp(tokens->array[id].s)) {
        layout.types[id] = SpmTokenType::kControl;
      }
      // Special tokens are found in a prompt by their spelling in the file, as llama.cpp finds
      // them ("▁<SUF>" is not " <SUF>").
      if (layout.types[id] == SpmTokenType::kControl ||
          layout.types[id] == SpmTokenType::kUnknown) {
        layout.special_spelling.emplace_back(tokens->array[id].s, static_cast<int>(id));
      }
      // A user-defined token matches its spelling in the file (llama.cpp's converter writes their
      // spaces as spaces; one written with "▁" matches "▁").
      if (layout.types[id] == SpmTokenType::kUserDefined) {
        layout.matched.emplace_back(tokens->array[id].s, static_cast<int>(id));
      }
    }
  } else {
    // Without types, llama.cpp's (llama_vocab::impl::load): every token normal but the three.
    layout.types.assign(n, SpmTokenType::kNormal);
    for (const int id : {layout.unk, layout.bos, layout.eos}) {
      if (id >= 0 && static_cast<size_t>(id) < n)  // FromVocabulary refuses the others by name
        layout.types[static_cast<size_t>(id)] =
            id == layout.unk ? SpmTokenType::kUnknown : SpmTokenType::kControl;
    }
  }
  // llama.cpp gives a model named Phi-3 (general.name, any case) the RSTRIP attribute on its
  // special tokens but <unk>, <s> and <|endoftext|>, and on </s> (llama_vocab::impl::load).
  std::string name = g.StringOr("general.name", "");
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (size_t id = 0; id < n; ++id) {
      const SpmTokenType type = layout.types[id];
      const std::string& text = tokens->array[id].s;
      const bool special = type == SpmTokenType::kControl || type == SpmTokenType::kUnknown ||
                           type == SpmTokenType::kUserDefined;
      if ((special || text == "</s>") && text != "<unk>" && text != "<s>" &&
          text != "<|endoftext|>") {
        layout.rstrip.push_back(static_cast<int>(id));
      }
    }
  }
  Tokenizer t = Tokenizer::FromVocabulary(path + " (its vocabulary)", std::move(pieces),
                                          std::move(scores), std::move(layout));
  return t;
}

namespace {

// The keys and tensor that make llama.cpp run `method` on a model (the reverse of
// RopeScalingFromGguf): YaRN as rope.scaling.* keys, llama3 and position interpolation as
// llama.cpp runs them for the llama architecture; anything else is refused by name.
void AddMethod(const std::string& path, const ModelConfig& c, const Method& m,
               std::vector<std::pair<std::string, GgufValue>>& kv,
               std::vector<GgufTensorOut>& tensors) {
  const RopeMethod& r = m.rope;
  const std::string spec = CanonicalSpec(m);
  const char* arch = FamilyOf(c).gguf_architecture;
  const ArchKeys K{arch};
  const RopeMethod defaults = ParseMethod(std::string(MethodName(m))).rope;
  auto refuse = [&](const std::string& why) {
    Fail(
        "{}: --method {}: {} (GGUF files carry direct, pi:factor=F, yarn:factor=F and "
        "llama3:factor=F with their default keys otherwise)",
        path, spec, why);
  };
  if (!m.rel.IsIdentity() || m.mask.kind != MaskKind::kCausal || m.logn) {
    refuse("a relative position map, a mask or log-n scaling has no GGUF key");
  }
  if (r.mode != ScaleMode::kStatic) refuse("dynamic scaling has no GGUF key");
  if (r.base != 0.0) refuse("write the model with its own base (a base override has no key)");
  if (r.scaling == RopeScaling::kNone) return;
  if (c.attention.UniformWindow() > 0) {
    refuse("the model's layers all have a sliding window, inside which they keep plain RoPE");
  }
  if (r.factor == 0.0) refuse("give the factor (the file cannot say 'the call's scale')");
  if (c.rope_interpolation != 1.0f) {
    refuse("the model already has linear scaling (trained-in position interpolation)");
  }
  const int64_t orig = r.original_length != 0 ? r.original_length : c.seq_len;
  if (r.scaling == RopeScaling::kLinear) {
    kv.emplace_back(K("rope.scaling.type"), GgufString("linear"));
    kv.emplace_back(K("rope.scaling.factor"), GgufF32(static_cast<float>(r.factor)));
  } else if (r.scaling == RopeScaling::kYarn) {
    if (r.beta_fast != defaults.beta_fast || r.beta_slow != defaults.beta_slow || r.mscale != 0.0 ||
        r.mscale_all_dim != 0.0 || r.truncate != defaults.truncate) {
      refuse(
          fmt::format("llama.cpp's {} architecture reads no beta, mscale or truncate key", arch));
    }
    kv.emplace_back(K("rope.scaling.type"), GgufString("yarn"));
    kv.emplace_back(K("rope.scaling.factor"), GgufF32(static_cast<float>(r.factor)));
    kv.emplace_back(K("rope.scaling.original_context_length"),
                    GgufU32(static_cast<uint32_t>(orig)));
    if (r.attention_factor != 0.0) {
      // llama.cpp multiplies YaRN's own 0.1 ln s + 1 by rope.scaling.attn_factor.
      kv.emplace_back(K("rope.scaling.attn_factor"),
                      GgufF32(static_cast<float>(r.attention_factor /
                                                 method_internal::GetMscale(r.factor, 1.0))));
    }
    // <arch>.context_length: the extended length; the original one is the model's seq_len.
    for (auto& [key, value] : kv) {
      if (key == K("context_length")) {
        value = GgufU32(static_cast<uint32_t>(std::lround(static_cast<double>(orig) * r.factor)));
      }
    }
  } else if (r.scaling == RopeScaling::kLlama3) {
    if (!FamilyOf(c).gguf_rope_freqs) {
      std::string readers;
      for (const ModelFamily* f : ModelFamilies()) {
        if (f->gguf_rope_freqs) readers += (readers.empty() ? "" : ", ") + std::string(f->name);
      }
      refuse(fmt::format(
          "llama.cpp reads rope_freqs.weight (LLaMA 3.1's rule) only for the {} architecture, "
          "and this is a {} model",
          readers, arch));
    }
    // llama.cpp runs LLaMA 3.1's rule as per-pair divisors of theta (rope_freqs.weight), applied
    // at every length: the divisors of this factor.
    const RopeGeometry geo{orig, c.head_dim(), c.rope_base, 1.0};
    const RopeFrequencies plain = ComputeFrequencies(RopeMethod{}, geo, 1.0);
    const RopeFrequencies scaled = ComputeFrequencies(r, geo, r.factor);
    std::vector<float> divisors;
    for (size_t t = 0; t < plain.thetas.size(); ++t) {
      divisors.push_back(static_cast<float>(plain.thetas[t] / scaled.thetas[t]));
    }
    tensors.push_back({"rope_freqs.weight",
                       {static_cast<int64_t>(divisors.size())},
                       static_cast<uint32_t>(GgmlType::kF32),
                       EncodeTensor(divisors, GgmlType::kF32)});
  } else if (r.scaling == RopeScaling::kLongRope && FamilyOf(c).gguf_longrope) {
    // As llama.cpp's converter writes Phi-3 (conversion/phi.py, Phi3MiniModel): the two lists as
    // tensors, the attention factor HF's rule gives (sqrt(1 + ln s / ln orig), or the method's
    // own), the original and the extended lengths, and no rope.scaling.type key; llama.cpp takes
    // the long list when its context is longer than the original length, as stretch's longrope
    // does per call (method.h, LongRopeUsesLong).
    const double attention =
        r.attention_factor != 0.0
            ? r.attention_factor
            : (r.factor <= 1.0
                   ? 1.0
                   : std::sqrt(1.0 + std::log(r.factor) / std::log(static_cast<double>(orig))));
    kv.emplace_back(K("rope.scaling.original_context_length"),
                    GgufU32(static_cast<uint32_t>(orig)));
    kv.emplace_back(K("rope.scaling.attn_factor"), GgufF32(static_cast<float>(attention)));
    for (auto& [key, value] : kv) {
      if (key == K("context_length")) {
        value = GgufU32(static_cast<uint32_t>(std::lround(static_cast<double>(orig) * r.factor)));
      }
    }
    for (const auto& [name, list] : {std::pair{"rope_factors_long.weight", &r.long_factor},
                                     std::pair{"rope_factors_short.weight", &r.short_factor}}) {
      if (static_cast<int>(list->size()) != c.head_dim() / 2) {
        refuse(fmt::format("{} factors in a list, expected {} (one per pair)", list->size(),
                           c.head_dim() / 2));
      }
      const std::vector<float> values(list->begin(), list->end());
      tensors.push_back({name,
                         {static_cast<int64_t>(values.size())},
                         static_cast<uint32_t>(GgmlType::kF32),
                         EncodeTensor(values, GgmlType::kF32)});
    }
  } else {
    refuse(fmt::format("llama.cpp's {} architecture has no GGUF key for {}", arch, MethodName(m)));
  }
}

// general.name: what the model is called, as llama.cpp's converters write it (the model's
// folder or file name, not a path): the source's file name without its extension, or for a
// checkpoint of a training run (step-NNNNNNNN.safetensors) the run's folder.
std::string ModelName(const std::string& source) {
  const std::filesystem::path p(source.substr(0, source.find(" (")));
  // A GGUF file's own name carries over (llama.cpp reads it: Phi-3's RSTRIP goes by it).
  std::error_code ec;
  if (std::filesystem::is_regular_file(p, ec) && GgufFile::Looks(p.string())) {
    const std::string own = GgufFile::Open(p.string()).StringOr("general.name", "");
    if (!own.empty()) return own;
  }
  std::string stem = p.stem().string();
  if (stem.starts_with("step-") && p.has_parent_path()) {
    stem = p.parent_path().filename().string();
  }
  return stem.empty() ? "model" : stem;
}

// general.file_type: llama.cpp's llama_ftype for the type most tensors have (llama.h:
// LLAMA_FTYPE_ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7, MOSTLY_BF16 32).
uint32_t FileType(GgmlType matrices) {
  switch (matrices) {
    case GgmlType::kF16: return 1;
    case GgmlType::kQ8_0: return 7;
    case GgmlType::kBF16: return 32;
    default: return 0;
  }
}

}  // namespace

void SaveGgufModel(const Model& model, const std::string& path, uint32_t matrix_type,
                   const Tokenizer* tokenizer, const Method* method,
                   const GgufKeys* vocabulary_keys) {
  const ModelConfig& c = model.config;
  STRETCH_CHECK(tokenizer == nullptr || vocabulary_keys == nullptr,
                "SaveGgufModel: a tokenizer and a vocabulary file both given");
  // llama.cpp's gemma2 and gemma3 scale queries by 1/sqrt(head_dim), by 1/sqrt(dim / heads) at
  // the family's gguf_wide_scale_layers (ParseSwaLayers): the only logit scales its files can
  // mean.
  const int wide = FamilyOf(c).gguf_wide_scale_layers;
  const bool gguf_scale =
      FamilyOf(c).swa_pattern > 0 &&
      (c.attention.logit_scale == 0.0 ||
       (wide > 0 && c.n_layers == wide &&
        c.attention.logit_scale == 1.0 / std::sqrt(static_cast<double>(c.dim / c.n_heads))));
  if (!gguf_scale && FamilyOf(c).swa_pattern > 0 && FamilyHoldsLayout(FamilyOf(c), c, true)) {
    Fail(
        "{}: {} scales q . k by {:.6g} (query_pre_attn_scalar {:.6g}), which no GGUF key holds: "
        "llama.cpp's {} scales by 1/sqrt(head dim) = {:.6g} (write a Hugging Face folder, "
        "which keeps it)",
        path, model.source, c.attention.logit_scale,
        1.0 / (c.attention.logit_scale * c.attention.logit_scale), FamilyOf(c).gguf_architecture,
        1.0 / std::sqrt(static_cast<double>(c.head_dim())));
  }
  // What llama.cpp's gemma2 always does, and its files therefore cannot turn off.
  if (const ModelFamily& f = FamilyOf(c); f.softcaps || f.gguf_tied || f.gguf_default_window > 0) {
    std::string lacks;
    if (f.softcaps && !(c.attn_softcap > 0.0 && c.final_softcap > 0.0)) {
      lacks = fmt::format("soft caps {} and {} (llama.cpp's {} always soft-caps both)",
                          c.attn_softcap, c.final_softcap, f.gguf_architecture);
    } else if (f.gguf_tied && !c.shared_classifier) {
      lacks = fmt::format(
          "a classifier of its own (llama.cpp's {} reads no output.weight: it "
          "scores with the embedding)",
          f.gguf_architecture);
    } else if (f.gguf_default_window > 0 && !SwaPatternOf(c).has_value()) {
      lacks = fmt::format(
          "no local layers (llama.cpp's {} gives every other layer a window of {} "
          "when the file has none)",
          f.gguf_architecture, f.gguf_default_window);
    }
    if (!lacks.empty()) {
      Fail("{}: {} has {}; write a Hugging Face folder, which holds it", path, model.source, lacks);
    }
  }
  if (!FamilyHoldsLayout(FamilyOf(c), c, gguf_scale)) {
    Fail(
        "{}: GGUF's {} architecture holds plain models of its family{}; {} has {} (expected the "
        "default RoPE, full-attention layout)",
        path, FamilyOf(c).gguf_architecture,
        FamilyOf(c).hf_window_architecture >= 0 ? " and ones with one sliding window on every layer"
        : FamilyOf(c).swa_pattern > 0
            ? " and ones with local and global layers (every P-th layer global) at the query "
              "scale llama.cpp gives them"
            : "",
        model.source,
        c.Gau() ? std::string("the GAU block")
                : std::string("a trained attention layout (per-layer positions or windows, norms, "
                              "logit scale or another variant)"));
  }
  const GgmlType mt = static_cast<GgmlType>(matrix_type);
  if (mt != GgmlType::kF32 && mt != GgmlType::kF16 && mt != GgmlType::kBF16 &&
      mt != GgmlType::kQ8_0) {
    Fail("{}: GGUF matrices of type {}: stretch writes F32, F16, BF16 or Q8_0", path,
         GgmlTypeName(matrix_type));
  }
  if (tokenizer != nullptr && tokenizer->vocab_size() != c.vocab_size) {
    Fail("{}: tokenizer {} has {} tokens, the model {}", path, tokenizer->path(),
         tokenizer->vocab_size(), c.vocab_size);
  }
  const ModelFamily& family = FamilyOf(c);
  const ArchKeys K{family.gguf_architecture};
  std::vector<std::pair<std::string, GgufValue>> kv;
  kv.emplace_back("general.architecture", GgufString(family.gguf_architecture));
  kv.emplace_back("general.name", GgufString(ModelName(model.source)));
  kv.emplace_back("general.file_type", GgufU32(FileType(mt)));
  kv.emplace_back(K("context_length"), GgufU32(static_cast<uint32_t>(c.seq_len)));
  kv.emplace_back(K("embedding_length"), GgufU32(static_cast<uint32_t>(c.dim)));
  kv.emplace_back(K("block_count"), GgufU32(static_cast<uint32_t>(c.n_layers)));
  kv.emplace_back(K("feed_forward_length"), GgufU32(static_cast<uint32_t>(c.hidden_dim)));
  kv.emplace_back(K("attention.head_count"), GgufU32(static_cast<uint32_t>(c.n_heads)));
  kv.emplace_back(K("attention.head_count_kv"), GgufU32(static_cast<uint32_t>(c.n_kv_heads)));
  kv.emplace_back(K("rope.dimension_count"), GgufU32(static_cast<uint32_t>(c.head_dim())));
  if (c.explicit_head_dim > 0) {  // convert_hf_to_gguf.py writes them from config.json's head_dim
    kv.emplace_back(K("attention.key_length"), GgufU32(static_cast<uint32_t>(c.head_dim())));
    kv.emplace_back(K("attention.value_length"), GgufU32(static_cast<uint32_t>(c.head_dim())));
  }
  kv.emplace_back(K("rope.freq_base"), GgufF32(c.rope_base));
  kv.emplace_back(K("attention.layer_norm_rms_epsilon"), GgufF32(c.norm_eps));
  if (const int64_t window = c.attention.UniformWindow(); window > 0) {
    // llama.cpp's `llama` architecture does not read this key (its converter drops Mistral's
    // window): it attends to every key, and agrees with the file only up to `window` tokens.
    kv.emplace_back(K("attention.sliding_window"), GgufU32(static_cast<uint32_t>(window)));
  }
  if (const std::optional<SwaPattern> swa = SwaPatternOf(c); swa && family.swa_pattern > 0) {
    // As convert_hf_to_gguf.py's Gemma2Model / Gemma3Model write them; llama.cpp's gemma2 and
    // gemma3 read all three (gemma2's local layers: the model's base when freq_base_swa is absent).
    kv.emplace_back(K("attention.sliding_window"), GgufU32(static_cast<uint32_t>(swa->window)));
    kv.emplace_back(K("attention.sliding_window_pattern"),
                    GgufU32(static_cast<uint32_t>(swa->period)));
    if (swa->local_base > 0.0) {
      kv.emplace_back(K("rope.freq_base_swa"), GgufF32(static_cast<float>(swa->local_base)));
    }
  }
  if (family.softcaps) {  // Gemma 2 (convert_hf_to_gguf.py's Gemma2Model)
    kv.emplace_back(K("attn_logit_softcapping"), GgufF32(static_cast<float>(c.attn_softcap)));
    kv.emplace_back(K("final_logit_softcapping"), GgufF32(static_cast<float>(c.final_softcap)));
  }
  if (c.rope_interpolation != 1.0f) {
    kv.emplace_back(K("rope.scaling.type"), GgufString("linear"));
    kv.emplace_back(K("rope.scaling.factor"), GgufF32(c.rope_interpolation));
  }
  if (tokenizer != nullptr) {
    // As llama.cpp's converters write it (convert-llama2c-to-ggml for llama2.c's vocabulary):
    // src/io/tokenizer/gguf_vocabulary.h.
    for (auto& key : GgufVocabularyKeys(*tokenizer)) kv.push_back(std::move(key));
  }
  if (vocabulary_keys != nullptr) {
    for (const auto& key : *vocabulary_keys) kv.push_back(key);
  }
  const ModelWeights& w = model.weights;
  std::vector<GgufTensorOut> tensors;
  auto add = [&](const std::string& name, const std::vector<float>& x, int64_t rows, int64_t cols,
                 bool matrix) {
    STRETCH_CHECK(static_cast<int64_t>(x.size()) == rows * cols, "{}: {} values, expected {}", name,
                  x.size(), rows * cols);
    // Q8_0 packs rows in blocks of 32: a matrix whose rows are not a multiple of 32 long stays
    // F32 (as llama.cpp's converters fall back for such tensors).
    const GgmlType t = !matrix || (mt == GgmlType::kQ8_0 && cols % 32 != 0) ? GgmlType::kF32 : mt;
    GgufTensorOut o;
    o.name = name;
    o.ne = matrix ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{cols};
    o.type = static_cast<uint32_t>(t);
    o.data = EncodeTensor(x, t);
    tensors.push_back(std::move(o));
  };
  for (const FamilyTensorAt& t : FamilyTensors(family, c, WeightFormat::kGguf)) {
    const bool matrix = t.spec->Matrix();  // (rows, cols); a vector is one row
    const int64_t rows = matrix ? t.shape[0] : 1, cols = t.shape.back();
    if (t.spec->Fused() || (family.gguf_rope_halves && t.rope_heads > 0)) {
      // Fused parts in one tensor; HF's rotate-half rows where llama.cpp's converter keeps them.
      add(t.name, FamilyTensorValues(w, t, family.gguf_rope_halves), rows, cols, matrix);
    } else {
      add(t.name, FamilyTensorData(w, t), rows, cols, matrix);
    }
  }
  if (method != nullptr) AddMethod(path, c, *method, kv, tensors);
  WriteGguf(path, kv, tensors);
}

}  // namespace stretch
