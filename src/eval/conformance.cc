#include "src/eval/conformance.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <type_traits>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/core/rng.h"
#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/hf_model.h"
#include "src/io/model_file.h"
#include "src/io/output_file.h"
#include "src/io/safetensors.h"
#include "src/io/tokenizer/hf_tokenizer_json.h"
#include "src/io/tokenizer/spm_model.h"
#include "src/io/tokenizer/tokenizer.h"
#include "src/model/family.h"
#include "src/model/transformer.h"
#include "src/position/method.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kTrainLen = 128;  // the models' trained length; the stream is 4 times it
// GGUF against HF: the same float32 weights in one engine, but GGUF holds LLaMA 3.1's and
// LongRoPE's per-pair factors as float32 tensors where config.json holds them as decimals (LLaMA
// 3.1's: 1.5e-5 nats apart at most in this pack).
constexpr double kFilesAgree = 1e-4;

// <unk>, <s>, </s>, the space and the 256 byte tokens: a SentencePiece vocabulary llama.cpp
// loads, whose byte fallback spells any text (tokenizer.json needs the space's piece).
Tokenizer ByteVocabulary() {
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>", " "};
  for (int b = 0; b < 256; ++b) pieces.push_back(fmt::format("<0x{:02X}>", b));
  return Tokenizer::FromVocabulary("conformance pack bytes", pieces,
                                   std::vector<float>(pieces.size(), 0.0f));
}

ModelConfig CaseConfig(const ConformanceCase& k, int vocab) {
  ModelConfig c;
  c.dim = 64;
  c.hidden_dim = 160;
  c.n_layers = 2;
  c.n_heads = 4;  // heads of 16, 2 kv heads (grouped-query)
  c.n_kv_heads = 2;
  c.vocab_size = vocab;
  c.seq_len = static_cast<int>(kTrainLen);
  c.norm_eps = 1e-5f;
  c.rope_base = 10000.0f;
  c.family = k.family;
  const ModelFamily* f = FindFamilyByGguf(k.family == "mistral" ? "llama" : k.family);
  STRETCH_CHECK(f != nullptr, "conformance case {}: no family {}", k.name, k.family);
  SetFamilyBlock(*f, c);
  if (c.qk_norm) c.explicit_head_dim = 32;  // wider than dim / heads, as Qwen 3's and Gemma 3's
  if (c.qkv_bias || f->swa_local_base > 0.0) c.rope_base = 1000000.0f;
  // Gemma 3: a local layer (32 keys at base 10,000), then a global one; Gemma 2: the same at the
  // model's base.
  if (f->swa_pattern > 0) SetSwaPattern(c, {2, 32, f->swa_local_base});
  if (f->softcaps) {
    // Gemma 2's soft caps, smaller than its 50 and 30 so that this model's logits reach tanh's
    // bend; llama.cpp reads no classifier for gemma2: the embedding.
    c.attn_softcap = 10.0;
    c.final_softcap = 5.0;
    c.shared_classifier = true;
  }
  if (k.window > 0) {
    c.family = "llama";
    c.attention.layers.assign(static_cast<size_t>(c.n_layers), LayerLayout{.window = k.window});
  }
  return c;
}

Model CaseModel(const ConformanceCase& k, int vocab, uint64_t seed) {
  Model m;
  m.config = CaseConfig(k, vocab);
  m.weights = ZeroWeights<float>(m.config);
  // Not the family's name: llama.cpp gives a vocabulary whose general.name says "phi3" Phi-3's
  // special tokens, and this one has none.
  m.source = "stretch-conformance-model";
  Rng rng(seed);
  m.weights.ForEach([&](const std::string& name, std::vector<float>& t, bool matrix) {
    // Norm gains near 1; q and k scaled up so that attention is far from uniform (a scaling then
    // shows in the log-probabilities); the rest about unit-variance outputs.
    const bool qk = name.ends_with("wq") || name.ends_with("wk");
    const double sd = !matrix ? 0.2 : (qk ? 3.0 : 1.0) / std::sqrt(static_cast<double>(64));
    const double mean = name.ends_with("norm") ? 1.0 : 0.0;
    for (float& x : t) x = static_cast<float>(mean + sd * rng.Normal());
  });
  return m;
}

