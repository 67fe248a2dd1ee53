#include "src/io/hf_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <tuple>
#include <utility>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/io/gguf.h"  // HalfToFloat, BFloat16ToFloat, EncodeTensor
#include "src/io/output_file.h"
#include "src/model/family.h"
#include "src/position/method.h"

namespace stretch {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// Bounds that keep a corrupted count from turning into a huge allocation before the tensor shapes
// are checked (the shapes then pin every size to the files' own bytes); the same as the GGUF
// reader's where both have the count.
constexpr int64_t kMaxDim = int64_t{1} << 16;         // hidden_size, heads, head_dim
constexpr int64_t kMaxHidden = int64_t{1} << 20;      // intermediate_size
constexpr int64_t kMaxLayers = int64_t{1} << 10;      // num_hidden_layers
constexpr int64_t kMaxVocab = int64_t{1} << 22;       // vocab_size
constexpr int64_t kMaxSeqLen = int64_t{1} << 26;      // max_position_embeddings and the original
constexpr int64_t kMaxWindow = int64_t{1} << 40;      // Mistral's sliding_window
constexpr double kMaxRopeBase = 1e12;                 // rope_theta
constexpr double kMaxLinearFactor = 1e6;              // rope_scaling.factor of "linear"
constexpr int64_t kMaxJsonBytes = int64_t{64} << 20;  // config.json and the index
// rope_scaling holds numbers and lists of numbers (LongRoPE's factor lists): containers nested
// deeper than this (the object itself counting as one) are refused before anything dumps them.
constexpr int kMaxRopeDepth = 4;
constexpr size_t kMaxShards = 4096;

// What a reader takes: "expected one of "LlamaForCausalLM", ... (model_type "llama", ...)".
std::string ReadArchitectures() {
  std::string types;
  for (const ModelFamily* f : ModelFamilies()) {
    for (const char* t : f->hf_model_types)
      types += fmt::format("{}\"{}\"", types.empty() ? "" : ", ", t);
  }
  return fmt::format("expected one of {} (model_type {})", KnownHfArchitectures(), types);
}

std::string InDir(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

// A file name inside the folder: not empty, not "." or "..", no directory part ('/', or '\\' as
// Windows writers would put it) and no NUL.
bool PlainFileName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\\\0", 3)) == std::string_view::npos;
}

bool ReadableDtype(SafetensorsDtype d) {
  return d == SafetensorsDtype::kF32 || d == SafetensorsDtype::kF16 || d == SafetensorsDtype::kBF16;
}

// The float's shortest decimal as a double: 1e-5f is written 1e-05, not 9.999999747378752e-06.
double ShortestDouble(float f) {
  const std::string text = fmt::format("{}", f);
  double d = 0.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
  STRETCH_CHECK(ec == std::errc() && end == text.data() + text.size(), "{} does not read back",
                text);
  return d;
}

// A JSON value in an error message: containers by their size, strings quoted and marked as
// strings, anything longer than a line's share cut (at a UTF-8 character boundary).
std::string Describe(const Json& v) {
  if (v.is_array()) return fmt::format("an array of {} elements", v.size());
  if (v.is_object()) return fmt::format("an object of {} keys", v.size());
  std::string text = v.dump();
  if (text.size() > 48) {
    size_t cut = 45;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut) + "...";
  }
  return v.is_string() ? "the string " + text : text;
}

// A whole JSON file that must hold an object (config.json, the index).
Json ReadJsonFile(const std::string& path) {
  const std::string text = ReadInputFile(path, "a JSON file", kMaxJsonBytes);
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    Fail("{}: not valid JSON: {}", path, e.what());
  }
  if (!j.is_object()) Fail("{}: the file holds {}, expected a JSON object", path, Describe(j));
  return j;
}

// The keys of one JSON object (config.json, or rope_scaling inside it), type-checked, every
// error naming the file and the key (`prefix` + key: "rope_scaling.factor").
struct ConfigKeys {
  const Json& j;
  const std::string& path;
  std::string prefix;

  std::string Name(const char* key) const { return prefix + key; }
  // The value, or nullptr when the key is absent.
  const Json* Find(const char* key) const {
    const auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
  }
  [[noreturn]] void Bad(const char* key, const Json& v, std::string_view expected) const {
    Fail("{}: {} is {}, expected {}", path, Name(key), Describe(v), expected);
  }
  // A JSON integer in 1..max (a fraction, even 32.0, is not one; nor is a boolean).
  int64_t CountOf(const char* key, const Json& v, int64_t max) const {
    const std::string expected = fmt::format("an integer in 1..{}", max);
    if (!v.is_number_integer()) Bad(key, v, expected);
    if (v.is_number_unsigned()) {
      // nlohmann holds every non-negative integer, 0 included, as unsigned.
      const uint64_t u = v.get<uint64_t>();
      if (u < 1 || u > static_cast<uint64_t>(max)) Bad(key, v, expected);
      return static_cast<int64_t>(u);
    }
    const int64_t n = v.get<int64_t>();
    if (n < 1 || n > max) Bad(key, v, expected);
    return n;
  }
  // Required (null is a bad value, absence is "missing").
  int64_t Count(const char* key, int64_t max) const {
    const Json* v = Find(key);
    if (v == nullptr) Fail("{}: {} is missing, expected an integer in 1..{}", path, Name(key), max);
    return CountOf(key, *v, max);
  }
  // Absent or null: nullopt (transformers then derives the value).
  std::optional<int64_t> OptionalCount(const char* key, int64_t max) const {
    const Json* v = Find(key);
    if (v == nullptr || v->is_null()) return std::nullopt;
    return CountOf(key, *v, max);
  }
  // Absent: `fallback`; present: true or false (null, 0 and "false" are not).
  bool Bool(const char* key, bool fallback) const {
    const Json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) Bad(key, *v, "true or false");
    return v->get<bool>();
  }
  // Present: a JSON number (not a boolean) in the range `ok`, else refused with `expected`.
  template <typename Ok>
  std::optional<double> Number(const char* key, Ok&& ok, std::string_view expected) const {
    const Json* v = Find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number() || !ok(v->get<double>())) Bad(key, *v, expected);
    return v->get<double>();
  }
};

