#include "src/lab/gate.h"

#include <fmt/format.h>

#include <cmath>

#include "src/core/check.h"
#include "src/core/error.h"

namespace stretch {
namespace {

// "12.5%" of a share.
std::string Pct(double x) { return fmt::format("{:.1f}%", 100.0 * x); }

}  // namespace

GateVerdict DecideCopyGate(const GateMeasurements& m) {
  GateVerdict v;
  std::vector<std::string> failures;
  for (const GateCopyMeasurement& c : m.copy) {
    LabGatePart p;
    p.name = c.material;
    p.accuracy = c.copy.estimate;
    p.control_accuracy = c.control.estimate;
    p.accuracy_ci = LabIntervalOf(c.copy);
    p.control_ci = LabIntervalOf(c.control);
    p.difference_ci = LabIntervalOf(c.difference);
    p.trials = c.trials;
    const double gain = c.copy.estimate - c.control.estimate;
    // 1e-12: a gain of exactly 20 points passes despite the rounding of the two accuracies.
    const bool enough = gain >= kGateMinCopyGain - 1e-12;
    const bool above = c.difference.low > 0.0;
    p.passed = enough && above;
    if (!p.passed) {
      p.reason =
          fmt::format("far copy of {} at L: copy {} - control {} = {:+.1f} points{}", c.material,
                      Pct(c.copy.estimate), Pct(c.control.estimate), 100.0 * gain,
                      !enough ? fmt::format(" < {:.0f}", 100.0 * kGateMinCopyGain)
                              : fmt::format(", its 95% interval [{:+.1f}, {:+.1f}] not above 0",
                                            100.0 * c.difference.low, 100.0 * c.difference.high));
      failures.push_back(p.reason);
    }
    v.parts.push_back(std::move(p));
  }
  if (m.passkey) {
    const GatePasskeyMeasurement& k = *m.passkey;
    LabGatePart p;
    p.name = "passkey";
    p.accuracy = k.exact.estimate;
    p.control_accuracy = k.control.estimate;
    p.accuracy_ci = LabIntervalOf(k.exact);
    p.control_ci = LabIntervalOf(k.control);
    p.difference_ci = LabIntervalOf(k.difference);
    p.trials = k.trials;
    p.passed = k.exact.estimate >= kGateMinPasskey - 1e-12;
    if (!p.passed) {
      p.reason = fmt::format("passkey at L: {} of {} keys read back ({}) < {:.0f}%", k.retrieved,
                             k.trials, Pct(k.exact.estimate), 100.0 * kGateMinPasskey);
      failures.push_back(p.reason);
    }
    v.parts.push_back(std::move(p));
  }
  v.passed = failures.empty();
  v.reason = fmt::format("{}", fmt::join(failures, "; "));
  return v;
}

GateMeasurements MeasureCopyGate(const SequenceScorer& scorer, const TokenSpans& documents,
                                 const TextEncoder& encode, int bos, const CopyGateOptions& o) {
  STRETCH_CHECK(o.train_len > 0);
  GateMeasurements m;
  const int64_t L = o.train_len;
  if (o.copy_trials > 0 && 2 * o.span <= L) {
    const std::vector<int64_t> distances = DefaultCopyDistances(L, L, o.span);
    for (const CopySource source : {CopySource::kText, CopySource::kRandom}) {
      FarCopyOptions fo;
      fo.source = source;
      fo.span = o.span;
      fo.seed = o.seed;
      std::vector<ProbeSequence> copies, controls;
      for (const int64_t d : distances) {
        for (FarCopyTrial& t : MakeFarCopyTrials(documents, encode, bos, L, d, o.copy_trials, fo)) {
          copies.push_back(std::move(t.copy));
          controls.push_back(std::move(t.control));
        }
      }
      const ProbeResult r = CompareArms(ScoreArm(scorer, copies, o.bootstrap),
                                        ScoreArm(scorer, controls, o.bootstrap),
                                        /*paired=*/true, o.bootstrap);
      m.copy.push_back({CopySourceName(source), static_cast<int64_t>(copies.size()),
                        r.test.accuracy, r.control.accuracy, r.accuracy_difference});
    }
  }
  if (o.passkey_trials > 0 && !o.passkey_depths.empty() &&
      PasskeyMinCtx(EncodePasskeyPieces(encode)) <= L) {
    GatePasskeyMeasurement k;
    int64_t control_retrieved = 0;
    for (const double depth : o.passkey_depths) {
      const uint64_t seed = o.seed * 1000003u + static_cast<uint64_t>(L) * 101u +
                            static_cast<uint64_t>(std::llround(depth * 1000));
      const PasskeyProbeResult r = ScorePasskeyProbe(
          scorer, MakePasskeyProbe(documents, encode, bos, L, depth, o.passkey_trials, seed),
          o.bootstrap);
      k.trials += r.test.trials;
      k.retrieved += r.test.retrieved;
      control_retrieved += r.control.retrieved;
    }
    k.exact = WilsonInterval(k.retrieved, k.trials);
    k.control = WilsonInterval(control_retrieved, k.trials);
    k.difference = NewcombeDifference(k.retrieved, k.trials, control_retrieved, k.trials);
    m.passkey = k;
  }
  return m;
}

LabGate GateLineOf(const GateVerdict& v, const GateMeasurements& m) {
  LabGate g;
  g.passed = v.passed;
  g.reason = v.reason;
  g.parts = v.parts;
  // The line's own columns (the report's gate table): text's far copy, or random's without it.
  const GateCopyMeasurement* copy = nullptr;
  for (const GateCopyMeasurement& c : m.copy) {
    if (copy == nullptr || c.material == "text") copy = &c;
  }
  if (copy != nullptr) {
    g.copy_accuracy = copy->copy.estimate;
    g.copy_ci = LabIntervalOf(copy->copy);
    g.control_accuracy = copy->control.estimate;
    g.control_ci = LabIntervalOf(copy->control);
    g.copy_trials = copy->trials;
  }
  if (m.passkey) {
    g.passkey_accuracy = m.passkey->exact.estimate;
    g.passkey_ci = LabIntervalOf(m.passkey->exact);
    g.passkey_trials = m.passkey->trials;
  }
  return g;
}

std::string NotInformativeReason(const LabGate& gate, const LabRecord& r) {
  std::string part;
  if (r.protocol == "far-copy") {
    part = r.material;
  } else if (r.protocol == "repeat") {
    part = "text";
  } else if (r.protocol == "passkey") {
    part = "passkey";
  } else {
    return "";
  }
  if (gate.PartPassed(part)) return "";
  return fmt::format("the model failed the copy gate: {}", gate.PartReason(part));
}

}  // namespace stretch
