// Model families as data (the project's design, ../shared/DESIGN.md, "Model families are data";
// issue 42): a family is one ModelFamily in one file of src/model/families/, holding its names in
// HF config.json (`architectures`) and in GGUF (`general.architecture`) and one table of its
// tensors, each with its name in every format, its shape from the configuration and where it goes
// in ModelWeights. The readers and writers of GGUF and HF folders loop over that table
// (FamilyTensors) instead of naming tensors themselves.
//
// Adding a family: a new file src/model/families/NAME.cc defining
// `extern const ModelFamily NAME_family`, picked up by the build (CMakeLists.txt writes one
// STRETCH_FAMILY(NAME) per file into family_list.inc), plus its tests. docs/formats.md says more.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/model/config.h"

namespace stretch {

// A tensor's length along one axis, from the configuration.
enum class FamilyDim {
  kNone,    // a vector: only the first axis
  kVocab,   // vocab_size
  kDim,     // dim (C)
  kQuery,   // n_heads * head_dim
  kKv,      // n_kv_heads * head_dim
  kHidden,  // hidden_dim (F)
  kHead,    // head_dim (D): the per-head q/k norms' gains
};

// HF checkpoints store q and k with each head's rotary pairs split into halves (transformers'
// rotate_half); llama.cpp and stretch keep them interleaved. Which heads a tensor's rows are
// permuted by between the two (src/io/hf_model.cc).
// kOneHead: a vector of one head's D values (Qwen 3's q/k norm gains, which act on q and k before
// RoPE, so their entries follow the rows they scale).
enum class FamilyRopeRows { kNone, kQueryHeads, kKvHeads, kOneHead };

// When a tensor is in the file.
enum class FamilyPresence {
  kAlways,
  kUnlessTied,  // the classifier: absent when it shares the embedding (shared_classifier)
  kQkvBias,     // q/k/v biases: present when the model has them (ModelConfig::qkv_bias)
};

// One part of a fused tensor: a layer weight whose rows follow the previous part's in the file.
struct FamilyPart {
  std::vector<float> LayerWeights::*layer = nullptr;
  FamilyDim rows = FamilyDim::kDim;
  FamilyRopeRows rope_rows = FamilyRopeRows::kNone;
};

struct FamilyTensor {
  // Names with "{}" for the layer's index in a per-layer tensor.
  const char* gguf;  // llama.cpp's name, e.g. "blk.{}.attn_k.weight"
  const char* hf;    // transformers', e.g. "model.layers.{}.self_attn.k_proj.weight"
  // Where it goes: a member of ModelWeights (global) or of each layer's LayerWeights.
  std::vector<float> ModelWeights::*global = nullptr;
  std::vector<float> LayerWeights::*layer = nullptr;
  FamilyDim rows = FamilyDim::kDim;  // (rows, cols) as stretch holds it: y = W x, row-major
  FamilyDim cols = FamilyDim::kNone;
  FamilyRopeRows rope_rows = FamilyRopeRows::kNone;
  FamilyPresence presence = FamilyPresence::kAlways;
  // A fused tensor (Phi-3's qkv_proj, gate_up_proj): the layer weights `parts`, their rows one
  // after another in the file (rows of the whole: the parts' sum; `layer`, `rows` and `rope_rows`
  // unused). Empty: the one weight above.
  std::span<const FamilyPart> parts = {};
  // An RMSNorm gain that HF checkpoints keep as w where the model multiplies by 1 + w (Gemma's
  // Gemma3RMSNorm); stretch and GGUF hold 1 + w (llama.cpp's converter adds the 1).
  bool hf_plus_one = false;