// "architectures" and "model_type": the architecture name, LlamaForCausalLM or
// MistralForCausalLM; one of the two keys may be absent (older configs), and both must agree.
std::string ReadArchitecture(const ConfigKeys& k) {
  const std::string& path = k.path;
  std::optional<std::string> arch, type;
  if (const Json* a = k.Find("architectures"); a != nullptr && !a->is_null()) {
    if (!a->is_array() || a->size() != 1 || !(*a)[0].is_string()) {
      k.Bad("architectures", *a, "a list of one name, [\"LlamaForCausalLM\"]");
    }
    arch = (*a)[0].get<std::string>();
  }
  if (const Json* t = k.Find("model_type"); t != nullptr && !t->is_null()) {
    if (!t->is_string()) k.Bad("model_type", *t, "a string, \"llama\" or \"mistral\"");
    type = t->get<std::string>();
  }
  if (!arch && !type) {
    Fail(
        "{}: architectures and model_type are missing, expected [\"LlamaForCausalLM\"] or "
        "[\"MistralForCausalLM\"]",
        path);
  }
  for (const ModelFamily* f : ModelFamilies()) {
    for (size_t i = 0; i < f->hf_architectures.size(); ++i) {
      const std::string name = f->hf_architectures[i], want = f->hf_model_types[i];
      if (arch && *arch == name) {
        if (type && *type != want) {
          Fail("{}: model_type \"{}\" does not match architectures [\"{}\"], expected \"{}\"", path,
               *type, *arch, want);
        }
        return name;
      }
      if (!arch && *type == want) return name;
    }
  }
  if (arch) {
    Fail("{}: architectures [\"{}\"] is not read by stretch{}: {}", path, *arch,
         FamilyRelativeReason(*arch), ReadArchitectures());
  }
  Fail("{}: model_type \"{}\" is not read by stretch{}: {}", path, *type,
       FamilyRelativeReason(*type), ReadArchitectures());
}

// Containers nested deeper than kMaxRopeDepth levels (`depth` the value's own level).
bool TooDeep(const Json& v, int depth) {
  if (!v.is_structured()) return false;
  if (depth > kMaxRopeDepth) return true;
  for (const Json& x : v) {
    if (TooDeep(x, depth + 1)) return true;
  }
  return false;
}

// One RoPE scaling object as given (rope_scaling, or rope_parameters less its base and rotary
// fraction): its type ("default" when it says none), checked for what the loader itself uses.
struct RopeScalingObject {
  std::string name;  // "rope_scaling" or "rope_parameters"
  Json json;
  std::string type;
};

// `drop`: keys read elsewhere (rope_parameters' rope_theta and partial_rotary_factor). The object
// is copied only once its depth is known to be small (nlohmann copies recursively).
RopeScalingObject ReadRopeScaling(const std::string& path, const std::string& name,
                                  const Json& given, bool type_required,
                                  std::initializer_list<const char*> drop = {}) {
  std::optional<std::string> type;
  const char* type_key = nullptr;
  for (const char* key : {"rope_type", "type"}) {  // "type": configs before rope_type (2024)
    const auto it = given.find(key);
    if (it == given.end() || it->is_null()) continue;
    if (!it->is_string()) {
      Fail("{}: {}.{} is {}, expected a string such as \"linear\" or \"yarn\"", path, name, key,
           Describe(*it));
    }
    const std::string value = it->get<std::string>();
    if (type && *type != value) {
      Fail("{}: {}.{} \"{}\" and {}.{} \"{}\" disagree, expected one type", path, name, type_key,
           *type, name, key, value);
    }
    type = value;
    type_key = key;
  }
  if (TooDeep(given, 1)) {
    Fail("{}: {} is nested deeper than {} levels, expected numbers and lists of numbers", path,
         name, kMaxRopeDepth);
  }
  if (!type) {
    if (type_required) {
      Fail("{}: {} has no rope_type (or type), expected one such as \"linear\" or \"yarn\"", path,
           name);
    }
    type = "default";
  }
  Json j = given;
  for (const char* key : drop) j.erase(key);
  return {name, std::move(j), *type};
}

// The object without its type keys, to compare two spellings of one scaling.
Json WithoutType(Json j) {
  j.erase("rope_type");
  j.erase("type");
  return j;
}

// The config.json keys of a family with local and global layers or soft caps (ModelFamily::
// swa_pattern, softcaps: Gemma2Config, Gemma3TextConfig; their defaults where a key is absent):
// the soft caps (Gemma 2: 50 and 30, null for none; Gemma 3: none), the query scale, and the
// local and global layers (src/model/families/gemma2.cc, gemma3.cc).
void ParseLocalGlobalConfig(const ConfigKeys& k, const std::string& path, int D,
                            const ModelFamily& family, ModelConfig& c) {
  for (auto [key, cap, fallback] :
       {std::tuple{"attn_logit_softcapping", &c.attn_softcap, 50.0},
        std::tuple{"final_logit_softcapping", &c.final_softcap, 30.0}}) {
    const Json* v = k.Find(key);
    if (!family.softcaps) {
      if (v != nullptr && !v->is_null()) {
        Fail("{}: {} is {}, expected null: {} has no soft-capping (Gemma 2's)", path, key,
             v->dump(), family.hf_architectures[0]);
      }
      continue;
    }
    if (v != nullptr && v->is_null()) continue;  // none
    *cap = k.Number(
                key, [](double x) { return x > 0.0 && x <= 1e6; }, "null or a number in (0, 1e6]")
               .value_or(fallback);
  }
  // Logits times query_pre_attn_scalar ** -0.5 (default 256); 1/sqrt(D), the default scale, when
  // it is D.
  const double qpas = k.Number(
                           "query_pre_attn_scalar", [](double v) { return v > 0.0 && v < 1e9; },
                           "a positive number")
                          .value_or(256.0);
  c.attention.logit_scale = qpas == static_cast<double>(D) ? 0.0 : 1.0 / std::sqrt(qpas);
  if (family.swa_pattern == 0) return;  // soft caps without local layers
  // Which layers are local: layer_types (transformers >= 4.53), else sliding_window_pattern
  // (default 6: layer i global when (i + 1) % 6 == 0). A null sliding_window: every layer global.
  const Json* w = k.Find("sliding_window");
  if (w != nullptr && w->is_null()) return;
  const int64_t window = w == nullptr ? 4096 : k.CountOf("sliding_window", *w, kMaxWindow);
  // Gemma 3's local layers have a base of their own (rope_local_base_freq); Gemma 2's share the
  // model's rotary embedding (Gemma2Config has no such key, and transformers reads none).
  const double local_base =
      family.swa_local_base > 0.0
          ? k.Number(
                 "rope_local_base_freq", [](double v) { return v > 1.0 && v <= kMaxRopeBase; },
                 "a number above 1 (the local layers' RoPE base)")
                .value_or(family.swa_local_base)
          : 0.0;
  std::vector<bool> local(static_cast<size_t>(c.n_layers));
  if (const Json* types = k.Find("layer_types"); types != nullptr && !types->is_null()) {
    if (!types->is_array() || types->size() != local.size()) {
      k.Bad("layer_types", *types,
            fmt::format("a list of {} \"sliding_attention\" / \"full_attention\"", local.size()));
    }
    for (size_t l = 0; l < local.size(); ++l) {
      const Json& t = (*types)[l];
      if (t != "sliding_attention" && t != "full_attention") {
        k.Bad(
            "layer_types", *types,
            fmt::format("\"sliding_attention\" or \"full_attention\" at {}, not {}", l, t.dump()));
      }
      local[l] = t == "sliding_attention";
    }
  } else {
    // Gemma 2's configs before layer_types: layer i local when i is even (P = 2).
    const int64_t P =
        k.OptionalCount("sliding_window_pattern", kMaxLayers).value_or(family.swa_pattern);
    for (size_t l = 0; l < local.size(); ++l) local[l] = (static_cast<int64_t>(l) + 1) % P != 0;
  }
  c.attention.layers.assign(local.size(), LayerLayout{});
  const LayerLayout local_layer = SwaPattern{0, window, local_base}.Local();
  for (size_t l = 0; l < local.size(); ++l) {
    if (local[l]) c.attention.layers[l] = local_layer;
  }
}

