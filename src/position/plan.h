// A method resolved for one call: the concrete data the attention kernel consumes.
//
// RoPE in relative form: <R(a) q, R(b) k> = <R(a - b) q, k>, so a pair scored with q rotated at
// "query position" a and k rotated at "key position" b sees relative position a - b. Every
// relative map (src/position/rel_map.h, one file each in src/position/maps/) is piecewise, and on
// each piece (a "segment") the query position depends on i only and the key position on j only;
// segment 0 of every map is the identity near the diagonal, a = i and b = j, but for the chunked
// map, whose positions restart every chunk. Each map's file gives its segments and shows that
// a - b is the map's definition. A tile of (query, key) positions is classified by the segments it
// touches: most tiles touch one, and only tiles along a boundary compute two scores and pick per
// element.
//
// Lambda (sinks + window) keeps plain RoPE inside the window and sees a sink outside the window at
// distance `window`: that is the map that clamps at its window, min(i - j, window) (ClampMap),
// restricted to the keys the Lambda mask lets through.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "src/position/method.h"
#include "src/position/rel_map.h"
#include "src/position/rope.h"

namespace stretch {

// The longest context any command takes (--ctx, --length, -n ...): 2^28 = 268,435,456 tokens.
// Far beyond what fits in memory at any model size (stories260K's key/value cache alone would
// take 320 GB there), it keeps positions within int32 everywhere and bounds the work that a
// method's plan does per position (a context of 10^19 planned for hours before this limit).
inline constexpr int64_t kMaxContext = int64_t{1} << 28;

// The most key slots a relative map uses (near and far).
inline constexpr int kMaxKeySlots = 2;

// A relative map resolved for a call: its descriptor and its parameters (which of window, ints
// and real it uses is its file's). The functions go through the descriptor.
struct PositionMap {
  const RelMapDescriptor* map = &rel_maps::identity_map;
  int64_t window = 0;
  std::array<int64_t, 2> ints{};
  double real = 1.0;

