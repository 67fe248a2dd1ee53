#include "src/core/profile.h"

namespace stretch::profile {

std::atomic<bool> g_enabled{false};

namespace {
std::array<std::atomic<int64_t>, kCount> g_nanoseconds{};
std::array<std::atomic<int64_t>, kCount> g_calls{};
}  // namespace

const char* Name(Op op) {
  switch (op) {
    case kEmbed: return "embedding";
    case kNorm: return "rmsnorm";
    case kInProj: return "q/k/v projections";
    case kRope: return "rope + cache append";
    case kAttention: return "attention kernel";
    case kOutProj: return "output projection";
    case kFfnIn: return "ffn gate/up";
    case kActivation: return "activation";
    case kFfnOut: return "ffn down";
    case kResidual: return "residual adds";
    case kClassifier: return "classifier";
    case kCount: break;
  }
  return "?";
}

void SetEnabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

void Add(Op op, int64_t nanoseconds) {
  g_nanoseconds[op].fetch_add(nanoseconds, std::memory_order_relaxed);
  g_calls[op].fetch_add(1, std::memory_order_relaxed);
}

double Totals::Total() const {
  double s = 0.0;
  for (double x : seconds) s += x;
  return s;
}

Totals Take() {
  Totals t;
  for (int i = 0; i < kCount; ++i) {
    t.seconds[i] = 1e-9 * static_cast<double>(g_nanoseconds[i].exchange(0));
    t.calls[i] = g_calls[i].exchange(0);
  }
  return t;
}

}  // namespace stretch::profile