// config.json -> header.config (and the header's architecture and RoPE fields).
void ParseConfig(const std::string& dir, HfModelHeader& h) {
  const std::string path = InDir(dir, kHfConfigFile);
  const Json j = ReadJsonFile(path);
  const ConfigKeys k{j, path, ""};
  h.architecture = ReadArchitecture(k);
  const ModelFamily& family = *FindFamilyByHf(h.architecture);
  ModelConfig& c = h.config;
  c.family = family.name;
  c.dim = static_cast<int>(k.Count("hidden_size", kMaxDim));
  SetFamilyBlock(family, c);  // after dim: Gemma's embedding scale is sqrt(dim)
  c.hidden_dim = static_cast<int>(k.Count("intermediate_size", kMaxHidden));
  c.n_layers = static_cast<int>(k.Count("num_hidden_layers", kMaxLayers));
  c.n_heads = static_cast<int>(k.Count("num_attention_heads", kMaxDim));
  c.n_kv_heads =
      static_cast<int>(k.OptionalCount("num_key_value_heads", kMaxDim).value_or(c.n_heads));
  c.vocab_size = static_cast<int>(k.Count("vocab_size", kMaxVocab));
  h.max_position_embeddings = k.Count("max_position_embeddings", kMaxSeqLen);
  c.seq_len = static_cast<int>(h.max_position_embeddings);
  if (k.Find("rms_norm_eps") == nullptr) {
    Fail("{}: rms_norm_eps is missing, expected a number in (0, 1]", path);
  }
  // (0, 1], and not so small that it rounds to 0 in the float the model keeps.
  c.norm_eps = static_cast<float>(*k.Number(
      "rms_norm_eps", [](double v) { return v <= 1.0 && static_cast<float>(v) > 0.0f; },
      "a number in (0, 1]"));
  // LlamaConfig's default: untied; Gemma3TextConfig's: tied.
  c.shared_classifier = k.Bool("tie_word_embeddings", family.hf_default_tied);

  if (c.n_heads % c.n_kv_heads != 0) {
    Fail("{}: num_key_value_heads {} does not divide num_attention_heads {}", path, c.n_kv_heads,
         c.n_heads);
  }
  // The head width: head_dim when given (Qwen 3, Mistral Nemo: not hidden_size /
  // num_attention_heads), else that quotient, as transformers derives it when head_dim is absent
  // or null.
  int D = 0;
  std::string from;
  // The config class's default where the key is absent (Gemma3TextConfig: 256); null: derived.
  std::optional<int64_t> head_dim = k.OptionalCount("head_dim", kMaxDim);
  if (!head_dim && family.hf_default_head_dim > 0 && k.Find("head_dim") == nullptr) {
    head_dim = family.hf_default_head_dim;
  }
  if (head_dim) {
    D = static_cast<int>(*head_dim);
    from = "head_dim";
    if (c.dim % c.n_heads != 0 || D != c.dim / c.n_heads) c.explicit_head_dim = D;
  } else {
    if (c.dim % c.n_heads != 0) {
      Fail("{}: hidden_size {} is not divisible by num_attention_heads {} (and head_dim is absent)",
           path, c.dim, c.n_heads);
    }
    D = c.dim / c.n_heads;
    from = fmt::format("hidden_size {} / num_attention_heads {}", c.dim, c.n_heads);
  }
  if (D % 2 != 0) Fail("{}: head dimension {} ({}) is odd: RoPE rotates pairs", path, D, from);
  // The family's activation (SetFamilyBlock). transformers' ACT2FN: "silu" and "swish" are both
  // nn.SiLU; Gemma's "gelu_pytorch_tanh" is GELU's tanh approximation (Gemma3TextConfig.
  // hidden_activation, its default, which a null hidden_act leaves in force).
  const bool gelu = c.activation == FfnActivation::kGeluTanh;
  for (const char* key : {"hidden_act", "hidden_activation"}) {
    const Json* act = k.Find(key);
    if (act == nullptr || (gelu && act->is_null())) continue;
    if (!act->is_string()) k.Bad(key, *act, "a string");
    const std::string a = act->get<std::string>();
    if (gelu ? a != "gelu_pytorch_tanh" : a != "silu" && a != "swish") {
      Fail("{}: {} is \"{}\", expected \"{}\" (the {} feed-forward)", path, key, a,
           gelu ? "gelu_pytorch_tanh" : "silu", gelu ? "GeGLU" : "SwiGLU");
    }
  }
  if (family.swa_pattern > 0 || family.softcaps) ParseLocalGlobalConfig(k, path, D, family, c);
  for (const FamilyUnreadSwitch& s : family.hf_unread_switches) {
    if (k.Bool(s.key, false)) {
      Fail(
          "{}: {} is true: the {} family's {} are not read from Hugging Face folders yet "
          "(expected false or absent)",
          path, s.key, family.name, s.what);
    }
  }
  // LlamaConfig's and Qwen3Config's switches for biases (Qwen2Config has none: its q/k/v biases
  // are the family's). attention_bias would also put one on o_proj.
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (!family.qkv_bias && k.Bool(key, false)) {
      Fail("{}: {} is true, expected false: the {} block as stretch runs it has no biases there",
           path, key, family.name);
    }
  }
  // Then the family's other switches as stretch writes them (ModelFamily::hf_config_keys): a boolean
  // one that config.json sets the other way turns on something the block as stretch runs it does
  // not have (LlamaConfig's attention_bias, Seed-OSS's attention_out_bias) or off something it
  // needs (Seed-OSS's attention_bias: its q/k/v biases).
  const Json family_switches = Json::parse(family.hf_config_keys);
  for (const auto& [key, want] : family_switches.items()) {
    if (!want.is_boolean() || k.Find(key.c_str()) == nullptr) continue;
    if (k.Bool(key.c_str(), want.get<bool>()) != want.get<bool>()) {
      Fail("{}: {} is {}, expected {}: the {} block as stretch runs it {}", path, key,
           !want.get<bool>(), want.get<bool>(), family.name,
           want.get<bool>() ? "needs it" : "has no such part");
    }
  }
  const char* kEveryPair = "1 (stretch rotates every pair of a head)";
  k.Number(
      "partial_rotary_factor", [](double v) { return v == 1.0; }, kEveryPair);

  // A sliding window on every layer: the family's windowed architecture (MistralForCausalLM) has
  // config.json's sliding_window, W keys per query counting the query itself (the family's file
  // cites transformers' definition); absent, the config class's default (none where it has
  // none); null, none. A window of at least max_position_embeddings is read as none: it changes
  // nothing within the trained length (Phi-3-mini-128k's 262144 at 131072), and a window on every
  // layer would keep the model from every method that changes RoPE (beyond W stretch then attends
  // to every key, where transformers would keep the window).
  int64_t window = 0;
  const int arch_index =
      static_cast<int>(std::find_if(family.hf_architectures.begin(), family.hf_architectures.end(),
                                    [&](const char* a) { return h.architecture == a; }) -
                       family.hf_architectures.begin());
  if (family.hf_window_architecture >= 0 && arch_index == family.hf_window_architecture) {
    const Json* w = k.Find("sliding_window");
    if (w == nullptr || !w->is_null()) {
      window =
          w == nullptr ? family.hf_default_window : k.CountOf("sliding_window", *w, kMaxWindow);
      if (window >= h.max_position_embeddings) window = 0;
      if (window > 0) {
        c.attention.layers.assign(static_cast<size_t>(c.n_layers), LayerLayout{.window = window});
      }
    }
  }

  // RoPE: the base (rope_theta, or transformers 5's rope_parameters.rope_theta) and the scaling
  // (rope_scaling, or the rest of rope_parameters).
  auto base_ok = [](double v) { return v > 1.0 && v <= kMaxRopeBase; };
  const char* kBaseExpected = "a number above 1 (the RoPE base)";
  const std::optional<double> theta = k.Number("rope_theta", base_ok, kBaseExpected);
  std::optional<double> base = theta;
  std::optional<RopeScalingObject> from_parameters, from_scaling;
  if (const Json* p = k.Find("rope_parameters"); p != nullptr && !p->is_null()) {
    if (!p->is_object()) {
      k.Bad("rope_parameters", *p, "an object such as {\"rope_type\": \"default\", ...}");
    }
    const ConfigKeys pk{*p, path, "rope_parameters."};
    const std::optional<double> inner = pk.Number("rope_theta", base_ok, kBaseExpected);
    pk.Number(
        "partial_rotary_factor", [](double v) { return v == 1.0; }, kEveryPair);
    if (theta && inner && *theta != *inner) {
      Fail("{}: rope_theta {} and rope_parameters.rope_theta {} differ, expected one RoPE base",
           path, *theta, *inner);
    }
    if (inner) base = inner;
    from_parameters = ReadRopeScaling(path, "rope_parameters", *p, false,
                                      {"rope_theta", "partial_rotary_factor"});
  }
  if (const Json* s = k.Find("rope_scaling"); s != nullptr && !s->is_null()) {
    if (!s->is_object()) {
      k.Bad("rope_scaling", *s, "null or an object such as {\"rope_type\": \"linear\", ...}");
    }
    from_scaling = ReadRopeScaling(path, "rope_scaling", *s, true);
  }
  // The config class's default (LlamaConfig's 10,000; Gemma3TextConfig's 1,000,000).
  c.rope_base = static_cast<float>(base.value_or(family.hf_default_rope_base));
  if (from_parameters && from_scaling) {
    const RopeScalingObject& a = *from_scaling;
    const RopeScalingObject& b = *from_parameters;
    if (a.type != b.type) {
      Fail(
          "{}: rope_scaling (\"{}\") and rope_parameters (\"{}\") disagree, expected one RoPE "
          "scaling",
          path, a.type, b.type);
    }
    if (a.type != "default" && WithoutType(a.json) != WithoutType(b.json)) {
      Fail("{}: rope_scaling ({}) and rope_parameters ({}) disagree, expected one RoPE scaling",
           path, a.json.dump(), b.json.dump());
    }
  }
  const std::optional<RopeScalingObject>& scaling =
      from_parameters ? from_parameters : from_scaling;
  if (!scaling || scaling->type == "default") return;
  if (window > 0) {
    Fail(
        "{}: sliding_window {} with {} ({}): layers with a sliding window keep plain RoPE in "
        "stretch, expected no RoPE scaling on a windowed model",
        path, window, scaling->name, scaling->type);
  }

  // The scaling itself is the caller's (MethodFromHfRopeScaling); the loader reads only what it
  // needs: linear's factor, and the length the model was trained at.
  const RopeScalingObject& s = *scaling;
  const ConfigKeys sk{s.json, path, s.name + "."};
  h.rope_scaling_json = s.json.dump();  // nlohmann's object: keys sorted
  h.rope_type = s.type;
  if (s.type == "linear") {
    if (sk.Find("factor") == nullptr) {
      Fail("{}: {}.factor is missing, expected a number >= 1", path, s.name);
    }
    h.rope_linear_factor = *sk.Number(
        "factor", [](double v) { return v >= 1.0 && v <= kMaxLinearFactor; }, "a number >= 1");
  }
  // transformers' modeling_rope_utils.py reads the pre-extension length from
  // rope_scaling["original_max_position_embeddings"] for yarn (optional: _validate_yarn_parameters
  // asks models to set it, "with config.max_position_embeddings corresponding to their post-yarn
  // context length"), llama3 (required: _compute_llama3_parameters' old_context_len) and longrope
  // (Phi-3's configs keep it at the top level instead).
  const char* kOrig = "original_max_position_embeddings";
  if (s.type == "yarn" || s.type == "llama3" || s.type == "longrope") {
    std::optional<int64_t> orig = sk.OptionalCount(kOrig, kMaxSeqLen);
    if (!orig && s.type == "longrope") orig = k.OptionalCount(kOrig, kMaxSeqLen);
    if (!orig && s.type == "llama3") {
      Fail(
          "{}: {}.{} is missing, expected the pre-extension context length (transformers' llama3 "
          "RoPE requires it)",
          path, s.name, kOrig);
    }
    if (orig) c.seq_len = static_cast<int>(*orig);
  }
}

