// Measured memory bandwidth of this machine: the yardstick for decode, which reads every weight
// once per token and so is bound by memory, not by arithmetic.
//
// Two measurements, each over arrays far larger than any cache (3 x 128 MiB), threads splitting
// the arrays into contiguous halves, the best of several passes (as fma_peak.h: on a shared
// machine a slow pass measures the neighbours):
//   - triad, as STREAM (McCalpin) defines it: a[i] = b[i] + s * c[i], counted as 12 bytes per
//     element (two reads, one write; the write-allocate read of a is not counted, as in STREAM);
//   - read: the sum of one array, 4 bytes per element, which is what a matrix-vector product
//     does with its matrix.
#pragma once

#ifndef HWY_COMPILE_ONLY_STATIC
#define HWY_COMPILE_ONLY_STATIC 1
#endif
#include <hwy/aligned_allocator.h>
#include <hwy/highway.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>

namespace stretch::bench {

namespace bw_hn = hwy::HWY_NAMESPACE;

struct MemoryBandwidth {
  double triad_gbs = 0.0;  // GB/s (1e9 bytes), STREAM's count
  double read_gbs = 0.0;   // GB/s, reading only
};

// `threads` goes to the OpenMP pragmas only: a build without OpenMP (the clang sanitizer build)
// measures on one thread.
inline MemoryBandwidth MeasureMemoryBandwidth([[maybe_unused]] int threads, int passes = 8) {
  constexpr size_t kFloats = size_t{32} << 20;  // 128 MiB per array
  auto a = hwy::AllocateAligned<float>(kFloats);
  auto b = hwy::AllocateAligned<float>(kFloats);
  auto c = hwy::AllocateAligned<float>(kFloats);
  // First touch by the threads that will read them (their halves), and values that stay finite.
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < kFloats; ++i) {
    a[i] = 0.0f;
    b[i] = 1.0f;
    c[i] = 0.5f;
  }
  using DF = bw_hn::ScalableTag<float>;
  const DF df;
  const size_t lanes = bw_hn::Lanes(df);
  auto seconds_of = [](auto&& body) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  MemoryBandwidth best;
  volatile float sink = 0.0f;
  for (int p = 0; p < passes; ++p) {
    const double triad = seconds_of([&] {
#pragma omp parallel for num_threads(threads) schedule(static)
      for (size_t i = 0; i < kFloats; i += lanes) {
        const auto v = bw_hn::MulAdd(bw_hn::Set(df, 0.5f), bw_hn::Load(df, c.get() + i),
                                     bw_hn::Load(df, b.get() + i));
        bw_hn::Store(v, df, a.get() + i);
      }
    });
    const double read = seconds_of([&] {
      float total = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : total)
      {
        const int n = omp_get_num_threads(), t = omp_get_thread_num();
        const size_t per = (kFloats / lanes + n - 1) / n * lanes;
        const size_t begin = std::min(kFloats, per * t), end = std::min(kFloats, begin + per);
        auto s0 = bw_hn::Zero(df), s1 = bw_hn::Zero(df), s2 = bw_hn::Zero(df), s3 = bw_hn::Zero(df);
        size_t i = begin;
        for (; i + 4 * lanes <= end; i += 4 * lanes) {
          s0 = bw_hn::Add(s0, bw_hn::Load(df, b.get() + i));
          s1 = bw_hn::Add(s1, bw_hn::Load(df, b.get() + i + lanes));
          s2 = bw_hn::Add(s2, bw_hn::Load(df, b.get() + i + 2 * lanes));
          s3 = bw_hn::Add(s3, bw_hn::Load(df, b.get() + i + 3 * lanes));
        }
        for (; i < end; i += lanes) s0 = bw_hn::Add(s0, bw_hn::Load(df, b.get() + i));
        total += bw_hn::GetLane(
            bw_hn::SumOfLanes(df, bw_hn::Add(bw_hn::Add(s0, s1), bw_hn::Add(s2, s3))));
      }
      sink = sink + total;
    });
    best.triad_gbs = std::max(best.triad_gbs, 12.0 * kFloats / triad * 1e-9);
    best.read_gbs = std::max(best.read_gbs, 4.0 * kFloats / read * 1e-9);
  }
  (void)sink;
  return best;
}

}  // namespace stretch::bench
