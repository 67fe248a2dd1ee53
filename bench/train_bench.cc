// Training throughput: one optimizer step (forward, backward, clipping, AdamW) of a 4-layer,
// d = 256 model at length 256 (the training issue's benchmark; shape:0) and of the stories15M
// shape (shape:1, see BenchArch), and its fraction of the float32 FMA peak measured on the same
// threads.
//   build/release/train_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Model (shape:0): dim 256, 4 layers, 4 heads (D = 64), SwiGLU width 688 (8/3 d rounded up to 16),
// vocab 512, untied classifier, RoPE, batch 8 x 256 tokens per step. Flops per token, PaLM's
// model-flops convention: 6 N (N = parameters, embedding lookup excluded, classifier included)
// for the matrix products forward and backward, plus 12 n_layers d T for attention's q.k and p.v
// forward and backward (counting the full T x T square, as that convention does, though causal
// attention does half). Target: >= 40% of the peak.
#include <benchmark/benchmark.h>
#include "src/core/threads.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "bench/fma_peak.h"
#include "src/core/rng.h"
#include "src/kernels/gemm.h"
#include "src/train/trainer.h"

namespace stretch {
namespace {

// The two shapes (issue 14): 0, the training issue's 4-layer d = 256 model; 1, the stories15M
// shape (dim 288, 6 layers, 6 heads of D = 48, SwiGLU width 768) with the same vocab 512 and
// length 256.
TrainArch BenchArch(int shape) {
  TrainArch a;
  const bool s15m = shape == 1;
  a.model.dim = s15m ? 288 : 256;
  a.model.hidden_dim = s15m ? 768 : 688;
  a.model.n_layers = s15m ? 6 : 4;
  a.model.n_heads = s15m ? 6 : 4;
  a.model.n_kv_heads = a.model.n_heads;
  a.model.vocab_size = 512;
  a.model.seq_len = 256;
  a.model.shared_classifier = false;
  a.model.attention.layers.assign(static_cast<size_t>(a.model.n_layers), LayerLayout{});
  return a;
}

void RandomBatch(Rng& rng, int64_t B, std::vector<int>& tokens) {
  tokens.resize(static_cast<size_t>(B * 257));
  for (int& t : tokens) t = static_cast<int>(rng.NextU64() % 512);
}

void BM_TrainStep(benchmark::State& state) {
  const TrainArch arch = BenchArch(static_cast<int>(state.range(0)));
  TrainerOptions opt;
  opt.batch = 8;
  opt.schedule = LrSchedule{1e-3, 1e-4, 10, 1000000};
  Trainer trainer(arch, opt);
  trainer.Step(RandomBatch);  // warm-up: allocations
  for (auto _ : state) trainer.Step(RandomBatch);
  const ModelConfig& m = arch.model;
  const double C = m.dim, F = m.hidden_dim, L = m.n_layers, T = m.seq_len, V = m.vocab_size;
  const double n_params = L * (4 * C * C + 3 * C * F) + V * C;  // matrices + classifier
  const double flops_per_token = 6 * n_params + 12 * L * C * T;
  const double tokens = static_cast<double>(opt.batch) * T;
  state.counters["tokens/s"] =
      benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(tokens * flops_per_token * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  // Two yardsticks: the machine's FMA peak at its widest vectors, and the peak with 256-bit
  // vectors, the ceiling of OpenBLAS's Haswell (AVX2) kernels, which OpenBLAS picks on AMD Zen
  // CPUs (and which OPENBLAS_CORETYPE=Haswell forces); OPENBLAS_CORETYPE=SkylakeX selects its
  // AVX-512 kernels on a CPU that has AVX-512.
  static const std::pair<double, double> peaks = [] {
    const double p = bench::MeasureFmaPeakGflops<16>(stretch::NumThreads(), 1.0);
    const double p256 = bench::MeasureFmaPeakGflops<8>(stretch::NumThreads(), 1.0);
    std::printf(
        "FMA peak: %.1f GFLOP/s float32 on %d threads (%.1f with 256-bit vectors); "
        "matrix products: %s\n",
        p, stretch::NumThreads(), p256, stretch::GemmKernelsText().c_str());
    return std::pair{p, p256};
  }();
  state.counters["peak GFLOP/s"] = peaks.first;
  state.counters["peak_frac"] = benchmark::Counter(tokens * flops_per_token * 1e-9 / peaks.first,
                                                   benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak256 GFLOP/s"] = peaks.second;
}
BENCHMARK(BM_TrainStep)
    ->ArgName("shape")
    ->Arg(0)
    ->Arg(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(3.0);

}  // namespace
}  // namespace stretch

BENCHMARK_MAIN();