Method CaseMethod(const ConformanceCase& k, const ModelConfig& c) {
  if (k.method.empty()) return Method{};
  Method m = ParseMethod(k.method);
  if (m.rope.scaling == RopeScaling::kLongRope) {  // lists of its own, as Phi-3's configs carry
    m.rope.factor = 4.0;
    for (int t = 0; t < c.head_dim() / 2; ++t) {
      m.rope.short_factor.push_back(1.0 + 0.05 * t);
      m.rope.long_factor.push_back(1.0 + 0.9 * t);
    }
  }
  return m;
}

// log p(tokens[t + 1] | tokens[0..t]) for t = 0..n-2, from the model file at `path` run with the
// method the file states.
std::vector<double> LogProbs(const std::string& path, const std::vector<int>& tokens,
                             std::string* method_spec, std::string* method_source) {
  const LoadedModel loaded = LoadModelFile(path, ModelFileOptions{});
  Transformer model(loaded.model);
  const Method method =
      loaded.header.method_spec.empty() ? Method{} : ParseMethod(loaded.header.method_spec);
  if (method_spec != nullptr) *method_spec = CanonicalSpec(method);
  if (method_source != nullptr) *method_source = loaded.header.method_source;
  const int64_t n = static_cast<int64_t>(tokens.size());
  model.SetMethod(method, n);
  KvCache cache(loaded.model.config, n);
  std::vector<float> hidden;
  model.Forward(tokens, cache, hidden, Transformer::Rows::kAll);
  const int64_t V = loaded.model.config.vocab_size;
  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<double> out;
  for (int64_t t = 0; t + 1 < n; ++t) {
    model.Logits(hidden.data() + t * loaded.model.config.dim, 1, logits.data());
    double top = -INFINITY;
    for (const float v : logits) top = std::max(top, static_cast<double>(v));
    double sum = 0;
    for (const float v : logits) sum += std::exp(static_cast<double>(v) - top);
    out.push_back(static_cast<double>(logits[static_cast<size_t>(tokens[t + 1])]) - top -
                  std::log(sum));
  }
  return out;
}

double MaxAbsDiff(const std::vector<double>& a, const std::vector<double>& b) {
  STRETCH_CHECK(a.size() == b.size(), "{} values against {}", a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

void WriteText(const std::string& path, const std::string& text) {
  AtomicFile f(path);
  f.Write(text);
  f.Commit();
}

nlohmann::json ReadJson(const std::string& path, const char* what) {
  const std::string text = ReadInputFile(path, what);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    Fail("{}: not JSON ({}), expected {}", path, e.what(), what);
  }
}

// The array j[key] of a JSON file `path`, each entry a T (int: an integer; double: a number);
// `item` names an entry in messages ("a token id").
template <typename T>
std::vector<T> NumberArray(const nlohmann::json& j, const std::string& path, const char* key,
                           const char* item) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_array()) {
    Fail("{}: expected an object with \"{}\": a list, each entry {}", path, key, item);
  }
  std::vector<T> out;
  for (const nlohmann::json& v : j[key]) {
    const bool ok = std::is_integral_v<T> ? v.is_number_integer() : v.is_number();
    if (!ok) {
      Fail("{}: {} is {}, expected {}", path, item, v.dump(),
           std::is_integral_v<T> ? "an integer" : "a number");
    }
    out.push_back(v.get<T>());
  }
  return out;
}

std::vector<int> ReadTokens(const std::string& dir) {
  const std::string path = (fs::path(dir) / "tokens.json").string();
  return NumberArray<int>(ReadJson(path, "the pack's token stream, {\"tokens\": [ids]}"), path,
                          "tokens", "a token id");
}

constexpr const char* kReadme = R"(# stretch's conformance pack

Tiny random-weight models of each model family stretch reads, each as a GGUF file
(`CASE/model.gguf`) and as a Hugging Face folder (`CASE/hf/`), plain and with the RoPE scalings
their files can state, and the per-token log-probabilities stretch computes from them.

- `tokens.json`: the token stream, BOS (1) first. The vocabulary is `<unk>`, `<s>`, `</s>`, the
  space (`▁`, id 3) and the 256 byte tokens `<0x00>`..`<0xFF>` (ids 4..259); the stream draws
  ids 3..259.
- `CASE/logprobs.json`: `logprob[t]` is log p(tokens[t + 1] | tokens[0..t]) in nats, computed from
  `CASE/model.gguf` with the method the file states (`method`); the HF folder gives the same
  within `gguf_hf_max_abs_diff`.
