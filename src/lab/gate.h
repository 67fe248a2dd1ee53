// The lab's copy gate: before any cell beyond the training length L of a model is read, the model
// is measured at L, where nothing is out of its training range:
//
//   far copy within L   a span (held-out text, then random letters) early in a window of L
//                       tokens and again at its end, at the distances DefaultCopyDistances(L, L,
//                       span) (L/4, L/2 and L - span: all that fit), against its control whose
//                       early span is another one (src/eval/retrieval.h); copies and controls of
//                       every distance pooled into one arm each, compared paired;
//   passkey at L        stretch's own layout (the one the lab trains on), keys read back exactly,
//                       against the control with no key in the text.
//
// The rule (DecideCopyGate, a pure function of the measurements so that tests can feed it any
// numbers): a material passes when copy - control >= kGateMinCopyGain and the 95% interval of the
// difference lies above 0; passkey passes when keys are read back >= kGateMinPasskey of the time.
// A model that fails a part cannot show whether a method keeps distant information of that kind
// (it does not retrieve even at L), so the lab marks the cells that need the part not informative:
// far-copy cells by their material, repeat cells with text (a repeated sample is text), passkey
// cells with passkey.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/eval/interval.h"
#include "src/eval/protocols.h"
#include "src/eval/retrieval.h"
#include "src/report/records.h"

namespace stretch {

// An eval interval as a record's (known).
inline LabInterval LabIntervalOf(const Interval& i) { return {true, i.low, i.high}; }

// 20 points above the control: the threshold, far above what a model that does not copy
// scores on random strings (about 1/26 either way) and above what prose n-grams give a text span
// whose control has the copied 4-grams removed (retrieval.h's leak rule); the seeds' own margins
// at their training length are larger (+28 to +37 points at 4L and beyond).
inline constexpr double kGateMinCopyGain = 0.20;
// 80% of keys read back exactly at L: a model that reads back fewer at its own length cannot show
// a method losing them beyond it (a 5-digit key guessed is right 1 time in 90,000).
inline constexpr double kGateMinPasskey = 0.80;

// The lab measures the gate's passkey with at least this many trials a depth (240 over the quick
// lab's three depths, 400 over the full lab's five), more than its cells beyond L take (5 and
// 20): the issue asks for 90% at L, and Wilson's 95% interval at 60 trials (the count until
// 2026-12-07) spans it for most models near it (52 keys: 75.8-93.1%; 56: 84.1-97.4%), where at
// 240 it is about 7 points wide (216 keys: 85.6-93.2%; 224: 89.4-95.9%). A trial at L costs one
// forward pass of L tokens: 240 at L = 128 take about a second on one core.
inline constexpr int64_t kGateMinPasskeyTrials = 80;

struct GateCopyMeasurement {
  std::string material;  // "text" or "random"
  int64_t trials = 0;    // copies (and as many controls), over all distances
  Interval copy, control;
  Interval difference;  // copy - control, paired bootstrap
};

struct GatePasskeyMeasurement {
  int64_t trials = 0, retrieved = 0;
  Interval exact;    // retrieved / trials, Wilson
  Interval control;  // the same with no key in the text, Wilson
  Interval difference;
};

struct GateMeasurements {
  std::vector<GateCopyMeasurement> copy;          // one per material measured
  std::optional<GatePasskeyMeasurement> passkey;  // none: not measured (L too short, 0 trials)
};

struct GateVerdict {
  bool passed = true;              // every part measured passed
  std::string reason;              // the failed parts' reasons, "; "-joined ("" when passed)
  std::vector<LabGatePart> parts;  // one per measurement, in order: copy materials, passkey
};

// The rule at the top, on measurements; no part measured passes (nothing to hold back).
GateVerdict DecideCopyGate(const GateMeasurements& m);

struct CopyGateOptions {
  int64_t train_len = 0;       // L
  int64_t copy_trials = 16;    // per distance and material; 0: no far copy
  int64_t span = 32;           // far copy's span, tokens
  int64_t passkey_trials = 0;  // per depth; 0: no passkey
  std::vector<double> passkey_depths = {0.0, 0.5, 1.0};
  uint64_t seed = 1;
  BootstrapOptions bootstrap;
};

// Measures the gate's parts with `scorer` at L. `encode` encodes mid-text pieces (random strings,
// the passkey's pieces; MidTextEncoder). Passkey is left out (none) when L is below its shortest
// context (PasskeyMinCtx), far copy when no distance fits (2 span > L). Throws as the protocols
// do (too little text).
GateMeasurements MeasureCopyGate(const SequenceScorer& scorer, const TokenSpans& documents,
                                 const TextEncoder& encode, int bos, const CopyGateOptions& o);

// The gate line of a model from a verdict and its measurements.
LabGate GateLineOf(const GateVerdict& v, const GateMeasurements& m);

// Why the cell `r` (its protocol, material) is not informative under `gate`, or "" when it is:
// far-copy by its material, repeat with text, passkey with passkey; other protocols never.
std::string NotInformativeReason(const LabGate& gate, const LabRecord& r);

}  // namespace stretch
