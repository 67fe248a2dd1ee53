#include "fuzz/seed_writer.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fuzz/fuzz_target.h"
#include "fuzz/hf_folder.h"
#include "src/core/rng.h"
#include "src/io/gguf.h"
#include "src/io/gguf_model.h"
#include "src/io/hf_model.h"
#include "src/io/llama2c.h"
#include "src/io/model_checkpoint.h"
#include "src/io/safetensors.h"
#include "src/io/token_cache.h"
#include "src/io/tokenizer/bpe_pretokenizer.h"
#include "src/io/tokenizer/bpe_tokenizer.h"
#include "src/io/tokenizer/gguf_vocabulary.h"
#include "src/io/tokenizer/hf_tokenizer_json.h"
#include "src/io/tokenizer/spm_model.h"
#include "src/io/tokenizer/tokenizer.h"
#include "src/model/family.h"
#include "src/model/model_arch.h"
#include "src/position/method.h"
#include "src/report/records.h"
#include "src/train/checkpoint.h"
#include "src/train/trainer.h"

namespace stretch::fuzz {
namespace fs = std::filesystem;
namespace {

// The smallest model every writer accepts: a few kilobytes as float32, so the fuzzer's inputs
// stay short (its speed falls with their length).
ModelConfig MicroConfig(int vocab) {
  ModelConfig c;
  c.dim = 8;
  c.hidden_dim = 16;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.vocab_size = vocab;
  c.seq_len = 16;
  c.shared_classifier = false;
  return c;
}

Model MicroModel(int vocab, uint64_t seed) {
  Rng rng(seed);
  Model m;
  m.config = MicroConfig(vocab);
  m.source = "fuzz seed model";
  const ModelConfig& c = m.config;
  const size_t C = static_cast<size_t>(c.dim), F = static_cast<size_t>(c.hidden_dim),
               KV = static_cast<size_t>(c.kv_dim()), V = static_cast<size_t>(c.vocab_size);
  auto fill = [&rng](std::vector<float>& v, size_t n, double mean) {
    v.resize(n);
    for (float& x : v) x = static_cast<float>(mean + 0.3 * rng.Normal());
  };
  fill(m.weights.token_embedding, V * C, 0.0);
  m.weights.layers.resize(static_cast<size_t>(c.n_layers));
  for (LayerWeights& l : m.weights.layers) {
    fill(l.attn_norm, C, 1.0);
    fill(l.wq, C * C, 0.0);
    fill(l.wk, KV * C, 0.0);
    fill(l.wv, KV * C, 0.0);
    fill(l.wo, C * C, 0.0);
    fill(l.ffn_norm, C, 1.0);
    fill(l.w1, F * C, 0.0);
    fill(l.w2, C * F, 0.0);
    fill(l.w3, F * C, 0.0);
  }
  fill(m.weights.final_norm, C, 1.0);
  fill(m.weights.classifier, V * C, 0.0);
  return m;
}

// The same with Qwen 2's q/k/v biases (src/model/families/qwen2.cc): its own GGUF keys and
// tensor names ("qwen2.*", blk.N.attn_q.bias) and HF's (Qwen2ForCausalLM, q_proj.bias).
Model MicroQwen2Model(int vocab, uint64_t seed) {
  Model m = MicroModel(vocab, seed);
  m.config.qkv_bias = true;
  Rng rng(seed + 100);
  const size_t Q = static_cast<size_t>(m.config.dim), KV = static_cast<size_t>(m.config.kv_dim());
  for (LayerWeights& l : m.weights.layers) {
    for (auto [v, n] : {std::pair{&l.bq, Q}, std::pair{&l.bk, KV}, std::pair{&l.bv, KV}}) {
      v->resize(n);
      for (float& x : *v) x = static_cast<float>(0.3 * rng.Normal());
    }
  }
  return m;
}

// Weights of m's configuration drawn anew from `seed`: norms near 1, the rest small.
void RandomizeWeights(Model& m, uint64_t seed) {
  m.weights = ZeroWeights<float>(m.config);
  Rng rng(seed);
  m.weights.ForEach([&](const std::string& name, std::vector<float>& t, bool) {
    const bool norm = name.ends_with("norm");
    for (float& x : t) x = static_cast<float>(norm ? 1.0 + 0.1 * rng.Normal() : 0.3 * rng.Normal());
  });
}

// Qwen 3's block (src/model/families/qwen3.cc): per-head q/k norms ("qwen3.*",
// blk.N.attn_q_norm; HF's q_norm) and heads twice dim / heads wide (attention.key_length; HF's
// head_dim).
Model MicroQwen3Model(int vocab, uint64_t seed) {
  Model m = MicroModel(vocab, seed);
  m.config.explicit_head_dim = 2 * m.config.head_dim();
  m.config.qk_norm = true;
  RandomizeWeights(m, seed + 200);
  return m;
}

// Gemma 3: Qwen 3's head and norms, Gemma's block, a local layer then a global one.
Model MicroGemma3Model(int vocab, uint64_t seed) {
  Model m = MicroModel(vocab, seed);
  m.config.family = "gemma3";
  m.config.explicit_head_dim = 2 * m.config.head_dim();
  SetFamilyBlock(*FindFamilyByGguf("gemma3"), m.config);
  m.config.n_layers = 2;
  SetSwaPattern(m.config, {2, 3, 10000.0});
  RandomizeWeights(m, seed + 300);
  return m;
}

// Gemma 2: Gemma's block without q/k norms, a local layer at the model's RoPE then a global one,
// the soft caps (gemma2.attn_logit_softcapping, ...; HF's attn_logit_softcapping), tied.
Model MicroGemma2Model(int vocab, uint64_t seed) {
  Model m = MicroModel(vocab, seed);
  m.config.family = "gemma2";
  SetFamilyBlock(*FindFamilyByGguf("gemma2"), m.config);
  m.config.n_layers = 2;
  m.config.shared_classifier = true;
  m.config.attn_softcap = 50.0;
  m.config.final_softcap = 30.0;
  SetSwaPattern(m.config, {2, 3, 0.0});
  RandomizeWeights(m, seed + 400);
  return m;
}

// llama2.c's own tokenizer layout: max_token_length, then per piece: score, length, bytes.
std::string Llama2cTokenizerBytes(const std::vector<std::string>& pieces) {
  std::string out;
  auto put = [&out](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  int32_t max_len = 0;
  for (const std::string& p : pieces) max_len = std::max(max_len, static_cast<int32_t>(p.size()));
  put(&max_len, 4);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const float score = i < 3 ? 0.0f : -static_cast<float>(i);
    const int32_t len = static_cast<int32_t>(pieces[i].size());
    put(&score, 4);
    put(&len, 4);
    out += pieces[i];
  }
  return out;
}

// 40 pieces: <unk> <s> </s>, one character each, and a few merges ("th", "the", " the").
std::vector<std::string> TinyPieces() {
  std::vector<std::string> p = {"<unk>", "<s>", "</s>"};
  for (char ch : std::string(" abcdefghijklmnopqrstuvwxyz0123")) p.emplace_back(1, ch);
  for (const char* m : {"th", "the", " the", "he", "in", "an"}) p.emplace_back(m);
  return p;
}

// 300 pieces, as SentencePiece's LLaMA vocabulary is laid out: <unk> <s> </s>, the 256 byte
// pieces <0x00>..<0xFF>, then text pieces (which the SentencePiece and tokenizer.json writers
// need: byte fallback and a ' ' piece).
std::vector<std::string> RichPieces() {
  std::vector<std::string> p = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) p.push_back(fmt::format("<0x{:02X}>", b));
  for (char ch : std::string(" abcdefghijklmnopqrstuvwxyz.,")) p.emplace_back(1, ch);
  for (const char* m :
       {"th", "the", " t", " the", "he", "in", "an", " a", "er", "on", "re", "at"}) {
    p.emplace_back(m);
  }
  return p;
}

Tokenizer TokenizerOf(const std::vector<std::string>& pieces, const std::string& source) {
  std::vector<float> scores;
  for (size_t i = 0; i < pieces.size(); ++i)
    scores.push_back(i < 3 ? 0.0f : -static_cast<float>(i));
  return Tokenizer::FromVocabulary(source, pieces, scores);
}

// The rich vocabulary laid out as Phi-3's (a space before the text, a user-defined "<|end|>"
// that takes the white space after it along, as Phi-3's </s>; EOS a control token
// "<|endoftext|>" of its own), written as the legacy LLaMA tokenizer.json form
// `stretch convert --to hf` writes for it.
std::string Phi3LayoutTokenizerJson() {
  std::vector<std::string> pieces = RichPieces();
  std::vector<float> scores;
  for (size_t i = 0; i < pieces.size(); ++i) {
    scores.push_back(i < 3 ? 0.0f : -static_cast<float>(i));
  }
  pieces.emplace_back("<|end|>");
  pieces.emplace_back("<|endoftext|>");
  scores.insert(scores.end(), {0.0f, 0.0f});
  SpmLayout layout;
  layout.eos = static_cast<int>(pieces.size()) - 1;
  layout.types.assign(pieces.size(), SpmTokenType::kNormal);
  layout.types[0] = SpmTokenType::kUnknown;
  layout.types[1] = layout.types[2] = SpmTokenType::kControl;
  for (int b = 0; b < 256; ++b) layout.types[3 + static_cast<size_t>(b)] = SpmTokenType::kByte;
  layout.types[pieces.size() - 2] = SpmTokenType::kUserDefined;
  layout.types[pieces.size() - 1] = SpmTokenType::kControl;
  layout.rstrip = {static_cast<int>(pieces.size()) - 2};
  return SerializeBpeTokenizerJson(SentencePieceStyleBpeFromSpm(
      Tokenizer::FromVocabulary("phi3-layout", std::move(pieces), std::move(scores), layout)));
}

// A GPT-2 style byte-level BPE vocabulary: the 256 one-byte pieces spelled as GPT-2 spells
// bytes, a few merges and their results, then <|endoftext|>.
struct BpeVocabulary {
  std::vector<std::string> pieces;  // <|endoftext|> last
  std::vector<std::pair<std::string, std::string>> merges;
};

BpeVocabulary FuzzBpeVocabulary() {
  BpeVocabulary v;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = Gpt2ByteToCodePoint(static_cast<uint8_t>(b));
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    v.pieces.push_back(s);
  }
  v.merges = {{"t", "h"},          {"th", "e"}, {"\xC4\xA0", "t"},
              {"\xC4\xA0t", "he"}, {"h", "e"},  {"i", "n"}};
  for (const auto& [a, b] : v.merges) v.pieces.push_back(a + b);
  v.pieces.push_back("<|endoftext|>");
  return v;
}