- The models are trained at 128 tokens (their files' original length); the stream is 4 times
  longer, so every scaling is exercised beyond it. `llama-pi` states linear scaling, which is
  the model's own position interpolation (`method` direct, `method_source` says so).
- `mistral` attends to the last 32 keys on every layer (`window`; GGUF
  `llama.attention.sliding_window`, config.json `sliding_window`), counting the query itself.
  llama.cpp's `llama` architecture ignores the key, so it agrees with this case for the first 32
  positions only.
- `gemma3` has Gemma 3's block (norms of gains 1 + w before and after attention and
  feed-forward, q/k norms, GeGLU with tanh GELU, the embedding times sqrt(dim)) and a local layer
  (the last 32 keys, RoPE base 10,000; GGUF `gemma3.attention.sliding_window`, `..._pattern` 2,
  `gemma3.rope.freq_base_swa`; config.json `layer_types`) before a global one (base 1,000,000).
  `gemma3-linear` states linear scaling, which Gemma applies to the global layer only.
- `gemma2` has Gemma 2's block (Gemma 3's without the q/k norms), a local layer (the last 32
  keys) and a global one, both at base 10,000, and soft-caps the attention's logits at 10 and the
  output's at 5 (x -> cap tanh(x / cap); GGUF `gemma2.attn_logit_softcapping`,
  `gemma2.final_logit_softcapping`; config.json `attn_logit_softcapping`,
  `final_logit_softcapping`); the classifier is the embedding.

To check an engine: load each file, feed `tokens` in one sequence (no chunk boundary), and compare
its log-probabilities with `logprob`. `text.txt` is plain ASCII for tools that score text (both
engines then tokenize it themselves; scripts/vs_llamacpp_conformance.sh in stretch's sources). float32 engines agree with stretch to about 1e-4 nats.
`stretch conformance --check DIR` does it for stretch.
)";

// Plain ASCII words drawn from a fixed list by a seeded generator: a text both engines' tokenizers
// spell alike in the pack's vocabulary (no "<s>" or other special token's spelling in it), for
// tools that score text rather than token ids (scripts/vs_llamacpp_conformance.sh).
std::string PackText(uint64_t seed, size_t bytes) {
  static constexpr const char* kWords[] = {
      "the",   "model",  "reads",  "a",      "long",    "text",    "and",   "keeps",
      "what",  "it",     "saw",    "far",    "back",    "when",    "rope",  "turns",
      "each",  "pair",   "by",     "its",    "angle",   "window",  "of",    "keys",
      "copy",  "from",   "early",  "late",   "number",  "seven",   "river", "stone",
      "quiet", "bright", "market", "winter", "letters", "between", "again", "under"};
  Rng rng(seed);
  std::string text;
  size_t line = 0;
  while (text.size() < bytes) {
    const std::string word = kWords[UniformBelow(rng, std::size(kWords))];
    text += word;
    line += word.size() + 1;
    if (UniformBelow(rng, 9) == 0) text += '.';
    if (line > 80) {
      text += '\n';
      line = 0;
    } else {
      text += ' ';
    }
  }
  return text + "\n";
}

}  // namespace

std::vector<ConformanceCase> ConformanceCases() {
  return {
      {"llama", "llama", ""},
      {"llama-pi", "llama", "pi:factor=4"},
      {"llama-yarn", "llama", "yarn:factor=4"},
      {"llama-llama3", "llama", "llama3:factor=8"},
      {"mistral", "mistral", "", 32},
      {"qwen2", "qwen2", ""},
      {"qwen2-yarn", "qwen2", "yarn:factor=4"},
      {"qwen3", "qwen3", ""},
      {"qwen3-yarn", "qwen3", "yarn:factor=4"},
      {"phi3", "phi3", ""},
      {"phi3-longrope", "phi3", "longrope"},
      {"gemma3", "gemma3", ""},
      {"gemma3-linear", "gemma3", "pi:factor=4"},
      {"gemma2", "gemma2", ""},
  };
}

