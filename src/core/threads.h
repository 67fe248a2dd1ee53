// Threading: one pool of worker threads runs every parallel region of the library (element-wise
// loops, the attention kernels, the optimizer, matrix products split into blocks, scoring windows).
//
// Why not OpenMP: its barriers spin while a partner thread is preempted, so on a machine shared
// with other work (a compiler, another run) a region waits for the slowest thread's next time
// slice, and two spinning teams fight for the same cores. Here:
//   - work is handed out in chunks from a shared counter (dynamic), so a thread that is preempted
//     holds back at most the chunk it is running; the others take the rest;
//   - the thread that opens a region works too, and returns as soon as every chunk is done, without
//     waiting for an idle worker to wake up and notice;
//   - waiting is bounded: a worker spins briefly for the next region, then sleeps (futex).
// The matrix libraries (oneDNN, OpenBLAS) run single-threaded (each call is a block of our own
// split: src/kernels/ops.cc), so no second thread team exists. A region opened inside a region (or while another thread holds the
// pool) runs inline on the calling thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace stretch {

// Threads a parallel region uses: the last SetNumThreads, else OMP_NUM_THREADS, else every core
// this process may run on.
int NumThreads();
// Sets the threads every parallel region uses (the pool's workers plus the calling thread); values
// below 1 mean 1.
void SetNumThreads(int n);
// Whether the calling thread is running a chunk of a parallel region (a nested region runs inline).
bool InParallelRegion();

namespace threads_internal {
using ChunkFn = void (*)(void* ctx, int64_t chunk, int worker);
// Runs fn(ctx, c, worker) for every chunk c in [0, chunks), each exactly once, spread over the
// pool; worker is in [0, NumThreads()) and no two chunks run at once with the same worker.
// Exceptions thrown by a chunk reach the caller (the first one, after every chunk has finished).
void Run(int64_t chunks, ChunkFn fn, void* ctx);
// Makes BLAS calls from this thread single-threaded (the pool splits matrix products itself).
void SingleThreadedBlas();
}  // namespace threads_internal

// Calls body(item, worker) for item = 0 .. n-1, handing items out one at a time in order (the first
// items first: put the heaviest first). `worker` (0 .. NumThreads()-1) indexes per-thread scratch.
template <class F>
void ParallelForEach(int64_t n, F&& body) {
  using Body = std::remove_reference_t<F>;
  threads_internal::Run(
      n, [](void* ctx, int64_t item, int worker) { (*static_cast<Body*>(ctx))(item, worker); },
      const_cast<void*>(static_cast<const void*>(&body)));
}

// The grain for ParallelFor over n items whose whole loop does `work` units: ranges of at least
// `min_work` units, so a loop of less work than that runs on the calling thread alone.
inline int64_t WorkGrain(int64_t n, int64_t work, int64_t min_work) {
  if (work <= 0 || n <= 0) return 1;
  return std::max<int64_t>(1, (n * min_work + work - 1) / work);
}

// Calls body(begin, end) over disjoint ranges covering [0, n), each at least `grain` items long
// (the last may be shorter): about four ranges per thread, so a slow thread is made up for. With
// n <= grain (or one thread) it is a single call on the calling thread.
template <class F>
void ParallelFor(int64_t n, int64_t grain, F&& body) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t threads = NumThreads();
  int64_t chunks = threads <= 1 || n <= grain ? 1 : std::min<int64_t>(4 * threads, n / grain);
  if (chunks < 1) chunks = 1;
  const int64_t size = (n + chunks - 1) / chunks;
  chunks = (n + size - 1) / size;
  if (chunks == 1) return body(int64_t{0}, n);
  ParallelForEach(chunks, [&](int64_t c, int) {
    const int64_t begin = c * size;
    body(begin, std::min(n, begin + size));
  });
}

}  // namespace stretch
