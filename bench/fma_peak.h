// Measured float32 FMA peak of this machine: the yardstick for "fraction of peak" in benchmarks.
//
// Each thread runs kChains independent chains acc = acc * b + c on vectors as wide as the widest
// the attention kernel uses (Highway's static target capped at 16 floats: 512-bit on AVX-512
// machines, 256-bit on AVX2). An FMA has a latency of 4-5 cycles and 2 issue ports, so at least
// 8-10 chains must be in flight to keep both ports busy; 12 leave margin. b < 1 and c > 0 make
// every chain converge to c / (1 - b): no overflow, no denormals. Flops: 2 per lane per FMA.
#pragma once

// Highway 1.0.3 rejects -march=native on CPUs newer than it knows unless told to compile only the
// static target (see src/kernels/attention_simd.h); static dispatch is all we use.
#ifndef HWY_COMPILE_ONLY_STATIC
#define HWY_COMPILE_ONLY_STATIC 1
#endif
#include <hwy/highway.h>
#include <omp.h>

#include <chrono>

namespace stretch::bench {

namespace fma_hn = hwy::HWY_NAMESPACE;

// Float32 GFLOP/s summed over `threads` OpenMP threads: the best of short rounds (about 1 ms
// each) repeated for at least min_seconds. The best, not the mean: a peak is what the hardware
// can do, and on a shared machine a round in which the scheduler takes a core away measures the
// neighbours, not the FMA units.
// kMaxLanes caps the vector width: 16 floats (the widest the machine has), or 8 for the 256-bit
// (AVX2) peak, the ceiling of code that uses 256-bit vectors only, such as OpenBLAS's Haswell
// kernels.
template <int kMaxLanes = 16>
double MeasureFmaPeakGflops([[maybe_unused]] int threads, double min_seconds) {
  using DF = fma_hn::CappedTag<float, kMaxLanes>;
  constexpr int kChains = 12;
  constexpr long kIters = 1 << 18;
  const long lanes = static_cast<long>(fma_hn::Lanes(DF()));
  double seconds = 0, best = 0;
  volatile float sink = 0;
  while (seconds < min_seconds) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const DF df;
      using V = fma_hn::Vec<DF>;
      V acc[kChains];
#pragma GCC unroll 12
      for (int i = 0; i < kChains; ++i) acc[i] = fma_hn::Set(df, 1.0f + 0.01f * i);
      const V b = fma_hn::Set(df, 0.999f), c = fma_hn::Set(df, 0.001f);
      for (long it = 0; it < kIters; ++it) {
#pragma GCC unroll 12
        for (int i = 0; i < kChains; ++i) acc[i] = fma_hn::MulAdd(acc[i], b, c);
      }
      V sum = acc[0];
#pragma GCC unroll 12
      for (int i = 1; i < kChains; ++i) sum = fma_hn::Add(sum, acc[i]);
      const float s = fma_hn::GetLane(sum);
#pragma omp critical
      sink = sink + s;
    }
    const double round =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    seconds += round;
#ifdef _OPENMP
    const int ran = threads;
#else
    const int ran = 1;  // a build without OpenMP (the clang sanitizer build) ignores the pragmas
#endif
    const double gflops = 2.0 * lanes * kChains * kIters * ran / round * 1e-9;
    if (gflops > best) best = gflops;
  }
  (void)sink;
  return best;
}

}  // namespace stretch::bench