// ---- weight files --------------------------------------------------------------------------

// A tensor the model has: its HF name, shape and where it goes (FamilyTensorAt).
using Want = FamilyTensorAt;

std::vector<Want> WantedTensors(const ModelConfig& c) {
  return FamilyTensors(FamilyOf(c), c, WeightFormat::kHf);
}

struct Located {
  size_t file = 0;  // index into Parsed::files
  const SafetensorsTensor* tensor = nullptr;
};

struct Parsed {
  HfModelHeader header;
  std::vector<SafetensorsFile> files;  // header.weight_files, open
  std::vector<Want> wanted;
  std::vector<Located> where;  // wanted[i]'s tensor
};

// The weight files of `dir`: model.safetensors, or the shards its index lists (sorted), opened
// and checked against the index. Fills header.weight_files and p.files; returns whether an index
// was read.
bool OpenWeightFiles(const std::string& dir, Parsed& p, std::map<std::string, Located>& tensors) {
  std::error_code ec;
  const std::string single = InDir(dir, kHfWeightsFile), index = InDir(dir, kHfIndexFile);
  const bool has_single = fs::exists(single, ec), has_index = fs::exists(index, ec);
  if (has_single && has_index) {
    Fail("{}: holds both {} and {}, expected one (a single file, or shards and their index)", dir,
         kHfWeightsFile, kHfIndexFile);
  }
  std::vector<std::string>& names = p.header.weight_files;
  Json weight_map;
  if (has_single) {
    names = {kHfWeightsFile};
  } else if (has_index) {
    const Json j = ReadJsonFile(index);
    const auto it = j.find("weight_map");
    const char* kMap = "an object of tensor name -> shard file name";
    if (it == j.end()) Fail("{}: weight_map is missing, expected {}", index, kMap);
    if (!it->is_object()) Fail("{}: weight_map is {}, expected {}", index, Describe(*it), kMap);
    if (it->empty()) Fail("{}: weight_map is empty, expected the model's tensors", index);
    std::set<std::string> shards;
    for (const auto& [name, shard] : it->items()) {
      if (!shard.is_string()) {
        Fail("{}: weight_map[\"{}\"] is {}, expected a shard file name", index, name,
             Describe(shard));
      }
      const std::string file = shard.get<std::string>();
      if (!PlainFileName(file)) {
        Fail(
            "{}: weight_map places tensor {} in \"{}\", expected a plain file name inside the "
            "folder (no directory part, not . or ..)",
            index, name, file);
      }
      shards.insert(file);
    }
    if (shards.size() > kMaxShards) {
      Fail("{}: weight_map names {} shards, expected at most {}", index, shards.size(), kMaxShards);
    }
    for (const std::string& s : shards) {
      // A symbolic link (as the Hugging Face cache makes them) is followed.
      if (!fs::exists(InDir(dir, s), ec)) {
        Fail("{}: weight_map names shard {}, which is not in the folder", index, s);
      }
    }
    names.assign(shards.begin(), shards.end());
    weight_map = *it;
  } else {
    std::string pickles;
    for (const char* name : {"pytorch_model.bin.index.json", "pytorch_model.bin"}) {
      if (pickles.empty() && fs::exists(InDir(dir, name), ec)) {
        pickles = fmt::format(
            " ({} holds PyTorch pickles, which stretch does not read: save the model with "
            "safe_serialization=True)",
            name);
      }
    }
    Fail("{}: no {} or {}{}", dir, kHfWeightsFile, kHfIndexFile, pickles);
  }

  p.files.reserve(names.size());
  for (const std::string& name : names) p.files.emplace_back(InDir(dir, name));
  for (size_t f = 0; f < p.files.size(); ++f) {
    for (const SafetensorsTensor& t : p.files[f].tensors()) {
      const auto [it, fresh] = tensors.emplace(t.name, Located{f, &t});
      if (!fresh) {
        Fail("{}: tensor {} is in both {} and {}, expected it in one shard", dir, t.name,
             names[it->second.file], names[f]);
      }
    }
  }
  if (!has_index) return false;
  // The index and the shards must say the same: every tensor where the index says (by name)...
  for (const auto& [name, at] : tensors) {
    const auto listed = weight_map.find(name);
    if (listed == weight_map.end()) {
      Fail("{}: shard {} holds tensor {}, which weight_map does not list", index, names[at.file],
           name);
    }
    if (listed->get<std::string>() != names[at.file]) {
      Fail("{}: weight_map places tensor {} in {}, but it is in {}", index, name,
           listed->get<std::string>(), names[at.file]);
    }
  }
  // ... and every entry of the index a tensor.
  for (const auto& [name, shard] : weight_map.items()) {
    if (tensors.count(name) == 0) {
      Fail("{}: weight_map places tensor {} in {}, which holds no such tensor", index, name,
           shard.get<std::string>());
    }
  }
  return true;
}