// The vocabulary as a tokenizer.json, <|endoftext|> an added special token.
std::string BpeTokenizerJson() {
  const BpeVocabulary v = FuzzBpeVocabulary();
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < v.pieces.size(); ++i) vocab[v.pieces[i]] = i;
  const int eot = static_cast<int>(v.pieces.size()) - 1;
  nlohmann::json merge_list = nlohmann::json::array();
  for (const auto& [a, b] : v.merges) merge_list.push_back(a + " " + b);
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", eot},
         {"content", "<|endoftext|>"},
         {"special", true},
         {"single_word", false},
         {"lstrip", false},
         {"rstrip", false},
         {"normalized", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"vocab", vocab},
        {"merges", merge_list}}}};
  return j.dump();
}

nlohmann::json AddedToken(int id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},     {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", !special}, {"special", special}};
}

std::string FamilyTokenizerJson(FuzzJsonFamily family) {
  if (family == FuzzJsonFamily::kGemma3) {
    const std::string space = "\xE2\x96\x81";  // U+2581
    std::vector<std::string> pieces = {"<pad>", "<eos>", "<bos>", "<unk>"};
    for (int b = 0; b < 256; ++b) pieces.push_back(fmt::format("<0x{:02X}>", b));
    for (const char* c : {"t", "h", "e", "i", "n", "a", "\n"}) pieces.emplace_back(c);
    pieces.push_back(space);
    const std::vector<std::pair<std::string, std::string>> merges = {
        {"t", "h"}, {"th", "e"}, {space, "the"}, {"i", "n"}, {space, space}};
    for (const auto& [a, b] : merges) pieces.push_back(a + b);
    pieces.push_back("<start_of_turn>");
    nlohmann::json vocab = nlohmann::json::object();
    for (size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i]] = i;
    nlohmann::json merge_list = nlohmann::json::array();
    for (const auto& [a, b] : merges) merge_list.push_back({a, b});
    nlohmann::json added = nlohmann::json::array();
    for (int i = 0; i < 4; ++i)
      added.push_back(AddedToken(i, pieces[static_cast<size_t>(i)], true));
    added.push_back(AddedToken(static_cast<int>(pieces.size()) - 1, "<start_of_turn>", true));
    nlohmann::json j = {
        {"version", "1.0"},
        {"added_tokens", added},
        {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}}},
        {"pre_tokenizer",
         {{"type", "Split"},
          {"pattern", {{"String", " "}}},
          {"behavior", "MergedWithPrevious"},
          {"invert", false}}},
        {"post_processor", nullptr},
        {"decoder",
         {{"type", "Sequence"},
          {"decoders",
           {{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
            {{"type", "ByteFallback"}},
            {{"type", "Fuse"}}}}}},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", "<unk>"},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", true},
          {"byte_fallback", true},
          {"ignore_merges", false},
          {"vocab", vocab},
          {"merges", merge_list}}}};
    return j.dump();
  }
  nlohmann::json j = nlohmann::json::parse(BpeTokenizerJson());
  const bool llama3 = family == FuzzJsonFamily::kLlama3;
  nlohmann::json& model = j["model"];
  model["byte_fallback"] = false;
  model["ignore_merges"] = llama3;
  if (!llama3) {  // Qwen's files spell each merge as a pair
    nlohmann::json pairs = nlohmann::json::array();
    for (const nlohmann::json& m : model["merges"]) {
      const std::string text = m.get<std::string>();
      const size_t cut = text.find(' ');
      pairs.push_back({text.substr(0, cut), text.substr(cut + 1)});
    }
    model["merges"] = pairs;
    j["normalizer"] = {{"type", "NFC"}};
  }
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern",
          {{"Regex", std::string(BpeSplitPattern(llama3 ? BpeSplit::kLlama3 : BpeSplit::kQwen2))}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"},
         {"add_prefix_space", false},
         {"trim_offsets", llama3},
         {"use_regex", false}}}}};
  // A non-special added token, matched in raw text as its family's files have them.
  const int id = static_cast<int>(model["vocab"].size());
  model["vocab"]["<|fim_prefix|>"] = id;
  j["added_tokens"].push_back(AddedToken(id, "<|fim_prefix|>", false));
  return j.dump();
}

