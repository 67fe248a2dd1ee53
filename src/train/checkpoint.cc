#include "src/train/checkpoint.h"

#include <array>
#include <cstring>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/train/arch_spec.h"

namespace stretch {
namespace {

using nlohmann::json;

// The config's "position" names (XPOS is RoPE with xpos_scale_base > 0, written as "xpos").
constexpr std::array<std::pair<LayerPosition, const char*>, 6> kPositions = {{
    {LayerPosition::kRope, "rope"},
    {LayerPosition::kNone, "nope"},
    {LayerPosition::kAlibi, "alibi"},
    {LayerPosition::kKerpleLog, "kerple-log"},
    {LayerPosition::kKerplePower, "kerple-power"},
    {LayerPosition::kSandwich, "sandwich"},
}};

constexpr std::array<std::pair<ModelBlock, const char*>, 2> kBlocks = {{
    {ModelBlock::kLlama, "llama"},
    {ModelBlock::kGau, "gau"},
}};

const char* BlockName(ModelBlock b) {
  for (const auto& [k, name] : kBlocks) {
    if (k == b) return name;
  }
  return "?";
}

const char* PositionName(const AttentionLayout& a) {
  if (a.position == LayerPosition::kRope && a.xpos_scale_base > 0.0) return "xpos";
  for (const auto& [k, name] : kPositions) {
    if (k == a.position) return name;
  }
  return "?";
}

template <typename T>
T Get(const json& j, const char* key, const std::string& what) {
  if (!j.is_object() || !j.contains(key)) Fail("{}: missing field \"{}\"", what, key);
  try {
    return j.at(key).get<T>();
  } catch (const json::exception& e) {
    Fail("{}: field \"{}\" = {} has the wrong type ({})", what, key, j.at(key).dump(), e.what());
  }
}

constexpr std::string_view kRngTensor = "rng.data";
constexpr std::string_view kStepTensor = "train.step";
constexpr std::string_view kTokenizerTensor = "tokenizer.model";

}  // namespace

json ArchToJson(const TrainArch& a) {
  const ModelConfig& m = a.model;
  const AttentionLayout& at = m.attention;
  json layout = json::array();
  for (const LayerLayout& l : at.layers) {
    layout.push_back({{"position", l.position}, {"window", l.window}});
  }
  // The file counts the GAU's one head ("heads": 1); the config its R = E / S kernel heads.
  json j = {{"block", BlockName(m.block)},
            {"dim", m.dim},
            {"hidden_dim", m.hidden_dim},
            {"layers", m.n_layers},
            {"heads", m.Gau() ? 1 : m.n_heads},
            {"kv_heads", m.Gau() ? 1 : m.n_kv_heads},
            {"vocab_size", m.vocab_size},
            {"seq_len", m.seq_len},
            {"shared_classifier", m.shared_classifier},
            {"rope_base", m.rope_base},
            {"norm_eps", m.norm_eps},
            {"position", PositionName(at)},
            {"logits",
             {{"query_norm", a.model.attention.query_norm},
              {"key_norm", a.model.attention.key_norm},
              {"scale", a.model.attention.logit_scale}}},
            {"layout", layout}};
  if (a.model.Gau()) j["gau_key_dim"] = a.model.key_dim;  // LLaMA: absent (it has no such size)
  // Fields that came with the later variants are written only when they are not the default,
  // so that configs of earlier runs compare equal (resume checks the architecture by its JSON).
  if (a.model.attention.rope_fraction != 1.0) j["rope_fraction"] = a.model.attention.rope_fraction;
  if (m.rope_interpolation != 1.0f) j["rope_interpolation"] = m.rope_interpolation;
  if (a.rope_ntk != 1.0) {  // rope_base above is the resolved one; these say where it came from
    j["rope_ntk"] = a.rope_ntk;
    j["rope_ntk_base"] = a.rope_ntk_base;
  }
  if (!a.model.attention.rope_map.empty()) j["rope_map"] = a.model.attention.rope_map;
  if (at.xpos_scale_base > 0.0) j["xpos_gamma"] = at.xpos_scale_base;
  if (a.model.attention.position == LayerPosition::kSandwich) {
    j["sandwich_dim"] = a.model.attention.sandwich_dim;
    j["sandwich_lambda"] = a.model.attention.sandwich_lambda;
  }
  if (a.model.attention.logn) j["logits"]["logn"] = true;
  if (a.model.attention.position_log_scale) j["logits"]["position_lambda"] = true;
  if (a.model.attention.ssmax) j["logits"]["ssmax"] = true;
  return j;
}

TrainArch ArchFromJson(const json& j, const std::string& what) {
  TrainArch a;
  ModelConfig& m = a.model;
  // "block" came with the GAU block; a config without it (older checkpoints) is a LLaMA one.
  const std::string block = j.is_object() && j.contains("block")
                                ? Get<std::string>(j, "block", what)
                                : std::string("llama");
  bool block_found = false;
  for (const auto& [k, name] : kBlocks) {
    if (block == name) {
      a.model.block = k;
      block_found = true;
    }
  }
  if (!block_found) Fail("{}: block \"{}\" (allowed: llama, gau)", what, block);
  if (a.model.Gau()) a.model.key_dim = Get<int>(j, "gau_key_dim", what);
  m.dim = Get<int>(j, "dim", what);
  m.hidden_dim = Get<int>(j, "hidden_dim", what);
  m.n_layers = Get<int>(j, "layers", what);
  m.n_heads = Get<int>(j, "heads", what);
  m.n_kv_heads = Get<int>(j, "kv_heads", what);
  m.vocab_size = Get<int>(j, "vocab_size", what);
  m.seq_len = Get<int>(j, "seq_len", what);
  m.shared_classifier = Get<bool>(j, "shared_classifier", what);
  m.rope_base = Get<float>(j, "rope_base", what);
  m.norm_eps = Get<float>(j, "norm_eps", what);
  const std::string pos = Get<std::string>(j, "position", what);
  bool found = pos == "xpos";
  if (found) a.model.attention.xpos_scale_base = kXposDefaultGamma;  // a later "xpos_gamma" wins
  for (const auto& [k, name] : kPositions) {
    if (pos == name) {
      a.model.attention.position = k;
      found = true;
    }
  }
  if (pos == "sandwich") {
    a.model.attention.sandwich_dim = kSandwichDefaultDim;
    a.model.attention.sandwich_lambda = kSandwichDefaultLambda;
  }
  if (!found) {
    Fail(
        "{}: position \"{}\" (allowed: rope, nope, alibi, kerple-log, kerple-power, sandwich, "
        "xpos)",
        what, pos);
  }
  if (j.contains("rope_fraction"))
    a.model.attention.rope_fraction = Get<double>(j, "rope_fraction", what);
  if (j.contains("rope_interpolation")) {
    m.rope_interpolation = Get<float>(j, "rope_interpolation", what);
  }
  if (j.contains("rope_ntk")) {  // ValidateArch checks rope_base against these
    a.rope_ntk = Get<double>(j, "rope_ntk", what);
    a.rope_ntk_base = Get<float>(j, "rope_ntk_base", what);
  }
  if (j.contains("rope_map")) a.model.attention.rope_map = Get<std::string>(j, "rope_map", what);
  if (j.contains("xpos_gamma"))
    a.model.attention.xpos_scale_base = Get<double>(j, "xpos_gamma", what);
  if (j.contains("sandwich_dim"))
    a.model.attention.sandwich_dim = Get<int>(j, "sandwich_dim", what);
  if (j.contains("sandwich_lambda"))
    a.model.attention.sandwich_lambda = Get<double>(j, "sandwich_lambda", what);
  const json logits = Get<json>(j, "logits", what);
  a.model.attention.query_norm = Get<bool>(logits, "query_norm", what + " logits");
  a.model.attention.key_norm = Get<bool>(logits, "key_norm", what + " logits");
  a.model.attention.logit_scale = Get<double>(logits, "scale", what + " logits");
  if (logits.contains("logn")) a.model.attention.logn = Get<bool>(logits, "logn", what + " logits");
  if (logits.contains("position_lambda")) {
    a.model.attention.position_log_scale = Get<bool>(logits, "position_lambda", what + " logits");
  }
  if (logits.contains("ssmax"))
    a.model.attention.ssmax = Get<bool>(logits, "ssmax", what + " logits");
  const json layout = Get<json>(j, "layout", what);
  if (!layout.is_array()) Fail("{}: layout is not a list", what);
  for (const json& l : layout) {
    a.model.attention.layers.push_back(LayerLayout{Get<bool>(l, "position", what + " layout"),
                                                   Get<int64_t>(l, "window", what + " layout")});
  }
  if (m.Gau()) {
    if (m.n_heads != 1 || m.n_kv_heads != 1) {
      Fail("{}: GAU with heads={}, kv_heads={} (expected 1 and 1: the GAU block has a single head)",
           what, m.n_heads, m.n_kv_heads);
    }
    if (m.key_dim > 0) m.SetGau(m.key_dim);  // R = E / S kernel heads (ValidateArch checks S)
  }
  try {
    ValidateArch(a);
  } catch (const Error& e) {
    Fail("{}: {}", what, e.what());
  }
  return a;
}

json TrainerOptionsToJson(const TrainerOptions& o) {
  json j = {{"batch", o.batch},
            {"accumulate", o.accumulate},
            {"lr", o.schedule.lr},
            {"min_lr", o.schedule.min_lr},
            {"warmup_steps", o.schedule.warmup_steps},
            {"steps", o.schedule.total_steps},
            {"beta1", o.adamw.beta1},
            {"beta2", o.adamw.beta2},
            {"eps", o.adamw.eps},
            {"weight_decay", o.adamw.weight_decay},
            {"clip", o.clip},
            {"seed", o.seed}};
  if (o.perturb.Active()) j["perturb"] = o.perturb.Spec();  // absent: none (earlier runs too)
  return j;
}

TrainerOptions TrainerOptionsFromJson(const json& j, const std::string& what) {
  TrainerOptions o;
  o.batch = Get<int64_t>(j, "batch", what);
  o.accumulate = Get<int>(j, "accumulate", what);
  o.schedule.lr = Get<double>(j, "lr", what);
  o.schedule.min_lr = Get<double>(j, "min_lr", what);
  o.schedule.warmup_steps = Get<int64_t>(j, "warmup_steps", what);
  o.schedule.total_steps = Get<int64_t>(j, "steps", what);
  o.adamw.beta1 = Get<double>(j, "beta1", what);
  o.adamw.beta2 = Get<double>(j, "beta2", what);
  o.adamw.eps = Get<double>(j, "eps", what);
  o.adamw.weight_decay = Get<double>(j, "weight_decay", what);
  o.clip = Get<double>(j, "clip", what);
  o.seed = Get<uint64_t>(j, "seed", what);
  if (j.contains("perturb")) {
    o.perturb = ParsePerturbation(Get<std::string>(j, "perturb", what), what + " perturb");
  }
  return o;
}

void SaveCheckpoint(Trainer& trainer, const std::string& path, const CheckpointExtras& extras) {
  SafetensorsWriter w;
  for (const Param& p : trainer.registry().params()) {
    w.Add<float>(p.name, p.shape, std::span<const float>(p.value, static_cast<size_t>(p.numel())));
  }
  trainer.optimizer().AddStateTo(w);
  const std::array<uint64_t, 4> rng = trainer.data_rng().State();
  w.AddOwned<uint64_t>(std::string(kRngTensor), {4}, std::vector<uint64_t>(rng.begin(), rng.end()));
  w.AddOwned<uint64_t>(std::string(kStepTensor), {},
                       std::vector<uint64_t>{static_cast<uint64_t>(trainer.step())});
  std::vector<uint8_t> tok(extras.tokenizer_model.begin(), extras.tokenizer_model.end());
  if (!tok.empty()) {
    w.AddOwned<uint8_t>(std::string(kTokenizerTensor), {static_cast<int64_t>(tok.size())}, tok);
  }
  w.SetMetadata("stretch.format", std::string(kCheckpointFormat));
  w.SetMetadata("stretch.version", std::to_string(kCheckpointVersion));
  w.SetMetadata("stretch.config", ArchToJson(trainer.arch()).dump());
  w.SetMetadata("stretch.train", TrainerOptionsToJson(trainer.options()).dump());
  for (const auto& [k, v] : extras.metadata) w.SetMetadata(k, v);
  w.Write(path);
}

CheckpointInfo ReadCheckpointInfo(const SafetensorsFile& f) {
  const std::string& path = f.path();
  const std::optional<std::string> format = f.FindMetadata("stretch.format");
  if (format != kCheckpointFormat) {
    Fail("{}: not a stretch checkpoint (metadata stretch.format = \"{}\", expected \"{}\")", path,
         format.value_or(""), kCheckpointFormat);
  }
  const std::string version = f.GetMetadata("stretch.version");
  if (version != std::to_string(kCheckpointVersion)) {
    Fail("{}: checkpoint version {} (this stretch reads version {})", path, version,
         kCheckpointVersion);
  }
  auto parse = [&](const char* key) {
    try {
      return json::parse(f.GetMetadata(key));
    } catch (const json::exception& e) {
      Fail("{}: metadata {} is not JSON ({})", path, key, e.what());
    }
  };
  CheckpointInfo info;
  info.arch = ArchFromJson(parse("stretch.config"), path + " stretch.config");
  info.options = TrainerOptionsFromJson(parse("stretch.train"), path + " stretch.train");
  info.step = static_cast<int64_t>(f.Read<uint64_t>(kStepTensor, {})[0]);
  return info;
}

std::optional<TrainingTokenizer> ReadCheckpointTokenizer(const SafetensorsFile& f, int vocab_size) {
  const std::string& path = f.path();
  const std::optional<std::string> meta = f.FindMetadata("stretch.tokenizer");
  if (!meta) return std::nullopt;
  json t;
  try {
    t = json::parse(*meta);
  } catch (const json::exception& e) {
    Fail("{}: metadata stretch.tokenizer is not JSON ({})", path, e.what());
  }
  const std::string kind = Get<std::string>(t, "kind", path + " stretch.tokenizer");
  std::string model;
  if (f.Find(std::string(kTokenizerTensor)) != nullptr) {
    const std::vector<uint8_t> bytes = f.Read<uint8_t>(std::string(kTokenizerTensor));
    model.assign(bytes.begin(), bytes.end());
  }
  std::optional<TrainingTokenizer> tok;
  try {
    tok = TrainingTokenizer::Load(kind, model);
  } catch (const Error& e) {
    Fail("{}: stretch.tokenizer (with tensor {}): {}", path, kTokenizerTensor, e.what());
  }
  if (t.contains("vocab_size") && t.at("vocab_size") != tok->vocab_size()) {
    Fail(
        "{}: stretch.tokenizer vocab_size = {}, but its {} model has {} tokens (expected the "
        "same)",
        path, t.at("vocab_size").dump(), kind, tok->vocab_size());
  }
  if (tok->vocab_size() != vocab_size) {
    Fail("{}: the tokenizer ({}) has {} tokens, the model's vocab_size is {} (expected the same)",
         path, kind, tok->vocab_size(), vocab_size);
  }
  return tok;
}

void LoadParamsInto(Trainer& trainer, const SafetensorsFile& f) {
  for (const Param& p : trainer.registry().params()) {
    // KERPLE's a, b and SSMax's s that the file lacks (--init adding the variant) keep their
    // initialization (SSMax's 1/ln L is a no-op at the training length).
    if (f.Find(p.name) == nullptr &&
        (p.name.find(".bias_") != std::string::npos || p.name.ends_with(".ssmax"))) {
      continue;
    }
    f.ReadInto<float>(p.name, p.shape, std::span<float>(p.value, static_cast<size_t>(p.numel())));
  }
}

void LoadCheckpointInto(Trainer& trainer, const SafetensorsFile& f) {
  const CheckpointInfo info = ReadCheckpointInfo(f);
  if (ArchToJson(info.arch) != ArchToJson(trainer.arch())) {
    Fail("{}: the checkpoint's architecture {} differs from the run's {}", f.path(),
         ArchToJson(info.arch).dump(), ArchToJson(trainer.arch()).dump());
  }
  LoadParamsInto(trainer, f);
  trainer.optimizer().LoadStateFrom(f);
  const std::vector<uint64_t> rng = f.Read<uint64_t>(kRngTensor, {4});
  trainer.data_rng().SetState({rng[0], rng[1], rng[2], rng[3]});
  STRETCH_CHECK(trainer.step() == info.step, "step {} vs {}", trainer.step(), info.step);
}

}  // namespace stretch