Parsed Parse(const std::string& dir) {
  Parsed p;
  HfModelHeader& h = p.header;
  if (!LooksLikeHfFolder(dir)) {
    Fail(
        "{}: no config.json: expected a Hugging Face model folder (config.json, "
        "model.safetensors)",
        dir);
  }
  ParseConfig(dir, h);
  const ModelConfig& c = h.config;

  std::map<std::string, Located> tensors;
  const bool sharded = OpenWeightFiles(dir, p, tensors);
  p.wanted = WantedTensors(c);
  std::set<std::string> wanted_names;
  std::set<SafetensorsDtype> dtypes;
  for (const Want& w : p.wanted) {
    wanted_names.insert(w.name);
    const auto it = tensors.find(w.name);
    if (it == tensors.end()) {
      Fail("{}: tensor {} is missing{}", dir, w.name,
           w.name == "lm_head.weight"
               ? " (tie_word_embeddings is false: the classifier is a tensor of its own)"
               : "");
    }
    const SafetensorsTensor& t = *it->second.tensor;
    const std::string& file = p.files[it->second.file].path();
    if (!ReadableDtype(t.dtype)) {
      Fail("{}: tensor {} is {}, expected F32, F16 or BF16", file, w.name,
           SafetensorsDtypeName(t.dtype));
    }
    if (t.shape != w.shape) {
      Fail("{}: tensor {} has shape {}, expected {} (from config.json)", file, w.name,
           FormatShape(t.shape), FormatShape(w.shape));
    }
    dtypes.insert(t.dtype);
    p.where.push_back(it->second);
  }
  // Older checkpoints store RoPE's inv_freq buffers; transformers recomputes them from
  // rope_theta and ignores the stored ones, and so does stretch.
  for (int l = 0; l < c.n_layers; ++l) {
    wanted_names.insert(fmt::format("model.layers.{}.self_attn.rotary_emb.inv_freq", l));
  }
  for (const auto& [name, at] : tensors) {
    if (wanted_names.count(name) != 0) continue;
    const char* why = "";
    if (name == "lm_head.weight" && c.shared_classifier) {
      why = " (tie_word_embeddings is true: the classifier is the embedding)";
    } else if (name.ends_with(".bias")) {
      why = " (a bias: the LLaMA block has none)";
    }
    Fail("{}: tensor {} ({} {}) is not part of a {} model as stretch runs it{}",
         p.files[at.file].path(), name, SafetensorsDtypeName(at.tensor->dtype),
         FormatShape(at.tensor->shape), h.architecture, why);
  }

  std::vector<std::string_view> dtype_names;
  for (SafetensorsDtype d :
       {SafetensorsDtype::kF32, SafetensorsDtype::kF16, SafetensorsDtype::kBF16}) {
    if (dtypes.count(d) != 0) dtype_names.push_back(SafetensorsDtypeName(d));
  }
  const std::string dtype_text = fmt::format("{}", fmt::join(dtype_names, ", "));
  const size_t n = h.weight_files.size();
  h.format = sharded ? fmt::format("Hugging Face folder ({}, {}, {} shard{})", h.architecture,
                                   dtype_text, n, n == 1 ? "" : "s")
                     : fmt::format("Hugging Face folder ({}, {})", h.architecture, dtype_text);
  return p;
}