// The vocabulary as a GGUF file holds it (llama.cpp's keys; no tensors), with the pre-tokenizer
// `pre` (llama.cpp's tokenizer.ggml.pre: "gpt-2", Llama 3's "llama-bpe", ...).
void WriteBpeGguf(const std::string& path, const char* pre = "gpt-2") {
  const BpeVocabulary v = FuzzBpeVocabulary();
  std::vector<int32_t> types(v.pieces.size(), 1);
  types.back() = 3;  // control
  std::vector<std::string> merges;
  for (const auto& [a, b] : v.merges) merges.push_back(a + " " + b);
  const uint32_t eot = static_cast<uint32_t>(v.pieces.size() - 1);
  WriteGguf(path,
            {{"general.architecture", GgufString("llama")},
             {"tokenizer.ggml.model", GgufString("gpt2")},
             {"tokenizer.ggml.pre", GgufString(pre)},
             {"tokenizer.ggml.tokens", GgufStringArray(v.pieces)},
             {"tokenizer.ggml.token_type", GgufI32Array(types)},
             {"tokenizer.ggml.merges", GgufStringArray(merges)},
             {"tokenizer.ggml.bos_token_id", GgufU32(eot)},
             {"tokenizer.ggml.eos_token_id", GgufU32(eot)}},
            {});
}

