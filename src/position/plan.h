// A method resolved for one call: the concrete data the attention kernel consumes.
//
// RoPE in relative form: <R(a) q, R(b) k> = <R(a - b) q, k>, so a pair scored with q rotated at
// "query position" a and k rotated at "key position" b sees relative position a - b. Every
// relative map of src/position/method.h is piecewise, and on each piece (a "segment") the query
// position depends on i only and the key position on j only:
//
//   map            segment 0 (near)          segment 1 (far)                        when far
//   identity       a = i,     b = j          -                                      never
//   rerope(w)      a = i,     b = j          a = w,                  b = 0          i - j >= w
//   leaky(w, k)    a = i,     b = j          a = w + (i - w) / k,    b = j / k      i - j >= w
//   self-extend    a = i,     b = j          a = fl(i/G) + W - fl(W/G), b = fl(j/G)  i - j >= W
//   string(S, W)   a = i,     b = j          a = i - S + W,          b = j          i - j >= S
//
// so a - b is exactly the min(i - j, w), w + (i - j - w)/k, floor(i/G) - floor(j/G) + W -
// floor(W/G), and i - j - S + W. Dual Chunk Attention (ChunkLlama, github.com/HKUNLP/ChunkLlama,
// chunkllama_attn_replace.py) cuts positions into chunks of c = chunk_size - local_window tokens;
// keys sit at b = j mod c and the query's position depends on how many chunks back the key is:
//   segment 0, same chunk:      a = i mod c
//   segment 1, previous chunk:  a = min(i mod c + c, chunk_size)
//   segment 2, older chunks:    a = min(2c - 1, chunk_size)   (the successive map at i mod c = c-1)
// A tile of (query, key) positions is classified by the segments it touches: most tiles touch
// one, and only tiles along a boundary compute two scores and pick per element.
//
// Lambda (sinks + window) keeps plain RoPE inside the window and sees a sink outside the window at
// distance `window`: that is rerope(window) restricted to the keys the Lambda mask lets through.
#pragma once

#include <cstdint>
#include <vector>

#include "src/position/method.h"
#include "src/position/rope.h"

namespace stretch {

// The most key slots a relative map uses (ReRoPE, Leaky ReRoPE, Self-Extend: near and far).
inline constexpr int kMaxKeySlots = 2;

struct PositionMap {
  RelMapKind kind = RelMapKind::kIdentity;
  int64_t window = 0;      // w / W / DCA's local window
  double k = 1.0;          // Leaky ReRoPE
  int64_t group = 1;       // Self-Extend
  int64_t shift = 0;       // STRING
  int64_t chunk_size = 0;  // DCA
  int64_t chunk_len = 0;   // DCA: chunk_size - local window

  int Segments() const;
  int SegmentOf(int64_t i, int64_t j) const;
  // The first key position after j where SegmentOf(i, .) may change (keys j .. end-1 share j's
  // segment), so a kernel picks segments by runs of keys, not key by key.
  int64_t SegmentRunEnd(int64_t i, int64_t j) const;
  // Bit s set when some pair (i, j) with i in [q_lo, q_hi], j in [k_lo, k_hi], j <= i, falls in
  // segment s (a superset is allowed; never a subset).
  uint32_t SegmentsIn(int64_t q_lo, int64_t q_hi, int64_t k_lo, int64_t k_hi) const;
  double QueryPos(int seg, int64_t i) const;
  double KeyPos(int seg, int64_t j) const;
  // Key slots: the distinct key-position functions among the segments (rerope: j and 0; leaky:
  // j and j/k; self-extend: j and floor(j/G); string: j; dca: j mod c). Under a static plan a key
  // is rotated once per slot and cached that way.
  int KeySlots() const;  // at most kMaxKeySlots
  int KeySlot(int seg) const;
  bool SlotIsUnrotated(int slot) const;  // key position 0 for every key (rerope's far keys)
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

struct AttentionPlan {
  Method method;  // resolved: every default filled in
  RopeGeometry geo;
  int64_t fed_len = 0;   // L'
  bool dynamic = false;  // per-query frequencies (dynamic-ntk, dynamic-yarn)
  RopeFrequencies freq;  // static methods: the call's frequencies; dynamic: at s = 1
  PositionMap map;
  MaskKind mask = MaskKind::kCausal;
  int64_t window = 0;  // kWindow, kLambda, kBlock (the block: two half-blocks)
  int64_t sinks = 0;   // kLambda
  bool logn = false;
  // Models trained with them (the training issue): an additive bias, and L2-normalized queries
  // and/or keys (QueryNorm, KeyNorm; both with the caller's scale = lambda: cosine attention).
  AttentionBias bias;
  bool query_norm = false;
  bool key_norm = false;
  // Cosine attention with a per-position lambda (the seeds' second choice, beside a constant
  // lambda = 4 ln(L/2) given as the scale): the logits of query i are also multiplied by
  // ln(n_i / 2), n_i = i + 1 the number of keys a causal query sees, so that with scale 4 the
  // row's lambda is 4 ln(n_i / 2). (Row 0 sees one key, so its negative factor changes nothing.)
  bool position_log_scale = false;
  // SSMax (Nakanishi 2025, "Scalable-Softmax Is Superior for Attention", arXiv 2501.19399): the
  // logits of head h at query i times s_h ln(n_i), n_i = i + 1, with s_h learned per head.
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

  // Keys keep one rotation forever (static frequencies, identity map): the KV cache may hold
  // keys after RoPE and the kernel rotates nothing.
  bool KeysRotatedOnce() const { return !dynamic && map.kind == RelMapKind::kIdentity; }
  bool Visible(int64_t i, int64_t j) const;
  // The first key query i may see (nondecreasing in i): the window's or half-block's start, else 0.
  int64_t FirstVisibleKey(int64_t i) const;
  // Frequencies query i uses (dynamic: at s_i = max(L, i + 1) / L).
  RopeFrequencies FrequenciesAt(int64_t i) const;
  // What multiplies the logits of query i beyond 1/sqrt(D): attention_factor^2 (of query i when
  // dynamic) times max(1, ln(i + 1) / ln L) with +logn, times ln((i + 1) / 2) with
  // position_log_scale.
  double LogitScale(int64_t i) const;
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
