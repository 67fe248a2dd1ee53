// Position methods as plain data: what a user selects with `--method SPEC`, and the frequency
// math that turns a method into RoPE angles for one call.
//
// Notation (used in every comment of src/position): L the training length (the
// checkpoint's seq_len), L' the length fed in this call, s = L'/L the scale, d the rotary dim,
// theta_t = base^(-2t/d) for pair t = 0 .. d/2 - 1, i a query position, j a key position.
//
// A method has four independent parts (../shared/DESIGN.md, "Position schemes are data"):
//   rope:    how the frequencies theta_t are scaled (none, PI, NTK, YaRN, llama3, LongRoPE), and
//            whether the scale is fixed for the call or dynamic per query position;
//   rel map: which relative position a (query, key) pair is rotated by (the identity i - j, or
//            one of the maps of src/position/maps/);
//   mask:    which keys a query sees (causal, sliding window, Lambda / attention sinks,
//            blockwise causal);
//   logn:    whether logits are scaled by max(1, ln(i + 1) / ln L).
// The spec grammar: `name[:key=value,...][+logn]`, e.g. `yarn:factor=4+logn`.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stretch {

enum class RopeScaling {
  kNone,      // plain RoPE (`direct`)
  kLinear,    // position interpolation (`pi`): theta_t / s
  kNtk,       // NTK-aware (`ntk`): base * s^(d/(d-2))
  kNtkFixed,  // RoPE as a beta-base encoding (`ntk-fixed`): base * s
  kYarn,      // YaRN (`yarn`), HF transformers' _compute_yarn_parameters
  kLlama3,    // Llama 3.1 frequency rule (`llama3`)
  kLongRope,  // HF's LongRoPE (`longrope`): short/long per-frequency factor lists
};

// kStatic: one scale s for the whole call. kDynamic: query i uses s_i = max(L, i + 1) / L and sees
// every key rotated with its own frequencies (`dynamic-ntk`, `dynamic-yarn`).
enum class ScaleMode { kStatic, kDynamic };

struct RopeMethod {
  RopeScaling scaling = RopeScaling::kNone;
  ScaleMode mode = ScaleMode::kStatic;
  double factor = 0.0;  // s; 0: not given, s = max(1, L'/L) for the call
  double base = 0.0;    // 0: the model's rope base; `direct:base=B` (and others) override it
  // YaRN (HF names). 0 means "not given" for the optional ones.
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 0.0;  // 0: computed from mscale / mscale_all_dim or 0.1 ln s + 1
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  bool truncate = true;
  int64_t original_length = 0;  // `orig`; 0: L
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // LongRoPE: d/2 factors each; long_factor used when the sequence is longer than the original
  // length, else short_factor: per call (L', `longrope`) or per query (i + 1, `dynamic-longrope`).
  std::vector<double> short_factor, long_factor;
};

// A relative map (src/position/rel_map.h): one descriptor per map, in src/position/maps/.
struct RelMapDescriptor;
namespace rel_maps {
extern const RelMapDescriptor identity_map;  // i - j
}  // namespace rel_maps

struct RelMapMethod {
  const RelMapDescriptor* map = &rel_maps::identity_map;
  // The map's window (its file says which); 0: default.
  int64_t window = 0;
  // The map's other parameters, named by its keys (RelKey); 0: default.
  std::array<int64_t, 2> ints{};
  double real = 0.0;
  bool IsIdentity() const;
  // A parameter by its spec key (`window`, or one of the map's keys); checks the key exists.
  double Param(std::string_view key) const;
  void SetParam(std::string_view key, double value);
};

enum class MaskKind {
  kCausal,  // key j visible to query i when j <= i
  kWindow,  // and i - j < window
  kLambda,  // and (i - j < window or j < sinks); a sink outside the window is at distance window
  kBlock,   // blockwise causal (LEX / XPOS): half-blocks of h = window / 2 positions; and
            // floor(i/h) - floor(j/h) <= 1 (its own half-block and the one before it)
  kChunk,   // chunked attention (Llama 4's local layers): and floor(i/c) == floor(j/c), c = window:
            // the text is cut into chunks of c positions and a query sees its own chunk only
};

struct MaskMethod {
  MaskKind kind = MaskKind::kCausal;
  int64_t window = 0;  // 0: L
  int64_t sinks = 0;   // Lambda's n; 0: default
};

struct Method {
  RopeMethod rope;
  RelMapMethod rel;
  MaskMethod mask;
  bool logn = false;
};