// The same vocabulary with a user-defined token (Qwen's <think>, matched in the text), as
// llama.cpp's converter writes Hugging Face's non-special added tokens.
void WriteBpeGgufWithUserDefined(const std::string& path) {
  BpeVocabulary v = FuzzBpeVocabulary();
  v.pieces.push_back("<think>");
  std::vector<int32_t> types(v.pieces.size(), 1);
  types[types.size() - 2] = 3;  // <|endoftext|>
  types.back() = 4;             // user-defined
  std::vector<std::string> merges;
  for (const auto& [a, b] : v.merges) merges.push_back(a + " " + b);
  WriteGguf(path,
            {{"general.architecture", GgufString("qwen3")},
             {"tokenizer.ggml.model", GgufString("gpt2")},
             {"tokenizer.ggml.pre", GgufString("qwen2")},
             {"tokenizer.ggml.tokens", GgufStringArray(v.pieces)},
             {"tokenizer.ggml.token_type", GgufI32Array(types)},
             {"tokenizer.ggml.merges", GgufStringArray(merges)},
             {"tokenizer.ggml.eos_token_id", GgufU32(static_cast<uint32_t>(v.pieces.size() - 2))},
             {"tokenizer.ggml.add_bos_token", GgufBool(false)}},
            {});
}

// A SentencePiece vocabulary laid out as Gemma's (<pad> <eos> <bos> <unk> at 0..3, no leading
// space, a user-defined "\n"), as GGUF keys (src/io/tokenizer/gguf_vocabulary.h).
void WriteGemmaLayoutGguf(const std::string& path) {
  std::vector<std::string> pieces = {"<pad>", "<eos>", "<bos>", "<unk>", "\n"};
  for (int b = 0; b < 256; ++b) pieces.push_back(fmt::format("<0x{:02X}>", b));
  for (const char* m : {" ", "a", "b", "t", "h", "e", "th", "the", " the", "ab"})
    pieces.push_back(m);
  std::vector<float> scores(pieces.size(), 0.0f);
  for (size_t i = 261; i < pieces.size(); ++i) scores[i] = -static_cast<float>(i);
  SpmLayout layout;
  layout.unk = 3;
  layout.bos = 2;
  layout.eos = 1;
  layout.add_space_prefix = false;
  layout.types.assign(pieces.size(), SpmTokenType::kNormal);
  for (int id : {0, 1, 2}) layout.types[static_cast<size_t>(id)] = SpmTokenType::kControl;
  layout.types[3] = SpmTokenType::kUnknown;
  layout.types[4] = SpmTokenType::kUserDefined;
  for (size_t i = 5; i < 261; ++i) layout.types[i] = SpmTokenType::kByte;
  const Tokenizer t = Tokenizer::FromVocabulary("gemma-layout", pieces, scores, layout);
  GgufKeys kv = {{"general.architecture", GgufString("gemma3")}};
  for (auto& key : GgufVocabularyKeys(t)) kv.push_back(std::move(key));
  WriteGguf(path, kv, {});
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const fs::path& path, std::string_view bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// The file at `path` without metadata `key` (stretch.checksum): a checkpoint whose checksum no
// longer matches is refused before anything else is read, and a file without one is read
// unchecked, so a seed without it lets the fuzzer's mutations of tensors and metadata reach the
// readers behind the check. The same file when it has no such key.
std::string WithoutMetadata(const std::string& path, const std::string& key) {
  const SafetensorsFile in(path);
  if (!in.FindMetadata(key)) return ReadFile(path);
  SafetensorsWriter out;
  std::vector<std::vector<std::byte>> bytes;
  bytes.reserve(in.tensors().size());
  for (const SafetensorsTensor& t : in.tensors()) {
    bytes.emplace_back(static_cast<size_t>(t.bytes()));
    in.ReadBytesInto(t.name, bytes.back());
    out.AddRaw(t.name, t.dtype, t.shape, bytes.back());
  }
  for (const auto& [k, v] : in.metadata()) {
    if (k != key) out.SetMetadata(k, v);
  }
  const std::string unsealed = path + ".unsealed";
  out.Write(unsealed);
  return ReadFile(unsealed);
}

// The legacy llama2.c layout (7 int32, then the tensors; a negative vocab_size: not shared).
std::string Llama2cLegacyBytes(const ModelConfig& c) {
  const int64_t C = c.dim, F = c.hidden_dim, L = c.n_layers, V = c.vocab_size, KV = c.kv_dim(),
                D = c.head_dim(), T = c.seq_len;
  const int32_t header[7] = {c.dim,        c.hidden_dim,  c.n_layers, c.n_heads,
                             c.n_kv_heads, -c.vocab_size, c.seq_len};
  const int64_t floats = V * C + L * C + L * C * C + 2 * L * KV * C + L * C * C + L * C +
                         3 * L * F * C + C + 2 * T * (D / 2) + V * C;
  std::string out(reinterpret_cast<const char*>(header), sizeof(header));
  Rng rng(7);
  for (int64_t i = 0; i < floats; ++i) {
    const float x = static_cast<float>(0.1 * rng.Normal());
    out.append(reinterpret_cast<const char*>(&x), 4);
  }
  return out;
}

TrainArch MicroArch(LayerPosition position) {
  TrainArch a;
  a.model = MicroConfig(40);
  a.model.shared_classifier = false;
  a.model.attention.position = position;
  if (position == LayerPosition::kSandwich) {
    a.model.attention.sandwich_dim = kSandwichDefaultDim;
    a.model.attention.sandwich_lambda = kSandwichDefaultLambda;
  }
  a.model.attention.layers = {LayerLayout{true, 8}};
  return a;
}

TrainerOptions MicroTrainerOptions() {
  TrainerOptions o;
  o.batch = 2;
  o.schedule = LrSchedule{3e-3, 1e-4, 1, 4};
  o.seed = 5;
  return o;
}

void RandomBatch(Rng& rng, int64_t B, std::vector<int>& tokens) {
  tokens.resize(static_cast<size_t>(B * 9));
  for (int& t : tokens) t = static_cast<int>(rng.NextU64() % 40);
}

}  // namespace

