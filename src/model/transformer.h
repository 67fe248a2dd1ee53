// The LLaMA decoder (Touvron et al. 2023; llama2.c's run.c is the reference forward), and the
// GAU block of models trained with it (src/model/config.h's ModelBlock::kGau):
//   x = embed(tokens)
//   per layer:  h = rmsnorm(x) ; q, k, v = h Wq^T, h Wk^T, h Wv^T ; rope(q), rope(k) at their
//               positions ; x += attention(q, k, v) Wo^T
//               h = rmsnorm(x) ; x += (silu(h W1^T) * (h W3^T)) W2^T
//   logits = rmsnorm(x) Wcls^T
// Each layer is the block of src/model/block.h, the one the trainer runs too. Prefill runs a
// whole chunk of tokens with matrix products (src/kernels/gemm.h) and the tiled attention kernel; decode is
// the same path with one token. Keys and values go into a KvCache.
//
// Position methods (src/position/method.h) select how q and k are rotated, which keys a query sees
// and how logits are scaled. When a method never changes a key's rotation (plain, PI, NTK, YaRN,
// llama3, LongRoPE, windows: AttentionPlan::KeysRotatedOnce) the cache holds keys after RoPE and
// the kernel rotates nothing; otherwise (the relative maps of src/position/maps/, Lambda
// sinks, dynamic scaling) it holds keys before RoPE and the kernel rotates them per tile as each
// (query, key) pair's segment requires.
//
// Models trained by `stretch train` carry a per-layer attention layout (ModelConfig::attention):
// RoPE (with XPOS's decay, p-RoPE's unrotated pairs, a trained interpolation), NoPE, ALiBi,
// KERPLE or Sandwich per layer, a trained sliding window or chunks per layer, a RoPE base and
// interpolation per layer, QueryNorm / KeyNorm / cosine logits and their scale, the per-position
// lambda, SSMax and Llama 4's temperature tuning. Each layer then has its own plan, and a position
// method applies to a layer by the rule of LayerMethodUse below:
//   - a layer trained with a window or chunks keeps them and plain RoPE at its base (or no
//     rotation, NoPE): its relative distances never exceed what it was trained with, so it needs
//     no method and none is applied (not the method's mask, not +logn);
//   - a full-attention RoPE layer takes the method as it is (frequencies, relative map, mask,
//     +logn, YaRN's attention factor), resolved for the layer's own base and interpolation when
//     it has them (Gemma 3's global layers), as HF applies rope_scaling to those layers only;
//   - a full-attention layer without RoPE (NoPE, ALiBi, KERPLE, Sandwich) takes the method's mask (window,
//     Lambda's sinks + window, blockwise) and +logn, and keeps its bias; it has no rotation for
//     the method's RoPE part to change (nor YaRN's attention factor, which compensates for it).
// A method that changes the rotation (MethodChangesRope: pi, ntk, yarn, llama3, longrope, dynamic-*,
// the relative maps, direct:base=B) on a model with no full-attention
// RoPE layer would change nothing it claims to: SetMethod refuses it (CheckMethodFitsLayout). On a
// mixed model it applies to the full-attention RoPE layers only. Each layer's KV cache holds the
// key slots its own plan needs. The default layout gives every layer the method's plan: the
// LLaMA path above, bit for bit.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/aligned.h"
#include "src/model/config.h"
#include "src/model/model_arch.h"
#include "src/position/plan.h"
#include "src/position/rope.h"