// Parses a spec (`direct`, `pi:factor=4`, `yarn:factor=8,beta_fast=32+logn`, ...). Throws
// stretch::Error naming the field, the value found and what is allowed (unknown name or key,
// a malformed number, a factor below 1, a group that is not a positive integer, ...).
// `also_known` ends the list of known names in the message for an unknown one: the names the
// caller accepts beside the position methods (`score`'s "nbce", which is not a position method).
Method ParseMethod(std::string_view spec, std::string_view also_known = {});
// The canonical spec of a method: ParseMethod(CanonicalSpec(m)) == m, and parsing a canonical
// spec and printing it again gives the same text. Only non-default fields are printed.
std::string CanonicalSpec(const Method& m);
bool operator==(const Method& a, const Method& b);
// The spec name of a method (`yarn`, `window`, ...). A hand-built method that no name
// expresses is named after its relative map, else its mask, else its rope scaling.
std::string_view MethodName(const Method& m);
// Every spec name, in the registry's order: the rope methods, one per relative map of
// src/position/maps/, the masks.
std::vector<std::string_view> MethodSpecNames();

// llama.cpp's flags (common/arg.cpp); unset fields are std::nullopt.
struct LlamaCppRopeFlags {
  std::optional<std::string> rope_scaling;  // --rope-scaling {none,linear,yarn}
  std::optional<double> rope_scale;         // --rope-scale: s
  std::optional<double> rope_freq_base;     // --rope-freq-base
  std::optional<double> rope_freq_scale;    // --rope-freq-scale: 1/s
  std::optional<int64_t> yarn_orig_ctx;     // --yarn-orig-ctx
  std::optional<double> yarn_ext_factor;    // --yarn-ext-factor
  std::optional<double> yarn_attn_factor;   // --yarn-attn-factor
  std::optional<double> yarn_beta_fast;     // --yarn-beta-fast
  std::optional<double> yarn_beta_slow;     // --yarn-beta-slow
  std::optional<int64_t> grp_attn_n;        // --grp-attn-n: group attention's G
  std::optional<int64_t> grp_attn_w;        // --grp-attn-w: group attention's W
  bool Any() const;
};
// Throws stretch::Error on combinations with no meaning (e.g. --rope-scale and
// --rope-freq-scale disagreeing, --grp-attn-n without --grp-attn-w when required, ...).
Method MethodFromLlamaCpp(const LlamaCppRopeFlags& flags);
// An HF `rope_scaling` object as JSON text ({"rope_type": "yarn", "factor": 4, ...}; "type" is
// accepted for "rope_type"). Throws stretch::Error on bad JSON, unknown rope_type or keys.
Method MethodFromHfRopeScaling(std::string_view json);

// What a model brings to the frequency math.
struct RopeGeometry {
  int64_t train_len = 0;  // L
  int rotary_dim = 0;     // d (even)
  double base = 10000.0;  // the model's base
  // The model's own position interpolation (trained with it, e.g. `stretch train --position
  // rope:pi=F`): every theta_t is divided by it, under any method. 1: none.
  double interpolation = 1.0;
};

// Everything a call needs from the rope part at one scale s (>= 1).
struct RopeFrequencies {
  std::vector<double> thetas;     // d/2 angles per unit of position, in double
  double attention_factor = 1.0;  // q and k are both multiplied by it: logits by its square
};

// The scale a call uses when the spec gives none: max(1, fed / L).
double CallScale(const RopeMethod& rope, const RopeGeometry& geo, int64_t fed_len);
// Frequencies for scale s. For kDynamic methods the caller passes s_i = max(L, i + 1) / L.
// Every theta is then divided by geo.interpolation (the model's own PI).
// `length` is the sequence length LongRoPE picks its factor set by, as HF's
// _compute_longrope_parameters does (the long list when length > orig, else the short one): a
// static plan passes its call's L' (the set is fixed per call, "locally static"), a dynamic one
// query i's i + 1 (the set per position; every key is then rotated with the query's set). 0: s L.
RopeFrequencies ComputeFrequencies(const RopeMethod& rope, const RopeGeometry& geo, double s,
                                   int64_t length = 0);
// Whether LongRoPE runs its long factor list for a sequence of `length` tokens (length > orig).
bool LongRopeUsesLong(const RopeMethod& rope, const RopeGeometry& geo, int64_t length);

// The method with every default filled in for a call of `fed_len` tokens (L' = fed_len):
// rope.factor = CallScale when 0; rope.base = geo.base when 0; rope.original_length = L when 0;
// the relative map's parameters (its file in src/position/maps/) and mask.window / sinks per the
// defaults documented in method_check.cc. After this every field the method uses is concrete
// (non-zero).
// Calls ValidateMethod first.
Method ResolveMethod(const Method& m, const RopeGeometry& geo, int64_t fed_len);

// Checks a method against a model and a call (window larger than the context it is used with,
// longrope lists of the wrong length, ...). Throws stretch::Error naming field, value, allowed.
void ValidateMethod(const Method& m, const RopeGeometry& geo, int64_t fed_len);

}  // namespace stretch