// Creates `dir`, or accepts an existing folder holding nothing but the files SaveHfModel writes,
// the caller's files and partial files of interrupted writes (AtomicFile's hidden temporaries).
void PrepareFolder(const std::string& dir, const std::vector<std::string>& caller_files) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (!fs::exists(st)) {
    fs::create_directories(dir, ec);
    if (ec) Fail("{}: cannot create the folder: {}", dir, ec.message());
    return;
  }
  if (!fs::is_directory(st)) {
    Fail("{}: exists and is not a directory, expected a folder for the Hugging Face model", dir);
  }
  std::set<std::string> ours = {kHfConfigFile, kHfWeightsFile, kHfGenerationConfigFile};
  ours.insert(caller_files.begin(), caller_files.end());
  std::vector<std::string> names;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  if (ec) Fail("{}: cannot list the folder: {}", dir, ec.message());
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    if (IsPartialFileName(name)) continue;
    if (ours.count(name) == 0) {
      Fail(
          "{}: holds {}, which is not a file of the Hugging Face folder stretch writes ({}, "
          "{}, {}{}{}): refusing to write into a folder with other files, expected a new or "
          "empty folder",
          dir, name, kHfConfigFile, kHfWeightsFile, kHfGenerationConfigFile,
          caller_files.empty() ? "" : ", ", fmt::join(caller_files, ", "));
    }
    if (fs::is_directory(InDir(dir, name), ec)) {
      Fail("{}: {} is a directory, expected a file or nothing", dir, name);
    }
  }
}

// The rope_scaling object that asks transformers (and MethodFromHfRopeScaling) for `m` on the
// model `c`, or null for the model's own RoPE; *max_positions becomes the extended length for the
// types that read the original one from rope_scaling. Refuses what rope_scaling cannot say.
nlohmann::ordered_json HfRopeScaling(const Method& m, const ModelConfig& c, const std::string& dir,
                                     int64_t* max_positions) {
  const RopeMethod& r = m.rope;
  const std::string spec = CanonicalSpec(m);
  auto refuse = [&](const std::string& why) {
    Fail(
        "{}: --method {}: {} (config.json's rope_scaling carries pi, yarn, llama3, longrope and "
        "dynamic-ntk with a factor, and direct)",
        dir, spec, why);
  };
  if (!m.rel.IsIdentity() || m.mask.kind != MaskKind::kCausal || m.logn) {
    refuse("a relative position map, a mask or log-n scaling has no rope_scaling key");
  }
  if (r.base != 0.0) refuse("write the model with its own base (a base override has no key)");
  if (r.scaling == RopeScaling::kNone && r.mode == ScaleMode::kStatic) return nullptr;
  if (c.rope_interpolation != 1.0f) {
    refuse("the model already has linear scaling (trained-in position interpolation)");
  }
  const int64_t orig = r.original_length != 0 ? r.original_length : c.seq_len;
  nlohmann::ordered_json j;
  if (r.mode == ScaleMode::kDynamic) {
    if (r.scaling != RopeScaling::kNtk)
      refuse("of the dynamic methods HF defines dynamic NTK only");
    j["rope_type"] = "dynamic";
    j["factor"] = 1.0;  // HF's dynamic with factor 1 is stretch's dynamic-ntk
    return j;
  }
  if (r.factor == 0.0) refuse("give the factor (the file cannot say 'the call's scale')");
  const RopeMethod defaults = ParseMethod(std::string(MethodName(m))).rope;
  switch (r.scaling) {
    case RopeScaling::kLinear:
      j["rope_type"] = "linear";
      j["factor"] = r.factor;
      return j;
    case RopeScaling::kYarn:
      j["rope_type"] = "yarn";
      j["factor"] = r.factor;
      j["original_max_position_embeddings"] = orig;
      if (r.beta_fast != defaults.beta_fast) j["beta_fast"] = r.beta_fast;
      if (r.beta_slow != defaults.beta_slow) j["beta_slow"] = r.beta_slow;
      if (r.attention_factor != 0.0) j["attention_factor"] = r.attention_factor;
      if (r.mscale != 0.0) j["mscale"] = r.mscale;
      if (r.mscale_all_dim != 0.0) j["mscale_all_dim"] = r.mscale_all_dim;
      if (r.truncate != defaults.truncate) j["truncate"] = r.truncate;
      break;
    case RopeScaling::kLlama3:
      j["rope_type"] = "llama3";
      j["factor"] = r.factor;
      j["low_freq_factor"] = r.low_freq_factor;
      j["high_freq_factor"] = r.high_freq_factor;
      j["original_max_position_embeddings"] = orig;
      break;
    case RopeScaling::kLongRope:
      j["rope_type"] = "longrope";
      j["factor"] = r.factor;
      j["original_max_position_embeddings"] = orig;
      j["short_factor"] = r.short_factor;
      j["long_factor"] = r.long_factor;
      if (r.attention_factor != 0.0) j["attention_factor"] = r.attention_factor;
      break;
    default: refuse(fmt::format("HF's rope_scaling has no type for {}", MethodName(m)));
  }
  // The extended length: transformers reads the original one from rope_scaling.
  *max_positions = std::llround(static_cast<double>(orig) * r.factor);
  return j;
}

}  // namespace

bool LooksLikeHfFolder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(InDir(path, kHfConfigFile), ec);
}

HfModelHeader ReadHfModelHeader(const std::string& dir) { return Parse(dir).header; }

namespace {

// The packed type a 16-bit matrix of an HF folder is kept in with WeightStorage::kAsStored.
std::optional<PackedType> HfPackedType(const Want& w, const SafetensorsTensor& t) {
  if (!w.spec->Matrix() || w.spec->hf_plus_one || w.offset != 0.0f) return std::nullopt;
  if (t.dtype == SafetensorsDtype::kF16) return PackedType::kF16;
  if (t.dtype == SafetensorsDtype::kBF16) return PackedType::kBF16;
  return std::nullopt;
}

}  // namespace