namespace stretch {

// How keys and values are stored (`--cache-type`, llama.cpp's -ctk / -ctv): float32, the exact
// path and the default; or 16-bit floats (src/kernels/half.h: F16, BF16), each value rounded to
// nearest once when it is stored, which halves the cache's memory. The attention kernel reads
// them widened back to float32, one layer at a time (a float32 copy of the layer's visible keys
// and values: 1 / n_layers of a float32 cache), so every position method runs unchanged.
enum class KvCacheType : uint8_t { kF32, kF16, kBF16 };
struct KvCacheTypes {
  KvCacheType k = KvCacheType::kF32;
  KvCacheType v = KvCacheType::kF32;
  bool operator==(const KvCacheTypes&) const = default;
};
// "f32", "f16", "bf16" (llama.cpp's names); nullopt for another.
std::optional<KvCacheType> ParseKvCacheType(std::string_view name);
std::string_view KvCacheTypeName(KvCacheType type);
// Bytes a key or value element takes.
inline int64_t KvCacheTypeBytes(KvCacheType type) { return type == KvCacheType::kF32 ? 4 : 2; }

// Keys and values of every layer for positions 0 .. length-1. Layout per layer: values (G,
// capacity, D), so that each kv head's rows are contiguous for the attention kernel; keys
// (slots, G, capacity, D): one copy per key slot of the method (see above), two at most.
// Layer l's keys and values are those of its own plan (the layers of a trained layout may differ).
// Each of keys and values is float32 or 16-bit (KvCacheTypes); 16-bit ones are not kept under the
// streaming cache (its kept keys are rotated again in place), which refuses them.
class KvCache {
 public:
  KvCache(const ModelConfig& config, int64_t capacity, KvCacheTypes types = {});

  int64_t capacity() const { return capacity_; }
  int64_t length() const { return length_; }
  void Clear() {
    length_ = 0;
    method_.clear();
  }
  // Forgets every position from `length` on (keeps 0 .. length-1).
  void Truncate(int64_t length);
  // Bytes held by the cache.
  int64_t Bytes() const;
  static int64_t BytesFor(const ModelConfig& config, int64_t capacity, KvCacheTypes types = {});
  KvCacheTypes types() const { return types_; }

  // Keys of key slot `slot` (0 .. key_slots(layer) - 1) of a layer, (G, capacity, D); float32
  // keys only (types().k kF32).
  float* Keys(int layer, int slot = 0);
  int key_slots(int layer) const { return key_slots_[static_cast<size_t>(layer)]; }
  // float32 values only (types().v kF32).
  float* Values(int layer);