  bool PerLayer() const { return layer != nullptr || !parts.empty(); }
  bool Matrix() const { return cols != FamilyDim::kNone; }
  bool Fused() const { return !parts.empty(); }
};

// A config.json switch of a family's config class that turns on something stretch does not read
// (Qwen2Config's use_sliding_window): a folder with it true is refused, naming `what`.
struct FamilyUnreadSwitch {
  const char* key;   // "use_sliding_window"
  const char* what;  // "windowed layers from max_window_layers on"
};

struct ModelFamily {
  const char* name;                               // "llama"
  std::span<const char* const> hf_architectures;  // config.json "architectures"
  const char* gguf_architecture;  // general.architecture, also the prefix of its metadata keys
  std::span<const char* const> hf_model_types;  // config.json "model_type", one per architecture
  std::span<const FamilyTensor> tensors;        // in the order files list them
  // The block's choices (ModelConfig): a model read as this family gets them, and a model with
  // them is written as this family (FamilyOf).
  bool qkv_bias = false;
  bool qk_norm = false;  // per-head q/k RMSNorm before RoPE (Qwen 3, Gemma 3)
  // Gemma's block: norms on the attention's and feed-forward's outputs, GeGLU (tanh GELU) and the
  // embedding times sqrt(dim) (ModelConfig::post_norms, activation, embed_scale).
  bool gemma_block = false;
  // Local and global layers (Gemma 3): every layer l with l % P < P - 1 attends to a sliding
  // window at its own RoPE base (LayerLayout: window, rope_base, rope_pi 1), every P-th to all
  // keys at the model's base and interpolation. swa_pattern: the files' default P (0: the family
  // has no such layers); swa_local_base: the default local base. Files hold W as
  // `sliding_window` (HF) / ARCH.attention.sliding_window (GGUF), P as `sliding_window_pattern`
  // or `layer_types` / ARCH.attention.sliding_window_pattern, the base as `rope_local_base_freq`
  // / ARCH.rope.freq_base_swa.
  // swa_local_base 0 (Gemma 2): the local layers keep the model's RoPE (base and interpolation:
  // Gemma2RotaryEmbedding serves every layer), LayerLayout with the window alone.
  int64_t swa_pattern = 0;
  double swa_local_base = 0.0;
  // GGUF: the window when ARCH.attention.sliding_window is absent (llama.cpp's gemma2: 4096);
  // 0: every layer global then (gemma3).
  int64_t gguf_default_window = 0;
  // llama.cpp scales this family's queries by 1/sqrt(head_dim), but by 1/sqrt(dim / heads) for a
  // model of this many layers (the 27B one, whose query_pre_attn_scalar is that): 0 for none.
  int gguf_wide_scale_layers = 0;
  // Gemma 2's soft-capping (ModelConfig::attn_softcap, final_softcap): the files hold it as
  // attn_logit_softcapping / final_logit_softcapping (config.json, defaults 50 and 30; GGUF:
  // ARCH.attn_logit_softcapping, ARCH.final_logit_softcapping, which llama.cpp always applies).
  // A family without it refuses a model or a file that has it.
  bool softcaps = false;
  // llama.cpp reads no output.weight for this family (gemma2: its classifier is the embedding):
  // GGUF files of it hold tied models only.
  bool gguf_tied = false;
  // config.json's rope_theta when absent (the config class's default: Gemma3TextConfig 1e6).
  double hf_default_rope_base = 10000.0;
  // config.json's tie_word_embeddings when absent (LlamaConfig: false; Gemma2Config,
  // Gemma3TextConfig: true).
  bool hf_default_tied = false;
  // config.json's head_dim when the key is absent (Gemma2Config, Gemma3TextConfig: 256); 0:
  // hidden_size / num_attention_heads, as transformers derives it for the LLaMA-like configs.
  int64_t hf_default_head_dim = 0;
  // config.json switches that must be absent or false (FamilyUnreadSwitch).
  std::span<const FamilyUnreadSwitch> hf_unread_switches = {};
  // GGUF files of this family can hold LLaMA 3.1's rule as rope_freqs.weight: llama.cpp loads
  // that tensor for the architecture (llama).
  bool gguf_rope_freqs = false;
  // GGUF files of this family can hold LongRoPE (rope.scaling.type "longrope" with tensors
  // rope_factors_short/long.weight): llama.cpp loads those tensors for the architecture (phi3).
  bool gguf_longrope = false;
  // The GGUF file keeps q and k rows in HF's rotate-half layout, as llama.cpp's converter leaves
  // them for architectures it runs with LLAMA_ROPE_TYPE_NEOX (Qwen 2, ...); LLaMA's GGUF has
  // them interleaved (the converter permutes them).
  bool gguf_rope_halves = false;
  // A sliding window on every layer (AttentionLayout::UniformWindow): the index in
  // hf_architectures of the architecture whose config.json holds it as `sliding_window` (LLaMA:
  // MistralForCausalLM), also held in GGUF as ARCH.attention.sliding_window; -1: the family's files
  // hold no window. hf_default_window: that config class's default when the key is absent (0:
  // none).
  int hf_window_architecture = -1;
  int64_t hf_default_window = 0;
  // config.json keys of the family's config class that an HF folder written by stretch sets (a
  // JSON object: switches the block as stretch runs it leaves off, e.g. no sliding window). Its
  // booleans are also enforced on read: a config.json that sets one the other way is refused by
  // name (src/io/hf_model.cc), so list here only switches whose other value stretch cannot run.
  const char* hf_config_keys = "{}";
};

// Every family the build holds (one per file of src/model/families/), by name.
std::span<const ModelFamily* const> ModelFamilies();
const ModelFamily* FindFamilyByGguf(std::string_view general_architecture);
const ModelFamily* FindFamilyByHf(std::string_view architecture);
// The family of the LLaMA block (ModelBlock::kLlama): what stretch's own checkpoints convert to.
const ModelFamily& LlamaFamily();
// The family whose choices (qkv_bias, qk_norm) the configuration has: what it is written as.
// Families with the same choices (LLaMA, Phi-3) are told apart by ModelConfig::family, the family
// a model was read as; stretch's own models are LLaMA's.
const ModelFamily& FamilyOf(const ModelConfig& c);
// Whether files of `family` hold the attention layout of `c`: the plain one, a window on every
// layer where the family has such files (ModelFamily::hf_window_architecture), or local and
// global layers where it has those (ModelFamily::swa_pattern; with a logit scale other than
// 1/sqrt(D) only when `scale_ok`: HF's query_pre_attn_scalar, which GGUF lacks).
bool FamilyHoldsLayout(const ModelFamily& family, const ModelConfig& c, bool scale_ok = false);

// Local and global layers as ModelFamily::swa_pattern describes them.
struct SwaPattern {
  int64_t period = 0;  // P: layer l is global when l % P == P - 1
  int64_t window = 0;  // W: a local layer's keys i - W + 1 .. i
  // The local layers' RoPE base, at interpolation 1 (Gemma 3); 0: the model's RoPE, base and
  // interpolation (Gemma 2).
  double local_base = 0.0;
  LayerLayout Local() const {
    return local_base > 0.0 ? LayerLayout{.window = window, .rope_base = local_base, .rope_pi = 1.0}
                            : LayerLayout{.window = window};
  }
};
// The pattern of `c`'s layout (every other AttentionLayout field the default but logit_scale),
// the smallest period that fits; nullopt when its layers are not such a pattern.
std::optional<SwaPattern> SwaPatternOf(const ModelConfig& c);
// c.attention.layers for `p` (c.n_layers set first).
void SetSwaPattern(ModelConfig& c, const SwaPattern& p);
// The block choices of `family` into `c` (qkv_bias, qk_norm, Gemma's block).
void SetFamilyBlock(const ModelFamily& family, ModelConfig& c);
// The names of every family's GGUF architectures, or HF architectures, for messages:
// "\"llama\", \"qwen2\"".
std::string KnownGgufArchitectures();
// Known relatives of the families that no family reads, by the start of their HF architecture,
// model_type or GGUF general.architecture (any case): " (why)", what stretch would get wrong
// running them as one of its families (a mixture of experts, LayerNorm, Gemma 1 ...); "" for
// other names.
std::string FamilyRelativeReason(const std::string& name);
std::string KnownHfArchitectures();

// q and k rows between HF's rotate-half layout (each head's pairs split into halves: row
// h D + j D/2 + i holds pair i's j-th element) and stretch's interleaved pairs (row h D + 2i + j),
// for `heads` heads of D rows of `cols` values (1 for a bias). The inverse of
// convert_llama_weights_to_hf.py's permute, and permute itself.
void HalvesToInterleaved(std::vector<float>& w, int64_t heads, int64_t D, int64_t cols);
std::vector<float> InterleavedToHalves(const std::vector<float>& w, int64_t heads, int64_t D,
                                       int64_t cols);

enum class WeightFormat { kGguf, kHf };

// One tensor of a family for one configuration and layer: its name in `format`, its shape
// (rows, cols) as stretch holds it, and its table entry.
struct FamilyTensorAt {
  std::string name;
  std::vector<int64_t> shape;  // {rows} or {rows, cols}
  const FamilyTensor* spec = nullptr;
  int layer = -1;          // -1 for a global tensor
  int64_t rope_heads = 0;  // with rope_rows: the heads its rows are permuted by, else 0
  // A fused tensor's parts in order: their rows and the heads each is permuted by (0: none).
  struct Part {
    int64_t rows = 0;
    int64_t rope_heads = 0;
  };
  std::vector<Part> parts;
  int64_t head_dim = 0;  // D, for the permutations
  float offset = 0.0f;   // what the file's values lack: 1 for an HF hf_plus_one gain, else 0
};

// The tensors a model of configuration `c` holds in `format`, in the table's order, global ones
// first, then each layer's, then the rest (a table's global tensors after its first layer entry
// come after the layers).
std::vector<FamilyTensorAt> FamilyTensors(const ModelFamily& family, const ModelConfig& c,
                                          WeightFormat format);

// Where a tensor's values go (and come from) in `w`: the weight of an unfused tensor.
std::vector<float>& FamilyTensorData(ModelWeights& w, const FamilyTensorAt& t);
const std::vector<float>& FamilyTensorData(const ModelWeights& w, const FamilyTensorAt& t);
// Every weight a tensor holds: its one weight, or a fused tensor's parts in order.
std::vector<std::vector<float>*> FamilyTensorMembers(ModelWeights& w, const FamilyTensorAt& t);

// A tensor's values as a file holds them, from `w`: a fused tensor's parts one after another, and
// with `halves`, q and k rows (those with rope heads) in HF's rotate-half layout; minus `offset`.
std::vector<float> FamilyTensorValues(const ModelWeights& w, const FamilyTensorAt& t, bool halves);
// The inverse: `values` as a file holds them (their count checked) into `w`.
void SetFamilyTensorValues(ModelWeights& w, const FamilyTensorAt& t, std::vector<float> values,
                           bool halves);
// The same for a matrix kept in its file's type (src/kernels/packed.h), for float inference:
// `m` (the tensor's rows as the file holds them, shape checked) becomes the packed form of the
// tensor's weight, or of each part of a fused tensor (row ranges of it); with `halves`, the rows
// of q and k are put back in interleaved order in a copy of their bytes (a row is whole blocks,
// so rows move as they are).
void SetFamilyTensorPacked(ModelWeights& w, const FamilyTensorAt& t, const PackedMatrix& m,
                           bool halves);

}  // namespace stretch
