// Measured memory bandwidth of this machine: the yardstick for decode, which reads every weight
// once per token and so is bound by memory, not by arithmetic.
//
// Two measurements, each over arrays larger than the caches the cores reach
// (MemoryProbeArrayBytes), threads splitting the arrays into contiguous halves, the best of
// several passes (as fma_peak.h: on a shared machine a slow pass measures the neighbours):
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

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <new>

namespace stretch::bench {

namespace bw_hn = hwy::HWY_NAMESPACE;

struct MemoryBandwidth {
  double triad_gbs = 0.0;  // GB/s (1e9 bytes), STREAM's count
  double read_gbs = 0.0;   // GB/s, reading only
  size_t array_bytes = 0;  // each array's size
};

// Each array's size: 4 times the level-3 cache the system reports (STREAM's rule), at least 512
// MiB and at most 1 GiB, and at most 1/16 of the memory this process may use (the machine's, or
// a smaller cgroup v2 limit; three arrays are held), never below 64 MiB. In a virtual machine the
// cache reported is not what the cores reach (2 cores of an AMD EPYC, Zen 4: `lscpu` 32 MiB,
// sysconf 384 MiB for the whole package; an Intel Xeon reports 300 MiB shared by its socket), and
// a cache that keeps part of a stream it cannot hold reads faster than memory. Measured on that
// EPYC with a standalone read loop, best of 8 passes, 8 runs in alternation: 128 MiB (this
// probe's size before) 55-58 GB/s against 47-52 for 512 MiB; in another series 32 MiB 131-150,
// 64 MiB 56-78, and 256 MiB, 512 MiB, 1 GiB and 2 GiB alike (49.7, 49.1, 49.4, 48.4). A yardstick
// for decode, which streams gigabytes, must not count cache hits.
inline size_t MemoryProbeArrayBytes() {
  constexpr size_t kMiB = size_t{1} << 20;
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  size_t bytes = std::clamp(l3 > 0 ? 4 * static_cast<size_t>(l3) : 0, 512 * kMiB, 1024 * kMiB);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  size_t usable =
      pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : SIZE_MAX;
  // A container's limit (cgroup v2; "max" or no file: none).
  if (FILE* f = std::fopen("/sys/fs/cgroup/memory.max", "r")) {
    unsigned long long limit = 0;
    if (std::fscanf(f, "%llu", &limit) == 1 && limit > 0) {
      usable = std::min(usable, static_cast<size_t>(limit));
    }
    std::fclose(f);
  }
  bytes = std::min(bytes, usable / 16);
  return std::max(bytes, 64 * kMiB) / 4096 * 4096;
}

inline MemoryBandwidth MeasureMemoryBandwidth([[maybe_unused]] int threads, int passes = 8) {
  const size_t kFloats = MemoryProbeArrayBytes() / sizeof(float);
  auto a = hwy::AllocateAligned<float>(kFloats);
  auto b = hwy::AllocateAligned<float>(kFloats);
  auto c = hwy::AllocateAligned<float>(kFloats);
  if (!a || !b || !c) throw std::bad_alloc();
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
  best.array_bytes = kFloats * sizeof(float);
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
