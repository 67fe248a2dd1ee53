// Attention benchmarks: the FMA peak (1 and 2 threads), causal prefill at L = 1024, 4096, 16384
// for D = 8, 64, 128 (and 8192 for D = 8, a target), decode at depth 16k, and decode through the
// 12 layers of the stories110M shape at depth 2048 (GB/s of keys and values read).
//   build/h-attn/attention_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// Threads: OMP_NUM_THREADS (default: all cores); the peak is measured on the same count.
//
// Shapes. D = 8: H = 8, G = 4, as the real stories260K model (target: L = 8192 <= 0.15 s,
// L = 16384 <= 0.6 s per call). D = 64 and 128: H = G = 8, plain multi-head attention as in
// target (a): >= 60% of the FMA peak at L >= 4096. Decode: T = 1 at position 16383 with S = 16384
// keys, D = 8, H = 8, G = 4 (target: <= 0.12 ms per call).
//
// Layout as the model passes it: q and out (T, H*D) rows, k and v a (G, S, D) cache.
// Flops: 4 D per visible (query, key) pair per head (2 D for q.k, 2 D for p.v); causal prefill
// sees L (L + 1) / 2 pairs. The fraction is against MeasureFmaPeakGflops on the threads the
// kernel uses (printed once at start); inputs are N(0, 1), scale 1/sqrt(D).
#include <benchmark/benchmark.h>
#include "src/core/threads.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "bench/fma_peak.h"
#include "src/core/aligned.h"
#include "src/core/rng.h"
#include "src/kernels/attention.h"

namespace stretch {
namespace {

double PeakGflops() {
  static const double peak = [] {
    const int threads = stretch::NumThreads();
    const double p = bench::MeasureFmaPeakGflops(threads, 1.0);
    std::printf("FMA peak used for fractions: %.1f GFLOP/s float32 on %d threads\n", p, threads);
    return p;
  }();
  return peak;
}

void BM_FmaPeak(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  double gflops = 0;
  for (auto _ : state) gflops = bench::MeasureFmaPeakGflops(threads, 0.2);
  state.counters["GFLOP/s"] = gflops;
}
BENCHMARK(BM_FmaPeak)->Arg(1)->Arg(2)->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);

struct Inputs {
  AlignedVector<float> q, k, v, out;  // 64-byte aligned, as the model allocates
  AttentionDims dims;
  explicit Inputs(int64_t T, int64_t S, int H, int G, int D) {
    Rng rng(1);
    auto fill = [&](AlignedVector<float>& x, int64_t n) {
      x.resize(n);
      for (float& y : x) y = static_cast<float>(rng.Normal());
    };
    fill(q, T * H * D);
    fill(k, G * S * D);
    fill(v, G * S * D);
    out.resize(T * H * D);
    dims = {T, S, S - T, H, G, D};
  }
  void Run() {
    const int H = dims.n_heads, D = dims.head_dim;
    const int64_t S = dims.n_kv;
    AttentionForward({q.data(), int64_t{H} * D, D}, {k.data(), D, S * D}, {v.data(), D, S * D},
                     {out.data(), int64_t{H} * D, D}, dims,
                     {1.0f / std::sqrt(static_cast<float>(D))});
  }
};

void SetCounters(benchmark::State& state, double flops_per_call) {
  const double flops = flops_per_call * static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsRate);
  state.counters["peak_frac"] =
      benchmark::Counter(flops * 1e-9 / PeakGflops(), benchmark::Counter::kIsRate);
}

// Args: L, D.
void BM_AttentionPrefill(benchmark::State& state) {
  const int64_t L = state.range(0);
  const int D = static_cast<int>(state.range(1));
  const int H = 8, G = D == 8 ? 4 : 8;
  PeakGflops();
  Inputs in(L, L, H, G, D);
  for (auto _ : state) {
    in.Run();
    benchmark::DoNotOptimize(in.out.data());
  }
  SetCounters(state, 4.0 * D * H * (static_cast<double>(L) * (L + 1) / 2));
}
BENCHMARK(BM_AttentionPrefill)
    ->ArgsProduct({{1024, 4096, 8192, 16384}, {8}})
    ->ArgsProduct({{1024, 4096, 16384}, {64, 128}})
    ->ArgNames({"L", "D"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Args: S (depth), D. One query row at position S - 1.
void BM_AttentionDecode(benchmark::State& state) {
  const int64_t S = state.range(0);
  const int D = static_cast<int>(state.range(1));
  const int H = 8, G = D == 8 ? 4 : 8;
  PeakGflops();
  Inputs in(1, S, H, G, D);
  for (auto _ : state) {
    in.Run();
    benchmark::DoNotOptimize(in.out.data());
  }
  SetCounters(state, 4.0 * D * H * static_cast<double>(S));
}
BENCHMARK(BM_AttentionDecode)
    ->Args({16384, 8})
    ->Args({16384, 64})
    ->ArgNames({"S", "D"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Args: S (depth), D, layers. Decode as a model runs it: one query row per layer, H = G = 12 heads
// (the stories110M shape at D = 64), each layer's cache its own; a call is all the layers. With 12
// layers at S = 2048 the keys and values (151 MB) come from memory or a large L3, with 1 from the
// core's caches. GB/s: key and value bytes read per second.
void BM_AttentionDecodeLayers(benchmark::State& state) {
  const int64_t S = state.range(0);
  const int D = static_cast<int>(state.range(1));
  const int n_layers = static_cast<int>(state.range(2));
  constexpr int H = 12;
  std::vector<Inputs> layers;
  layers.reserve(static_cast<size_t>(n_layers));
  for (int l = 0; l < n_layers; ++l) layers.emplace_back(1, S, H, H, D);
  for (auto _ : state) {
    for (Inputs& in : layers) in.Run();
    benchmark::DoNotOptimize(layers.back().out.data());
  }
  const double bytes = 2.0 * n_layers * H * S * D * sizeof(float) * state.iterations();
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionDecodeLayers)
    ->Args({2048, 64, 12})
    ->Args({2048, 64, 1})
    ->ArgNames({"S", "D", "layers"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace stretch

BENCHMARK_MAIN();