  bool IsIdentity() const { return map->IsIdentity(); }
  int Segments() const { return map->segments; }
  int SegmentOf(int64_t i, int64_t j) const { return map->segment_of(*this, i, j); }
  // The first key position after j where SegmentOf(i, .) may change (keys j .. end-1 share j's
  // segment), so a kernel picks segments by runs of keys, not key by key.
  int64_t SegmentRunEnd(int64_t i, int64_t j) const { return map->segment_run_end(*this, i, j); }
  // Bit s set when some pair (i, j) with i in [q_lo, q_hi], j in [k_lo, k_hi], j <= i, falls in
  // segment s (a superset is allowed; never a subset).
  uint32_t SegmentsIn(int64_t q_lo, int64_t q_hi, int64_t k_lo, int64_t k_hi) const {
    return map->segments_in(*this, q_lo, q_hi, k_lo, k_hi);
  }
  double QueryPos(int seg, int64_t i) const { return map->query_pos(*this, seg, i); }
  double KeyPos(int seg, int64_t j) const { return map->key_pos(*this, seg, j); }
  // Key slots: the distinct key-position functions among the segments (e.g. j for the near keys
  // and another function of j for the far ones). Under a static plan a key is rotated once per
  // slot and cached that way.
  int KeySlots() const { return map->key_slots; }  // at most kMaxKeySlots
  int KeySlot(int seg) const { return map->slot_of[static_cast<size_t>(seg)]; }
  // Key position 0 for every key (a map whose far keys all sit at 0).
  bool SlotIsUnrotated(int slot) const { return slot == map->unrotated_slot; }
  // The relative position the model sees, QueryPos - KeyPos of the pair's segment.
  double RelPos(int64_t i, int64_t j) const;
};

// Additive position biases of models trained with them, per query head h and distance d = i - j
// (>= 0), in natural-log units (added to the scaled logit):
//   ALiBi (Press et al. 2022, arXiv 2108.12409):          -a_h d          (a_h: the head's slope)
//   KERPLE log (Chi et al. 2022, arXiv 2205.09921):       -a_h log(1 + b_h d)   (a_h, b_h > 0)
//   KERPLE power (same paper):                            -a_h d^(b_h)          (a_h > 0, 0 < b_h <= 2)
//   Sandwich (Chi et al. 2023, arXiv 2212.10356):         a_h p_i . p_j = a_h sum_{t < dim/2} cos(d w_t)
//     the inner product of two sinusoidal position embeddings (Vaswani et al. 2017) of dimension
//     `dim`, w_t = 10000^(-2t/dim), which depends on d only; a_h is the head's lambda. A constant
//     added to every logit of a row does not change the softmax, so no offset is added.
enum class BiasKind { kNone, kAlibi, kKerpleLog, kKerplePower, kSandwich };
struct AttentionBias {
  BiasKind kind = BiasKind::kNone;
  std::vector<double> a, b;   // per query head
  int dim = 0;                // Sandwich: the sinusoidal embedding's dimension (even)
  std::vector<double> table;  // Sandwich: sum_t cos(d w_t) for d < table.size() (SandwichBias)
  double Value(int head, int64_t distance) const;
};
// Sandwich with per-head lambdas, tabulated for distances below max_distance (beyond, Value sums
// the cosines directly).
AttentionBias SandwichBias(std::vector<double> lambdas, int dim, int64_t max_distance);
// sum_{t < dim/2} cos(d 10000^(-2t/dim)), in double.
double SandwichSum(int dim, int64_t distance);
// ALiBi's slopes for n heads (Press et al., section 3): 2^(-8 h / n) for h = 1 .. n when n is a
// power of two; otherwise those of the next lower power of two m, then every other slope of 2m.
std::vector<double> AlibiSlopes(int n_heads);

// Blockwise causal attention with half-blocks of h positions: the first key query i sees, the start
// of the half-block before its own.
inline int64_t BlockKeyBegin(int64_t i, int64_t h) { return i / h >= 1 ? (i / h - 1) * h : 0; }
// Chunked attention with chunks of c positions: the first key query i sees, its chunk's start.
inline int64_t ChunkKeyBegin(int64_t i, int64_t c) { return i / c * c; }

struct AttentionPlan {
  Method method;     // resolved: every default filled in
  Method requested;  // as given to MakeAttentionPlan (a layer with its own RoPE base resolves it
                     // again for its geometry: LayerAttentionPlan)
  RopeGeometry geo;
  int64_t fed_len = 0;   // L'
  bool dynamic = false;  // per-query frequencies (dynamic-ntk, dynamic-yarn)
  RopeFrequencies freq;  // static methods: the call's frequencies; dynamic: at s = 1
  PositionMap map;
  MaskKind mask = MaskKind::kCausal;
  int64_t window = 0;  // kWindow, kLambda, kBlock (the block: two half-blocks), kChunk (the chunk)
  int64_t sinks = 0;   // kLambda
  bool logn = false;
  // Models trained with them (the training issue): an additive bias, and L2-normalized queries
  // and/or keys (QueryNorm, KeyNorm; both with the caller's scale = lambda: cosine attention).
  AttentionBias bias;
  // Gemma 2's attention logit soft-capping (ModelConfig::attn_softcap): every score, after its
  // scales and bias, becomes cap tanh(score / cap) before the mask. 0: off. Inference only.
  double softcap = 0.0;
  bool query_norm = false;
  bool key_norm = false;
  // Cosine attention with a per-position lambda (Su Jianlin's second choice, beside a constant
  // lambda = 4 ln(L/2) given as the scale): the logits of query i are also multiplied by
  // ln(n_i / 2), n_i = VisibleKeys(i) the number of keys the query sees (i + 1 when causal), so
  // that with scale 4 the row's lambda is 4 ln(n_i / 2). (Row 0 sees one key, so its negative
  // factor changes nothing.)
  bool position_log_scale = false;
  // Trained log-n (ModelConfig's attention.log_length_scale): times ln(n_i) / ln L, n_i =
  // VisibleKeys(i). The n of Su's entropy argument for log-n (kexue.fm/archives/8823) is the
  // number of keys the softmax runs over: i + 1 for a causal query, as the model was trained,
  // but at most the window (plus sinks) under a local mask, which therefore keeps the sharpness
  // the model learnt within L instead of ln(i + 1) / ln L > 1 at every query beyond L.
  bool log_length_scale = false;
  // Llama 4's attention temperature tuning (Meta's llama-models and HF modeling_llama4: on the
  // layers without RoPE, q at position i times ln(floor((i + 1) / floor_scale) + 1) * scale + 1,
  // which is 1 for the first floor_scale - 1 positions and grows as ln i beyond): query i's logits
  // times that. temperature_floor 0: off.
  double temperature_floor = 0.0;
  double temperature_scale = 0.0;
  // SSMax (Nakanishi 2025, "Scalable-Softmax Is Superior for Attention", arXiv 2501.19399): the
  // logits of head h at query i times s_h ln(n_i), n_i = VisibleKeys(i) the size of the
  // softmax's input (i + 1 when causal), with s_h learned per head.
  // Empty: off. (Per head, so it is not part of LogitScale; the kernel scales q by it.)
  std::vector<double> ssmax;
  // XPOS (Sun et al. 2022, arXiv 2212.10554; torchscale component/xpos_relative_position.py):
  // RoPE whose pair t of a query at position a is also scaled by zeta_t^(a/gamma) and of a key at
  // b by zeta_t^(-b/gamma), zeta_t = (2t + 0.4 d) / (1.4 d) with d the rotary dim, gamma the scale
  // base; so pair t of a score decays as zeta_t^((a - b)/gamma). 0: off.
  double xpos_scale_base = 0.0;
  // log2(zeta_t) / gamma per rotary pair (empty when XPOS is off).
  std::vector<double> XposLog2Decay() const;
  // p-RoPE (Barbero et al. 2024, arXiv 2410.06205): only the first `rotated_pairs` pairs (the
  // fastest frequencies) rotate; the others keep theta 0 (cos 1, sin 0), in `freq` and in
  // FrequenciesAt alike. -1: every pair rotates.
  int rotated_pairs = -1;
  // Sets rotated_pairs and zeroes freq.thetas from it on.
  void LeavePairsUnrotated(int rotated);
  // Another method on some full-attention RoPE layers of the model (layer index -> method, as
  // requested; `stretch score --layer-method L=SPEC`): that layer runs MakeAttentionPlan of it for
  // the layer's geometry and this plan's fed_len (LayerAttentionPlan), the others this plan. A
  // diagnostic: which layer a method helps or hurts (docs/training.md, thirty-fifth round). Empty:
  // every layer as the model's layout says.
  std::vector<std::pair<int, Method>> layer_methods;