 private:
  friend class Transformer;
  size_t SlotFloats() const { return static_cast<size_t>(capacity_) * kv_dim_; }
  void EnsureKeySlots(int layer, int slots);
  int64_t capacity_ = 0;
  int kv_dim_ = 0;
  KvCacheTypes types_;
  std::vector<int> key_slots_;  // per layer
  int64_t length_ = 0;
  std::string method_;  // canonical spec of the resolved method the cached keys were made under
  // In huge pages where the kernel grants them: a decoded token reads every layer's whole cache.
  std::vector<HugePageVector<float>> k_, v_;         // float32 keys / values (else empty)
  std::vector<HugePageVector<uint16_t>> k16_, v16_;  // 16-bit keys / values (else empty)
};

// How a position method applies to a layer (the rule at the top of this file).
enum class LayerMethodUse {
  kMethod,         // full attention with RoPE: the method as it is
  kMaskAndLogn,    // full attention without RoPE (NoPE, ALiBi, KERPLE, Sandwich): mask, +logn
  kTrainedWindow,  // trained with a window or chunks: those and plain RoPE (if any); no method
};
LayerMethodUse MethodUseOf(const LayerAttention& layer);
// The model's RoPE as MakeAttentionPlan takes it: training length, head dim, base, PI factor.
RopeGeometry ModelGeometry(const ModelConfig& config);
// Layer l's: its own base and PI factor where it has them (LayerLayout), else the model's.
RopeGeometry LayerGeometry(const ModelConfig& config, int l);
// The layers' positions, windows or chunks, own RoPE and temperature, runs of equal layers merged:
// "layers 0-2: rope base 10000, window 64; layer 3: rope, full".
std::string AttentionLayoutText(const ModelConfig& config);
// One layer: "rope, window 64", "nope, full, temperature", "rope base 10000 pi 8, chunks of 32"
// (base and pi shown where they are the layer's own).
std::string LayerAttentionText(const ModelConfig& config, int l);
// The layout's other variants (p-RoPE, XPOS, Sandwich, SSMax, per-position lambda), "; "
// separated; "" when none.
std::string AttentionVariantsText(const ModelConfig& config);

// Whether a resolved method changes how q and k are rotated, against plain RoPE at `model_base`:
// frequency scaling, a dynamic scale, a relative map, or another base. Masks (window, Lambda,
// blockwise) and +logn do not.
bool MethodChangesRope(const AttentionPlan& method_plan, double model_base);
// The layers of `method_plan` that run a method of their own (AttentionPlan::layer_methods), each
// resolved for its layer: " [layer 0: rerope:window=64,base=10000]"; empty when there are none.
std::string LayerMethodsText(const ModelConfig& config, const AttentionPlan& method_plan);

// Throws stretch::Error when the method changes RoPE and no layer of `config` takes it (no
// full-attention RoPE layer), naming the method, what it changes, the layers and what is allowed;
// and when a layer of layer_methods is not one of the model's full-attention RoPE layers, is
// given twice, or its method does not resolve (or is the streaming cache, which runs on every
// layer or none).
void CheckMethodFitsLayout(const ModelConfig& config, const AttentionPlan& method_plan);

// A note for a method whose `+logn` multiplies logits that the model's own trained log-n
// (AttentionConfig::log_length_scale) already multiplies by ln(n) / ln L, so that beyond L they
// take about the square of that factor; empty otherwise (no +logn, no trained log-n, or a context
// of at most L, where +logn is 1). Not an error: the lab scores such cells on purpose.
std::string DoubleLogNNote(const ModelConfig& config, const AttentionPlan& method_plan);

// Layer l's plan under a method resolved as `method_plan` (MakeAttentionPlan for the model's
// geometry), by the rule above: its mask, relative map, frequencies (p-RoPE's pairs unrotated),
// XPOS's decay, logit scale, bias (ALiBi's slopes, Sandwich's table; KERPLE's from
// `layer_weights`, which may be null when only the shape of the plan is wanted), SSMax's s (from
// `layer_weights` too), the per-position lambda and QueryNorm / KeyNorm. Per-head values are
// given per position head and repeated for a GAU's R kernel heads.
// The trainer (src/train/transformer_train.h) builds its layers' plans here too, from the values
// of its parameters and the method it trains with (its relative map and log-n).
struct LayerHeadValues {
  std::vector<double> bias_a, bias_b;  // KERPLE's a_h, b_h: position_heads() each, or empty
  std::vector<double> ssmax;           // SSMax's s_h: position_heads(), or empty
};
AttentionPlan LayerAttentionPlan(const ModelConfig& config, int l, const AttentionPlan& method_plan,
                                 const LayerHeadValues& values);
AttentionPlan LayerAttentionPlan(const ModelConfig& config, const LayerWeights* layer_weights,
                                 int l, const AttentionPlan& method_plan);

class Transformer {
 public:
  // Keeps a reference to `model`, which must outlive the Transformer. Throws stretch::Error when
  // the model's attention layout is inconsistent (ValidateAttentionLayout).
  explicit Transformer(const Model& model);

  const ModelConfig& config() const { return model_.config; }
  const Model& model() const { return model_; }

  // Selects the position method for the calls that follow, resolved for a context of `fed_len`
  // tokens (L': for scoring the window length, for generation prompt + new tokens; it fixes the
  // scale s = L'/L of methods given no factor). Throws stretch::Error when the method does not fit
  // the model or the context, or, for a trained layout, changes RoPE on a model that has no
  // full-attention RoPE layer (CheckMethodFitsLayout). The default is `direct` (plain RoPE). A
  // KvCache filled under one method is refused under another: clear it first.
  void SetMethod(const Method& method, int64_t fed_len);
  // The same with the method already resolved (MakeAttentionPlan for this model's Geometry(), as
  // PlanSweep does once per cell). Throws stretch::Error when the plan was made for another
  // geometry or does not fit the layout (CheckMethodFitsLayout).
  void SetPlan(AttentionPlan plan);
  // The method as resolved for the call (what full-attention RoPE layers run, but those with a
  // method of their own, plan().layer_methods).
  const AttentionPlan& plan() const { return plan_; }
  // What layer l runs (plan() itself for every layer of a LLaMA model).
  const AttentionPlan& layer_plan(int l) const { return layers_[static_cast<size_t>(l)].plan; }
  RopeGeometry Geometry() const;

