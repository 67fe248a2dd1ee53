// Where a forward's time goes, op by op: `stretch bench --profile` turns this on around prefill
// and decode and prints each op's share. Off (the default), a ProfileScope costs one load of a
// flag; on, two clock reads and one atomic add per op call, a few hundred nanoseconds per layer,
// which matters only for the tiny stories260K model at decode.
//
// An op's time is wall time on the calling thread and includes the threads it fans out to
// (OpenMP inside the matrix products and the attention kernel): the shares add up to the
// forward's time.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace stretch::profile {

enum Op : int {
  kEmbed,       // token embedding lookup
  kNorm,        // RMSNorm (and the GAU's post-norm)
  kInProj,      // attention's input projections: q, k, v (the GAU: u, v, z)
  kRope,        // rotating q and k, scattering new keys and values into the cache
  kAttention,   // the attention kernel (softmax(q k^T) v, with its masks and tables)
  kOutProj,     // attention's output projection (Wo)
  kFfnIn,       // the FFN's gate and up projections (W1, W3)
  kActivation,  // SwiGLU / SiLU, the GAU's gating and scale-offset
  kFfnOut,      // the FFN's down projection (W2)
  kResidual,    // residual adds
  kClassifier,  // logits = hidden Wcls^T
  kCount
};

const char* Name(Op op);

// Turned on by `stretch bench --profile` only.
extern std::atomic<bool> g_enabled;
inline bool Enabled() { return g_enabled.load(std::memory_order_relaxed); }
void SetEnabled(bool on);

struct Totals {
  std::array<double, kCount> seconds{};
  std::array<int64_t, kCount> calls{};
  double Total() const;
};
// What was recorded since the last Take (and clears it).
Totals Take();

void Add(Op op, int64_t nanoseconds);

// Times its scope (or up to Stop()) into `op` when profiling is on.
class Scope {
 public:
  explicit Scope(Op op) : op_(op), on_(Enabled()) {
    if (on_) start_ = std::chrono::steady_clock::now();
  }
  ~Scope() { Stop(); }
  void Stop() {
    if (on_) {
      on_ = false;
      Add(op_, std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::steady_clock::now() - start_)
                   .count());
    }
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Op op_;
  bool on_;
  std::chrono::steady_clock::time_point start_{};
};

}  // namespace stretch::profile