  // Keys keep one rotation forever (static frequencies, identity map): the KV cache may hold
  // keys after RoPE and the kernel rotates nothing.
  bool KeysRotatedOnce() const { return !dynamic && map.IsIdentity(); }
  // The streaming cache (method `streaming`): positions are the cache's, so a full KV cache drops
  // its oldest window tokens, keeping the sinks and the last window - 1 (Transformer::Forward).
  bool Streaming() const { return map.map->mask_only; }
  bool Visible(int64_t i, int64_t j) const;
  // The first key query i may see (nondecreasing in i): the window's or half-block's start, else 0.
  int64_t FirstVisibleKey(int64_t i) const;
  // How many keys query i sees under the mask: i + 1 when causal, at most the window's width
  // (plus the sinks) when masked. The n of the trained log-n scales below.
  int64_t VisibleKeys(int64_t i) const;
  // Frequencies query i uses (dynamic: at s_i = max(L, i + 1) / L).
  RopeFrequencies FrequenciesAt(int64_t i) const;
  // What multiplies the logits of query i beyond 1/sqrt(D): attention_factor^2 (of query i when
  // dynamic) times max(1, ln(i + 1) / ln L) with +logn (by position, as Qwen's logn_attn), times
  // ln(n_i / 2) with position_log_scale, ln(n_i) / ln L with log_length_scale (n_i =
  // VisibleKeys(i)), and the temperature above (by position, as Llama 4 defines it).
  double LogitScale(int64_t i) const;
  // Whether LogitScale(i) may differ from 1 (the kernel then scales each query row).
  bool HasRowScale() const {
    return logn || dynamic || freq.attention_factor != 1.0 || position_log_scale ||
           log_length_scale || temperature_floor > 0.0;
  }
};

// Resolves `m` for a call of fed_len tokens (ResolveMethod, then the data above). Throws
// stretch::Error for a method that does not fit the model or the call.
AttentionPlan MakeAttentionPlan(const Method& m, const RopeGeometry& geo, int64_t fed_len);

// Rotation tables for one chunk of T positions pos0 .. pos0 + T - 1 (static plans): for each
// segment, cos/sin of QueryPos(seg, i) * theta_t (the kernel rotates q per segment), and for each
// key slot, cos/sin of the slot's key position (the model rotates each new key once per slot and
// caches it: a key's rotation under a static plan never changes). Angles in double, rounded to
// float.
class RotationTables {
 public:
  void Prepare(const AttentionPlan& plan, int64_t pos0, int64_t T);

  int pairs() const { return pairs_; }
  int64_t pos0() const { return pos0_; }
  // (T, pairs) tables, row r for position pos0 + r.
  const RopeTable& Query(int seg) const { return q_[static_cast<size_t>(seg)]; }
  const RopeTable& Key(int slot) const { return k_[static_cast<size_t>(slot)]; }

 private:
  int pairs_ = 0;
  int64_t pos0_ = 0;
  std::vector<RopeTable> q_, k_;
};

}  // namespace stretch