  // Runs `tokens` at positions cache.length() .. cache.length() + T - 1, appends their keys and
  // values to the cache, and writes the final-normed hidden states (T, C) to `hidden`
  // (resized). Long inputs are processed in chunks of kDefaultPrefillChunk tokens (or
  // set_prefill_chunk's) so that activation memory stays O(chunk * (C + F)); the chunk size
  // changes the result by float rounding only (products over another number of rows).
  // Under the streaming cache (method `streaming`, AttentionPlan::Streaming) the cache never
  // fills: when the next chunk would not fit, it drops the oldest window tokens, keeping the
  // sinks and the last window - 1, and rotates the kept keys to their new places, so that
  // positions stay below sinks + window; cache.length() is then the cache's length, not the
  // text's. Its capacity must exceed sinks + window - 1 (StreamingCacheCapacity).
  // With rows = kLast, `hidden` gets only the last token's state (1, C), all that generation
  // needs: the last layer then skips its output projection and FFN for every other token (their
  // keys and values still go to the cache; llama.cpp skips that layer's FFN alike: build_llama's
  // ggml_get_rows with inp_out_ids), and only one chunk's hidden states are held. That row
  // equals kAll's last row within float rounding (its products run on another number of rows),
  // not bit for bit; the cache is the same bit for bit.
  enum class Rows { kAll, kLast };
  void Forward(std::span<const int> tokens, KvCache& cache, std::vector<float>& hidden,
               Rows rows = Rows::kAll);
  // The KV cache capacity for the streaming cache under the current method: sinks + 2 window -
  // 1 (the cache drops its oldest tokens once per window - 1 new ones). 0 for other methods.
  int64_t StreamingCacheCapacity() const;

  // Runs a whole sequence from position 0 without a KV cache, one layer at a time over all of it
  // (in chunks of kDefaultSequenceChunk tokens, or set_prefill_chunk's): memory is the (T, C)
  // hidden states, one layer's keys and values (T, 2 G D) and a chunk's scratch, instead of
  // every layer's keys and values. Gives the same hidden states as Forward on an empty cache
  // (within float rounding). For scoring long windows.
  // With first_row > 0 only rows first_row .. T - 1 of `hidden` are written (the others are left
  // unspecified): what a protocol that scores only the end of a sequence needs (far copy, passkey,
  // a fixed tail). The last layer then makes the keys and values of rows 0 .. first_row - 1 (the
  // rows after it attend to them) but runs no attention, output projection or FFN for them, as
  // Forward's Rows::kLast does for all rows but the last; a GAU last layer runs every row. The
  // rows kept equal first_row = 0's within float rounding (the last layer runs them as a chunk of
  // their own), not bit for bit.
  void ForwardSequence(std::span<const int> tokens, std::vector<float>& hidden,
                       int64_t first_row = 0);

  // logits (T, V) = hidden (T, C) Wcls^T.
  void Logits(const float* hidden, int64_t T, float* logits) const;

  // Another Transformer on the same model, under the same method, prefill chunk and key/value
  // types, with scratch of its own: several of them run windows on several threads at once.
  Transformer Fork() const;

  // The key/value types ForwardSequence rounds its keys and values through, so that scoring sees
  // what a KvCache of those types would hold (Forward takes the cache's own types). Default
  // float32: no rounding.
  void set_kv_types(KvCacheTypes types) { kv_types_ = types; }
  KvCacheTypes kv_types() const { return kv_types_; }

  // Tokens per chunk by default: Forward's 512 (llama.cpp's default micro-batch, n_ubatch), so
  // that a long prompt's activations stay small beside the weights and the cache (a 1B model's
  // 2,048-token chunk took 0.2 GB, a fifth of its Q4_K_M file, with the same prefill speed);
  // ForwardSequence's 2048 (scoring, which holds a whole window's hidden states anyway).
  static constexpr int64_t kDefaultPrefillChunk = 512;
  static constexpr int64_t kDefaultSequenceChunk = 2048;
  // Tokens per chunk of both Forward and ForwardSequence.
  void set_prefill_chunk(int64_t chunk) { prefill_chunk_ = sequence_chunk_ = chunk; }
  // Activation bytes a chunk of T tokens needs (for `stretch inspect`).
  static int64_t ActivationBytes(const ModelConfig& config, int64_t T);