Tokenizer TinyFuzzTokenizer() { return TokenizerOf(TinyPieces(), "tiny"); }
Tokenizer RichFuzzTokenizer() { return TokenizerOf(RichPieces(), "rich"); }
std::string BpeFuzzTokenizerJson() { return BpeTokenizerJson(); }
std::string FamilyFuzzTokenizerJson(FuzzJsonFamily family) { return FamilyTokenizerJson(family); }

int WriteFuzzSeeds(const std::string& root_dir) {
  const fs::path root(root_dir);
  const fs::path scratch = root / ".scratch";
  fs::create_directories(scratch);
  int written = 0;
  auto put = [&](const char* target, const std::string& name, std::string_view bytes) {
    WriteFile(root / target / name, bytes);
    ++written;
  };
  auto file = [&](const std::string& name) { return (scratch / name).string(); };

  const Model micro = MicroModel(40, 1);
  const Tokenizer tiny = TinyFuzzTokenizer();
  const Tokenizer rich = RichFuzzTokenizer();
  const std::string tiny_tok = Llama2cTokenizerBytes(TinyPieces());

  // llama2.c checkpoints and tokenizers.
  SaveLlama2cVersion1(micro, file("v1.bin"));
  const std::string v1 = ReadFile(file("v1.bin"));
  const std::string legacy = Llama2cLegacyBytes(micro.config);
  put("llama2c", "version1.bin", v1);
  put("llama2c", "legacy.bin", legacy);
  put("llama2c_tokenizer", "tiny.bin", tiny_tok);
  put("llama2c_tokenizer", "rich.bin", Llama2cTokenizerBytes(RichPieces()));

  // Tokenizer files of every kind.
  const std::string spm = SerializeSentencePieceModel(rich);
  const std::string sp_json = SerializeSentencePieceTokenizerJson(rich);
  const std::string bpe_json = BpeTokenizerJson();
  put("spm_model", "rich.model", spm);
  put("hf_tokenizer_json", "sentencepiece.json", sp_json);
  put("hf_tokenizer_json", "bpe.json", bpe_json);
  put("tokenizer_file", "tiny.bin", tiny_tok);
  put("tokenizer_file", "rich.model", spm);
  put("tokenizer_file", "sentencepiece.json", sp_json);
  put("tokenizer_file", "bpe.json", bpe_json);
  const std::string phi3_json = Phi3LayoutTokenizerJson();
  put("hf_tokenizer_json", "phi3_legacy.json", phi3_json);
  put("tokenizer_file", "phi3_legacy.json", phi3_json);
  for (const auto& [name, family] : {std::pair{"llama3.json", FuzzJsonFamily::kLlama3},
                                     std::pair{"qwen2.json", FuzzJsonFamily::kQwen2},
                                     std::pair{"gemma3.json", FuzzJsonFamily::kGemma3}}) {
    const std::string json = FamilyTokenizerJson(family);
    put("hf_tokenizer_json", name, json);
    put("tokenizer_file", name, json);
  }

  // safetensors and stretch checkpoints.
  SafetensorsWriter st;
  const std::vector<float> f = {1.0f, -2.0f, 0.5f, 3.0f, 0.0f, 7.0f};
  const std::vector<int64_t> i64 = {1, 2, 3};
  const std::vector<uint8_t> u8 = {1, 2, 3, 4, 5};
  st.Add<float>("a.weight", {2, 3}, f);
  st.Add<int64_t>("step", {}, std::span<const int64_t>(i64).first(1));
  st.Add<uint8_t>("bytes", {5}, u8);
  st.Add<float>("empty", {0, 4}, std::span<const float>());
  st.SetMetadata("format", "pt");
  st.Write(file("plain.safetensors"));
  put("safetensors", "plain.safetensors", ReadFile(file("plain.safetensors")));
  // A SentencePiece model needs the byte pieces: the rich vocabulary, and a model of its size.
  SaveModelAsCheckpoint(MicroModel(static_cast<int>(RichPieces().size()), 2),
                        file("llama2c_tok.safetensors"), &rich);
  SaveModelAsCheckpoint(MicroModel(TrainingTokenizer::kByteVocab, 3), file("bytes.safetensors"),
                        TrainingTokenizer::Bytes());
  SaveModelAsCheckpoint(micro, file("none.safetensors"), static_cast<const Tokenizer*>(nullptr));
  const std::string kChecksum = "stretch.checksum";
  for (const char* name : {"llama2c_tok.safetensors", "bytes.safetensors", "none.safetensors"}) {
    const std::string bytes = ReadFile(file(name));
    const std::string unsealed = WithoutMetadata(file(name), kChecksum);
    put("stretch_checkpoint", name, bytes);
    put("safetensors", name, bytes);
    put("model_file", name, unsealed);
    if (unsealed != bytes) put("stretch_checkpoint", std::string("unsealed_") + name, unsealed);
  }
  for (const LayerPosition pos : {LayerPosition::kRope, LayerPosition::kKerpleLog}) {
    Trainer trainer(MicroArch(pos), MicroTrainerOptions());
    trainer.Step(RandomBatch);
    const std::string name = fmt::format("step1_{}.safetensors", static_cast<int>(pos));
    SaveCheckpoint(trainer, file(name));
    const std::string bytes = ReadFile(file(name));
    const std::string unsealed = WithoutMetadata(file(name), kChecksum);
    put("train_checkpoint", name, bytes);
    if (unsealed != bytes) put("train_checkpoint", "unsealed_" + name, unsealed);
  }

  // GGUF: float32 with a SentencePiece vocabulary, float16 and bfloat16 without, and one whose
  // file asks for YaRN.
  SaveGgufModel(micro, file("f32.gguf"), static_cast<uint32_t>(GgmlType::kF32), &tiny);
  SaveGgufModel(micro, file("f16.gguf"), static_cast<uint32_t>(GgmlType::kF16), nullptr);
  SaveGgufModel(micro, file("bf16.gguf"), static_cast<uint32_t>(GgmlType::kBF16), nullptr);
  const Method yarn = ParseMethod("yarn:factor=4");
  SaveGgufModel(micro, file("yarn.gguf"), static_cast<uint32_t>(GgmlType::kF32), nullptr, &yarn);
  {  // Q8_0: rows of whole 32-value blocks, which a load with WeightStorage::kAsStored keeps packed
    Model q8 = micro;
    q8.config.dim = 32;
    q8.config.hidden_dim = 64;
    q8.weights = ZeroWeights<float>(q8.config);
    Rng rng(5);
    q8.weights.ForEach([&](const std::string& name, std::vector<float>& t, bool) {
      for (float& x : t)
        x = static_cast<float>((name.ends_with("norm") ? 1.0 : 0.0) + 0.3 * rng.Normal());
    });
    SaveGgufModel(q8, file("q8_0.gguf"), static_cast<uint32_t>(GgmlType::kQ8_0), nullptr);
  }
  WriteBpeGguf(file("bpe_vocab.gguf"));
  WriteBpeGguf(file("bpe_llama3_vocab.gguf"), "llama-bpe");
  // LLaMA 3.1's rule as llama.cpp's files carry it: the per-pair divisors rope_freqs.weight.
  const Method llama3 = ParseMethod("llama3:factor=8");
  SaveGgufModel(micro, file("llama3.gguf"), static_cast<uint32_t>(GgmlType::kF32), nullptr,
                &llama3);
  const Model qwen2 = MicroQwen2Model(40, 4);
  SaveGgufModel(qwen2, file("qwen2.gguf"), static_cast<uint32_t>(GgmlType::kF32), &tiny);
  SaveGgufModel(qwen2, file("qwen2_yarn.gguf"), static_cast<uint32_t>(GgmlType::kF16), nullptr,
                &yarn);
  const Model qwen3 = MicroQwen3Model(40, 5);
  SaveGgufModel(qwen3, file("qwen3.gguf"), static_cast<uint32_t>(GgmlType::kF32), &tiny);
  // Mistral: the LLaMA family with a window on every layer (llama.attention.sliding_window; HF's
  // MistralForCausalLM sliding_window).
  const Model mistral = [] {
    Model m = MicroModel(40, 6);
    m.config.attention.layers.assign(static_cast<size_t>(m.config.n_layers),
                                     LayerLayout{.window = 3});
    return m;
  }();
  SaveGgufModel(mistral, file("mistral.gguf"), static_cast<uint32_t>(GgmlType::kF32), &tiny);
  // Phi-3: fused attn_qkv and ffn_up, and LongRoPE's factor tensors without a type key.
  const Model phi3 = [] {
    Model m = MicroModel(40, 7);
    m.config.family = "phi3";
    return m;
  }();
  Method phi3_longrope = ParseMethod("longrope");
  phi3_longrope.rope.factor = 4.0;
  for (int t = 0; t < phi3.config.head_dim() / 2; ++t) {
    phi3_longrope.rope.short_factor.push_back(1.0 + 0.1 * t);
    phi3_longrope.rope.long_factor.push_back(2.0 + 0.5 * t);
  }
  SaveGgufModel(phi3, file("phi3.gguf"), static_cast<uint32_t>(GgmlType::kF32), &tiny,
                &phi3_longrope);
  // Gemma 3: its window, pattern and local base keys, post norms.
  const Model gemma3 = MicroGemma3Model(40, 8);
  SaveGgufModel(gemma3, file("gemma3.gguf"), static_cast<uint32_t>(GgmlType::kF32), &tiny);
  // Gemma 3 4B-27B: linear scaling (factor 8) of the global layers.
  const Method linear = ParseMethod("pi:factor=8");
  SaveGgufModel(gemma3, file("gemma3_linear.gguf"), static_cast<uint32_t>(GgmlType::kF32), &tiny,
                &linear);
  // Gemma 2: its soft-cap keys, the window and pattern without a local base.
  const Model gemma2 = MicroGemma2Model(40, 9);
  SaveGgufModel(gemma2, file("gemma2.gguf"), static_cast<uint32_t>(GgmlType::kF32), &tiny);
  WriteBpeGgufWithUserDefined(file("bpe_user_vocab.gguf"));
  WriteGemmaLayoutGguf(file("gemma_layout_vocab.gguf"));
  for (const char* name :
       {"f32.gguf", "f16.gguf", "bf16.gguf", "q8_0.gguf", "yarn.gguf", "llama3.gguf",
        "bpe_vocab.gguf", "bpe_llama3_vocab.gguf", "bpe_user_vocab.gguf", "gemma_layout_vocab.gguf",
        "qwen2.gguf", "qwen2_yarn.gguf", "qwen3.gguf", "mistral.gguf", "phi3.gguf", "gemma3.gguf",
        "gemma3_linear.gguf", "gemma2.gguf"}) {
    put("gguf", name, ReadFile(file(name)));
  }
  put("model_file", "qwen3.gguf", ReadFile(file("qwen3.gguf")));
  put("model_file", "qwen2.gguf", ReadFile(file("qwen2.gguf")));
  put("model_file", "f32.gguf", ReadFile(file("f32.gguf")));
  put("model_file", "version1.bin", v1);
  put("model_file", "legacy.bin", legacy);

  // Hugging Face folders: config.json, the marker, model.safetensors (fuzz_target.h SplitParts).
  const std::pair<const char*, const char*> hf_variants[] = {{"f32", nullptr},
                                                             {"bf16", nullptr},
                                                             {"yarn", "yarn:factor=4"},
                                                             {"llama3", "llama3:factor=8"}};
  for (const auto& [name, spec] : hf_variants) {
    const std::string dir = file(std::string("hf_") + name);
    fs::remove_all(dir);
    const Method method = spec != nullptr ? ParseMethod(spec) : Method{};
    SaveHfModel(micro, dir,
                std::string(name) == "bf16" ? SafetensorsDtype::kBF16 : SafetensorsDtype::kF32, {},
                spec != nullptr ? &method : nullptr);
    put("hf_model", std::string(name) + ".bin",
        ReadFile(dir + "/" + kHfConfigFile) + std::string(kPartMarker) +
            ReadFile(dir + "/" + kHfWeightsFile));
  }
  // Qwen 2: Qwen2Config's keys, q/k/v biases; Qwen 3: head_dim, q/k norms.
  for (const auto& [name, model, method] :
       {std::tuple{std::string("hf_qwen2"), &qwen2, (const Method*)nullptr},
        std::tuple{std::string("hf_qwen2_yarn"), &qwen2, &yarn},
        std::tuple{std::string("hf_qwen3"), &qwen3, (const Method*)nullptr},
        std::tuple{std::string("hf_mistral"), &mistral, (const Method*)nullptr},
        std::tuple{std::string("hf_phi3"), &phi3, (const Method*)&phi3_longrope},
        std::tuple{std::string("hf_gemma3"), &gemma3, (const Method*)nullptr},
        std::tuple{std::string("hf_gemma3_linear"), &gemma3, &linear},
        std::tuple{std::string("hf_gemma2"), &gemma2, (const Method*)nullptr}}) {
    const std::string dir = file(name);
    fs::remove_all(dir);
    SaveHfModel(*model, dir, SafetensorsDtype::kF32, {}, method);
    put("hf_model", name + ".bin",
        ReadFile(dir + "/" + kHfConfigFile) + std::string(kPartMarker) +
            ReadFile(dir + "/" + kHfWeightsFile));
  }
  // Every family's plain layout, as GGUF and as an HF folder, from its descriptor alone: a family
  // added as one file of src/model/families/ gets its seeds here without a line of its own (those
  // with local/global layers, Gemma's, have theirs above).
  for (const ModelFamily* f : ModelFamilies()) {
    if (f->swa_pattern > 0) continue;
    Model m = MicroModel(40, 600);
    m.config.family = f->name;
    SetFamilyBlock(*f, m.config);
    RandomizeWeights(m, 601);
    const std::string name = std::string("family_") + f->name;
    SaveGgufModel(m, file(name + ".gguf"), static_cast<uint32_t>(GgmlType::kF32), &tiny);
    const std::string dir = file(name);
    fs::remove_all(dir);
    SaveHfModel(m, dir, SafetensorsDtype::kF32);
    put("hf_model", name + ".bin",
        ReadFile(dir + "/" + kHfConfigFile) + std::string(kPartMarker) +
            ReadFile(dir + "/" + kHfWeightsFile));
  }
  {
    // The float32 folder sharded: the first tensors in one shard, the rest in the other, and the
    // index that maps each tensor to its shard; no model.safetensors (an empty part).
    const std::string dir = file("hf_f32");
    const SafetensorsFile single(dir + "/" + kHfWeightsFile);
    const std::vector<SafetensorsTensor>& tensors = single.tensors();
    std::vector<std::vector<std::byte>> bytes;
    SafetensorsWriter shards[2];
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const SafetensorsTensor& t = tensors[i];
      bytes.emplace_back(static_cast<size_t>(t.bytes()));
      single.ReadBytesInto(t.name, bytes.back());
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      const size_t shard = i < tensors.size() / 2 ? 0 : 1;
      shards[shard].AddRaw(tensors[i].name, tensors[i].dtype, tensors[i].shape, bytes[i]);
      weight_map[tensors[i].name] = kHfShardFiles[shard];
    }
    std::string content =
        ReadFile(dir + "/" + kHfConfigFile) + std::string(kPartMarker) + std::string(kPartMarker) +
        nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", weight_map}}.dump(2);
    for (int s = 0; s < 2; ++s) {
      shards[s].SetMetadata("format", "pt");
      shards[s].Write(file(kHfShardFiles[s]));
      content += std::string(kPartMarker) + ReadFile(file(kHfShardFiles[s]));
    }
    put("hf_model", "sharded.bin", content);
  }

  // Token caches: 2-byte and 4-byte tokens.
  for (const int32_t vocab : {300, 70000}) {
    TokenCache cache;
    cache.meta.vocab_size = vocab;
    cache.meta.corpus = "corpus: a.txt 120 bytes";
    cache.meta.recipe = "given";
    cache.meta.tokenizer_kind = "bytes";
    cache.meta.doc_tokens = {3, 0, 5};
    cache.tokens = {1, 2, 3, 4, 5, 6, vocab - 1, 0};
    const std::string name = fmt::format("vocab{}.cache", vocab);
    WriteTokenCache(file(name), cache);
    put("token_cache", name, ReadFile(file(name)));
  }

  // The JSON a checkpoint stores (stretch.config, stretch.train), for the config target.
  put("train_config", "arch_rope.json", ArchToJson(MicroArch(LayerPosition::kRope)).dump());
  put("train_config", "arch_kerple.json", ArchToJson(MicroArch(LayerPosition::kKerpleLog)).dump());
  put("train_config", "trainer_options.json", TrainerOptionsToJson(MicroTrainerOptions()).dump());

  // Lab records: one line per protocol.
  std::string lines;
  for (const std::string_view protocol : kProtocolNames) {
    LabRecord r;
    r.corpus = "sotu";
    r.model = "rope";
    r.variant = "rope | full";
    r.train_len = 128;
    r.method = "yarn";
    r.resolved_method = "yarn:factor=8";
    r.protocol = std::string(protocol);
    r.ctx = 1024;
    r.tail = protocol == "tail" ? 64 : 0;
    r.stride = protocol == "sliding" ? 256 : 0;
    r.depth = protocol == "passkey" ? 0.5 : -1.0;
    r.sequences = 4;
    r.tokens = 4096;
    r.loss = 2.5;
    r.accuracy = 0.4;
    r.token_accuracy = 0.4;
    r.by_position = {{0, 512, 2048, 2.4, 0.41, {true, 2.3, 2.5}, {true, 0.38, 0.44}},
                     {512, 1024, 2048, 2.6, 0.39, {}, {}}};
    r.seconds = 1.5;
    r.accuracy_ci = {true, 0.35, 0.45};
    r.loss_ci = {true, 2.4, 2.6};
    if (protocol == "far-copy" || protocol == "repeat") {
      r.distance = protocol == "far-copy" ? 512 : 0;
      r.material = protocol == "far-copy" ? "random" : "";
      r.period = protocol == "repeat" ? 256 : 0;
      r.has_control = true;
      r.control_accuracy = 0.03;
      r.control_loss = 4.0;
      r.control_accuracy_ci = {true, 0.01, 0.08};
      r.informative = false;
      r.not_informative = "copy - control = 3 points < 20 at L";
    }
    r.key = LabRecordKey(r);
    lines += LabRecordJson(r).dump() + "\n";
  }
  LabGate g;
  g.corpus = "sotu";
  g.model = "rope";
  g.model_id = "0123456789abcdef";
  g.train_len = 128;
  g.copy_accuracy = 0.93;
  g.copy_ci = {true, 0.9, 0.95};
  g.control_accuracy = 0.04;
  g.control_ci = {true, 0.02, 0.06};
  g.copy_trials = 64;
  g.passkey_accuracy = 0.95;
  g.passkey_ci = {true, 0.86, 0.98};
  g.passkey_trials = 40;
  g.passed = true;
  lines += LabGateJson(g).dump() + "\n";
  put("lab_records", "every_protocol.jsonl", lines);
  fs::remove_all(scratch);
  return written;
}

}  // namespace stretch::fuzz