StoredWeights HfStoredWeightBytes(const std::string& dir) {
  const Parsed p = Parse(dir);
  StoredWeights out;
  std::set<std::string> types;
  for (size_t i = 0; i < p.wanted.size(); ++i) {
    const SafetensorsTensor& t = *p.where[i].tensor;
    if (const std::optional<PackedType> type = HfPackedType(p.wanted[i], t)) {
      out.bytes += t.bytes();
      types.insert(PackedTypeName(*type));
    } else {
      out.bytes += 4 * t.numel();
    }
  }
  for (const std::string& name : types) out.types += (out.types.empty() ? "" : ", ") + name;
  return out;
}

Model LoadHfModel(const std::string& dir, WeightStorage storage) {
  Parsed p = Parse(dir);
  Model m;
  m.config = p.header.config;
  m.source = fmt::format("{} ({})", dir, p.header.format);
  const ModelConfig& c = m.config;
  m.weights.layers.resize(static_cast<size_t>(c.n_layers));
  std::vector<std::byte> half;  // one F16 / BF16 tensor's bytes
  for (size_t i = 0; i < p.wanted.size(); ++i) {
    const Want& w = p.wanted[i];
    const SafetensorsFile& file = p.files[p.where[i].file];
    const SafetensorsTensor& t = *p.where[i].tensor;
    if (const std::optional<PackedType> type = HfPackedType(w, t);
        type && storage == WeightStorage::kAsStored) {
      // Used where the file's mapping holds it, as a GGUF file's matrices are (q and k, whose
      // rows go back from rotate-half order, are copied by SetFamilyTensorPacked).
      // A tensor at an odd offset (a header not padded to 8 bytes, as writers do) is read into
      // memory instead: the products load its 16-bit values as such.
      SafetensorsFile::Mapped bytes = file.MapTensor(w.name);
      if (reinterpret_cast<uintptr_t>(bytes.data) % 2 != 0) {
        auto copy = std::make_shared<std::vector<std::byte>>(static_cast<size_t>(t.bytes()));
        file.ReadBytesInto(w.name, std::span<std::byte>(*copy));
        bytes = {copy->data(), copy};
      }
      const auto* data = reinterpret_cast<const uint8_t*>(bytes.data);
      SetFamilyTensorPacked(
          m.weights, w,
          MakePackedMatrix(fmt::format("{} of {}", w.name, dir), *type, data, t.bytes(), w.shape[0],
                           t.numel() / w.shape[0], bytes.owner),
          true);  // HF's rotate-half rows
      continue;
    }
    std::vector<float> dst(static_cast<size_t>(t.numel()));
    if (t.dtype == SafetensorsDtype::kF32) {
      file.ReadInto<float>(w.name, w.shape, std::span<float>(dst));
    } else {
      half.resize(static_cast<size_t>(t.bytes()));
      file.ReadBytesInto(w.name, std::span<std::byte>(half));
      const bool f16 = t.dtype == SafetensorsDtype::kF16;
      for (size_t k = 0; k < dst.size(); ++k) {
        uint16_t u;
        std::memcpy(&u, half.data() + 2 * k, 2);
        dst[k] = f16 ? HalfToFloat(u) : BFloat16ToFloat(u);
      }
    }
    SetFamilyTensorValues(m.weights, w, std::move(dst), true);  // HF's rotate-half rows
  }
  return m;
}