 private:
  // How the layers that rotate alike rotate a chunk: the method's rotation (full-attention RoPE
  // layers) and plain RoPE (RoPE layers trained with a window or chunks), at each RoPE base and
  // interpolation the layers have (one of each for a model without per-layer RoPE).
  struct Rotation {
    int plan_layer = -1;    // a layer whose plan defines it
    RopeTable rope;         // plan KeysRotatedOnce: this chunk's rotation
    RotationTables tables;  // otherwise (static): the kernel's tables
  };
  struct LayerRun {
    AttentionPlan plan;
    int rotation = 0;   // index into rotations_, or -1: q and k are never rotated
    int key_slots = 1;  // copies of each key the cache holds (1, or 2 for a map with two
                        // key slots and lambda on RoPE layers)
  };

  void CheckTokens(std::span<const int> tokens, int64_t pos0) const;
  void Embed(const int* tokens, int64_t T, float* x) const;
  // Prepares rotation r for a chunk of T queries at pos0 (keys 0 .. pos0 + T - 1).
  void PrepareRotation(int r, int64_t pos0, int64_t T);
  // The streaming cache is full: keep the sinks and the last window - 1 tokens (Forward).
  void DropOldestWindow(KvCache& cache);
  // One Transformer block on the chunk x (T, C) at positions pos0..: appends its keys and values
  // to kc (the layer's key slots x (G, cap, D)) and vc ((G, cap, D)), positions < pos0 already
  // there, and updates x in place: its last out_rows rows (all with -1; LlamaBlockForward). A
  // GAU layer updates every row whatever out_rows says.
  // Where a layer's keys and values go: float32 rows (k, v) or 16-bit ones (k16, v16; the other
  // of each pair null), `cap` rows per kv head; float32 rows are rounded through `types` as they
  // are stored (ForwardSequence's emulation of a 16-bit cache).
  struct KvStore {
    float* k = nullptr;
    float* v = nullptr;
    uint16_t* k16 = nullptr;
    uint16_t* v16 = nullptr;
    int64_t cap = 0;
    KvCacheTypes types;
  };
  void Layer(int l, float* x, int64_t T, int64_t pos0, const KvStore& kv, int64_t out_rows = -1);
  // Layer l's attention of the chunk: queries q_ (T, H*D) and new keys and values kv_tmp_
  // ((T, G*D) each) -> att_ (T, H*D); rotates them as the layer's plan says and appends the keys
  // and values to the layer's store (see Layer).
  // With queries false it only stores the keys and values (no row of the chunk is read after
  // the layer: Layer's out_rows 0).
  void Attend(int l, int64_t T, int64_t pos0, const KvStore& kv, bool queries = true);
  void ReserveScratch(int64_t T);
  int MaxKeySlots() const;

  const Model& model_;
  AttentionPlan plan_;
  std::string method_key_;        // CanonicalSpec of plan_.method, LayerMethodsText of its layers
  std::vector<LayerRun> layers_;  // n_layers
  std::vector<Rotation> rotations_;
  AlignedVector<float> seq_k_, seq_v_;  // ForwardSequence: one layer's keys and values
  KvCacheTypes kv_types_;               // ForwardSequence's rounding (set_kv_types)
  // 16-bit caches: the layer's keys (slots, G, S, D) and values (G, S, D) widened for the kernel
  // (written and read whole for every layer of every decoded token: huge pages, as the cache).
  HugePageVector<float> wide_k_, wide_v_;
  int64_t prefill_chunk_ = kDefaultPrefillChunk;
  int64_t sequence_chunk_ = kDefaultSequenceChunk;
  // Scratch, reused across calls (sized for the largest chunk seen).
  AlignedVector<float> xb_, q_, att_, h1_, h3_, kv_tmp_;
  AlignedVector<float> gau_qk_;  // the GAU's Q and K (T, S) each, before their R copies
  std::vector<float> ones_;      // (C) the GAU's norms' gain of 1
};

}  // namespace stretch