std::vector<ConformanceCase> WriteConformancePack(const ConformanceOptions& o) {
  if (o.tokens < 2) Fail("conformance: --tokens {}: expected at least 2", o.tokens);
  std::error_code ec;
  if (fs::exists(fs::path(o.out) / "tokens.json", ec)) {
    Fail("{}: holds a conformance pack already (tokens.json); give a new folder", o.out);
  }
  fs::create_directories(o.out, ec);
  if (ec) Fail("{}: cannot create the folder: {}", o.out, ec.message());
  const Tokenizer vocabulary = ByteVocabulary();
  Rng rng(o.seed);
  std::vector<int> tokens = {Tokenizer::kBos};
  while (static_cast<int64_t>(tokens.size()) < o.tokens) {
    tokens.push_back(3 + static_cast<int>(UniformBelow(rng, 257)));
  }
  const std::vector<ConformanceCase> cases = ConformanceCases();
  uint64_t seed = o.seed * 1000;
  for (const ConformanceCase& k : cases) {
    const fs::path dir = fs::path(o.out) / k.name;
    fs::create_directories(dir, ec);
    if (ec) Fail("{}: cannot create the folder: {}", dir.string(), ec.message());
    const Model model = CaseModel(k, vocabulary.vocab_size(), ++seed);
    const Method method = CaseMethod(k, model.config);
    const std::string gguf = (dir / "model.gguf").string(), hf = (dir / "hf").string();
    SaveGgufModel(model, gguf, static_cast<uint32_t>(GgmlType::kF32), &vocabulary, &method);
    const std::vector<std::string> tokenizer_files = {"tokenizer.model", "tokenizer.json",
                                                      "tokenizer_config.json"};
    SaveHfModel(model, hf, SafetensorsDtype::kF32, tokenizer_files, &method,
                {vocabulary.bos(), vocabulary.eos()});
    SaveSentencePieceModel(vocabulary, (fs::path(hf) / "tokenizer.model").string());
    SaveSentencePieceTokenizerJson(vocabulary, (fs::path(hf) / "tokenizer.json").string());
    SaveSentencePieceTokenizerConfig(vocabulary, (fs::path(hf) / "tokenizer_config.json").string());
    std::string spec, source;
    const std::vector<double> from_gguf = LogProbs(gguf, tokens, &spec, &source);
    const std::vector<double> from_hf = LogProbs(hf, tokens, nullptr, nullptr);
    const double diff = MaxAbsDiff(from_gguf, from_hf);
    if (!(diff <= kFilesAgree)) {
      Fail("conformance case {}: the GGUF file and the HF folder disagree by {:.3g} nats", k.name,
           diff);
    }
    nlohmann::ordered_json j;
    j["case"] = k.name;
    j["family"] = FamilyOf(model.config).name;
    j["architecture"] = FamilyOf(model.config).gguf_architecture;
    j["method"] = spec;
    j["method_source"] = source;  // linear scaling is the model's own interpolation, not a method
    j["window"] = k.window;
    j["ctx"] = static_cast<int64_t>(tokens.size());
    j["train_len"] = kTrainLen;
    j["gguf_hf_max_abs_diff"] = diff;
    j["logprob"] = from_gguf;
    WriteText((dir / "logprobs.json").string(), j.dump() + "\n");
  }
  WriteText((fs::path(o.out) / "README.md").string(), kReadme);
  WriteText((fs::path(o.out) / "text.txt").string(), PackText(o.seed, 6000));
  WriteText((fs::path(o.out) / "tokens.json").string(),
            nlohmann::json{{"tokens", tokens}}.dump() + "\n");  // last: the pack is whole
  return cases;
}

std::vector<std::string> CheckConformancePack(const std::string& dir, double tolerance) {
  const std::vector<int> tokens = ReadTokens(dir);
  std::vector<std::string> problems;
  for (const ConformanceCase& k : ConformanceCases()) {
    const fs::path d = fs::path(dir) / k.name;
    const std::string path = (d / "logprobs.json").string();
    const std::vector<double> want = NumberArray<double>(
        ReadJson(path, "a case's log-probabilities"), path, "logprob", "a log-probability");
    if (want.size() + 1 != tokens.size()) {
      Fail("{}: {} log-probabilities for {} tokens, expected {}", path, want.size(), tokens.size(),
           tokens.size() - 1);
    }
    for (const std::string file : {"model.gguf", "hf"}) {
      const std::vector<double> got = LogProbs((d / file).string(), tokens, nullptr, nullptr);
      for (size_t t = 0; t < want.size(); ++t) {
        if (!(std::fabs(got[t] - want[t]) <= tolerance)) {
          problems.push_back(fmt::format("{}/{}: position {}: log p {:.9g}, the pack's {:.9g}",
                                         k.name, file, t + 1, got[t], want[t]));
          break;  // the first disagreement of a file
        }
      }
    }
  }
  return problems;
}

}  // namespace stretch