void SaveHfModel(const Model& model, const std::string& dir, SafetensorsDtype dtype,
                 const std::vector<std::string>& caller_files, const Method* method,
                 HfSpecialIds special) {
  const ModelConfig& c = model.config;
  // query_pre_attn_scalar holds a Gemma model's logit scale.
  if (!FamilyHoldsLayout(FamilyOf(c), c, FamilyOf(c).swa_pattern > 0)) {
    Fail(
        "{}: a {} folder holds plain models of its family{}; {} has {} (expected the default RoPE, "
        "full-attention layout)",
        dir, FamilyOf(c).hf_architectures[0],
        FamilyOf(c).hf_window_architecture >= 0 ? " and ones with one sliding window on every layer"
        : FamilyOf(c).swa_pattern > 0
            ? " and ones with local and global layers (every P-th layer global)"
            : "",
        model.source,
        c.Gau() ? std::string("the GAU block")
                : std::string("a trained attention layout (per-layer positions or windows, "
                              "norms, logit scale or another variant)"));
  }
  if (!ReadableDtype(dtype)) {
    Fail("{}: Hugging Face weights in {}: stretch writes F32, F16 or BF16", dir,
         SafetensorsDtypeName(dtype));
  }
  for (const std::string& name : caller_files) {
    STRETCH_CHECK(PlainFileName(name) && name != kHfConfigFile && name != kHfWeightsFile,
                  "caller file \"{}\": expected a plain file name other than the model's", name);
  }
  // The position method, refused or turned into rope_scaling before anything is written.
  int64_t max_positions = c.seq_len;
  nlohmann::ordered_json rope_scaling = nullptr;
  if (c.rope_interpolation != 1.0f) {
    rope_scaling = {{"factor", ShortestDouble(c.rope_interpolation)}, {"type", "linear"}};
  }
  const int64_t window = c.attention.UniformWindow();
  if (window >= c.seq_len) {
    Fail(
        "{}: {} has a sliding window of {} keys on every layer, at least its trained length {}: "
        "config.json readers take such a window for none (write GGUF, or a stretch checkpoint, "
        "which keep it)",
        dir, model.source, window, c.seq_len);
  }
  if (window > 0 && c.rope_interpolation != 1.0f) {
    Fail(
        "{}: {} has a sliding window of {} on every layer and linear RoPE scaling {}: config.json "
        "would hold both sliding_window and rope_scaling, which stretch reads back only apart",
        dir, model.source, window, c.rope_interpolation);
  }
  if (method != nullptr) {
    nlohmann::ordered_json j = HfRopeScaling(*method, c, dir, &max_positions);
    if (!j.is_null() && window > 0) {
      Fail(
          "{}: --method {}: the model's layers all have a sliding window of {}, inside which they "
          "keep plain RoPE (expected no RoPE scaling)",
          dir, CanonicalSpec(*method), window);
    }
    if (!j.is_null()) {
      // What a reader gets back: the method, with the original length the file states.
      Method want = *method;
      if (j.contains("original_max_position_embeddings")) {
        want.rope.original_length = j["original_max_position_embeddings"].get<int64_t>();
      }
      const Method back = MethodFromHfRopeScaling(j.dump());
      STRETCH_CHECK(j["rope_type"] == "linear" || back == want,
                    "rope_scaling {} reads back as {}, not {}", j.dump(), CanonicalSpec(back),
                    CanonicalSpec(want));
      rope_scaling = std::move(j);
    }
  }
  PrepareFolder(dir, caller_files);

  SafetensorsWriter writer;
  writer.SetMetadata("format", "pt");  // transformers' loader refuses safetensors without it
  // Permuted and converted copies, alive until Write (the writer borrows them); deques keep their
  // elements in place as they grow. F32 borrows the model's own vectors but for q and k.
  std::deque<std::vector<float>> permuted;
  std::deque<std::vector<uint8_t>> encoded;
  const int64_t D = c.head_dim();
  auto add = [&](const std::string& name, const std::vector<float>& x, std::vector<int64_t> shape,
                 int64_t rope_heads) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    STRETCH_CHECK(static_cast<int64_t>(x.size()) == n, "{}: {} values, expected {}", name, x.size(),
                  n);
    const std::vector<float>* src = &x;
    if (rope_heads > 0) {
      permuted.push_back(InterleavedToHalves(x, rope_heads, D, shape.size() > 1 ? shape[1] : 1));
      src = &permuted.back();
    }
    if (dtype == SafetensorsDtype::kF32) {
      writer.Add<float>(name, std::move(shape), std::span<const float>(*src));
      return;
    }
    const bool f16 = dtype == SafetensorsDtype::kF16;
    encoded.push_back(EncodeTensor(*src, f16 ? GgmlType::kF16 : GgmlType::kBF16));
    const std::vector<uint8_t>& bytes = encoded.back();
    // A finite weight that rounds to infinity (|x| >= 65520 in F16) is refused, not written.
    const uint16_t inf = f16 ? 0x7C00 : 0x7F80;
    for (size_t i = 0; i < src->size(); ++i) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      if ((h & 0x7FFF) == inf && std::isfinite((*src)[i])) {
        Fail(
            "{}: tensor {} holds {}, beyond {}'s largest finite value {}: it would be stored as "
            "infinity (write F32{})",
            dir, name, (*src)[i], SafetensorsDtypeName(dtype), f16 ? "65504" : "3.39e38",
            f16 ? " or BF16" : "");
      }
    }
    if (rope_heads > 0) permuted.pop_back();  // encoded: the float copy is no longer needed
    writer.AddRaw(name, dtype, std::move(shape), std::as_bytes(std::span<const uint8_t>(bytes)));
  };
  const ModelWeights& w = model.weights;
  STRETCH_CHECK(static_cast<int>(w.layers.size()) == c.n_layers, "{} layers, config {}",
                w.layers.size(), c.n_layers);
  const ModelFamily& family = FamilyOf(c);
  for (const FamilyTensorAt& t : FamilyTensors(family, c, WeightFormat::kHf)) {
    if (t.spec->Fused() || t.offset != 0.0f) {  // parts one after another, q and k in HF's
                                                // rows, less the file's offset
      permuted.push_back(FamilyTensorValues(w, t, true));
      add(t.name, permuted.back(), t.shape, 0);
    } else {
      add(t.name, FamilyTensorData(w, t), t.shape, t.rope_heads);
    }
  }
  writer.Write(InDir(dir, kHfWeightsFile));

  // config.json last: its presence is what LooksLikeHfFolder looks for.
  nlohmann::ordered_json j;
  // The windowed architecture (MistralForCausalLM) for a model with a window on every layer.
  const size_t arch = window > 0 ? static_cast<size_t>(family.hf_window_architecture) : 0;
  j["architectures"] = nlohmann::ordered_json::array({family.hf_architectures[arch]});
  j["model_type"] = family.hf_model_types[arch];
  j["hidden_size"] = c.dim;
  j["intermediate_size"] = c.hidden_dim;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim();
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = max_positions;
  j["rms_norm_eps"] = ShortestDouble(c.norm_eps);
  j["rope_theta"] = ShortestDouble(c.rope_base);
  j["rope_scaling"] = rope_scaling;
  if (rope_scaling.is_object() && rope_scaling.value("rope_type", "") == "longrope") {
    // Phi-3's configs (Phi3Config) also keep the original length at the top level.
    j["original_max_position_embeddings"] = rope_scaling["original_max_position_embeddings"];
  }
  j["tie_word_embeddings"] = c.shared_classifier;
  if (c.activation == FfnActivation::kSilu) j["hidden_act"] = "silu";  // Gemma's: family keys
  // The family's own config class's keys (ModelFamily::hf_config_keys): switches left off.
  const nlohmann::ordered_json family_keys = nlohmann::ordered_json::parse(family.hf_config_keys);
  for (const auto& [key, value] : family_keys.items()) j[key] = value;
  if (window > 0) j["sliding_window"] = window;
  if (family.softcaps || family.swa_pattern > 0) {  // Gemma2Config's soft caps; null: none
    for (auto [key, cap] : {std::pair{"attn_logit_softcapping", c.attn_softcap},
                            std::pair{"final_logit_softcapping", c.final_softcap}}) {
      j[key] = cap > 0.0 ? nlohmann::ordered_json(ShortestDouble(static_cast<float>(cap)))
                         : nlohmann::ordered_json();
    }
  }
  if (family.swa_pattern > 0) {  // Gemma's keys (src/model/families/gemma2.cc, gemma3.cc)
    j["query_pre_attn_scalar"] =
        c.attention.logit_scale == 0.0
            ? static_cast<double>(c.head_dim())
            : ShortestDouble(
                  static_cast<float>(1.0 / (c.attention.logit_scale * c.attention.logit_scale)));
    const std::optional<SwaPattern> swa = SwaPatternOf(c);
    j["sliding_window"] = swa ? nlohmann::ordered_json(swa->window) : nlohmann::ordered_json();
    if (swa) {
      j["sliding_window_pattern"] = swa->period;
      if (swa->local_base > 0.0) {
        j["rope_local_base_freq"] = ShortestDouble(static_cast<float>(swa->local_base));
      }
    }
    nlohmann::ordered_json types = nlohmann::ordered_json::array();
    for (int l = 0; l < c.n_layers; ++l) {
      types.push_back(swa && l % swa->period != swa->period - 1 ? "sliding_attention"
                                                                : "full_attention");
    }
    j["layer_types"] = types;
  }
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  const auto id_or_null = [](int id) {
    return id >= 0 ? nlohmann::ordered_json(id) : nlohmann::ordered_json();
  };
  j["bos_token_id"] = id_or_null(special.bos);
  j["eos_token_id"] = id_or_null(special.eos);
  j["torch_dtype"] = dtype == SafetensorsDtype::kF32   ? "float32"
                     : dtype == SafetensorsDtype::kF16 ? "float16"
                                                       : "bfloat16";
  // generation_config.json, as transformers' save_pretrained writes beside a causal LM: the
  // special tokens generate() starts and stops with.
  nlohmann::ordered_json gen;
  gen["bos_token_id"] = id_or_null(special.bos);
  gen["eos_token_id"] = id_or_null(special.eos);
  AtomicFile generation(InDir(dir, kHfGenerationConfigFile));
  generation.Write(gen.dump(2) + "\n");
  generation.Commit();
  AtomicFile config(InDir(dir, kHfConfigFile));
  config.Write(j.dump(2) + "\n");
  config.Commit();
}

}  // namespace stretch
