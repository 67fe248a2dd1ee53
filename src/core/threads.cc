#include "src/core/threads.h"

#include <cblas.h>
#include <omp.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "src/core/check.h"

namespace stretch {
namespace {

thread_local bool t_in_region = false;

// How long a thread spins for an event before it sleeps. Between two regions of a forward pass
// the opening thread runs a few microseconds of serial work, so a short spin keeps the workers
// awake for the next region on a quiet machine; after it they sleep and leave the core to others.
constexpr auto kSpin = std::chrono::microseconds(50);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Waits until `word` differs from `old`: spins for kSpin, then sleeps (futex via atomic::wait).
template <class T>
T WaitWhileEqual(const std::atomic<T>& word, T old) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    const T now = word.load(std::memory_order_acquire);
    if (now != old) return now;
    CpuRelax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) break;
  }
  for (;;) {
    word.wait(old, std::memory_order_acquire);
    const T now = word.load(std::memory_order_acquire);
    if (now != old) return now;
  }
}

// oneDNN and OpenBLAS (their OpenMP builds) follow the calling thread's OpenMP thread count: 1 in
// every thread that calls them, so that each call is one block of a split we make ourselves.
void BlasSingleThreadedHere() {
  thread_local bool done = false;
  if (done) return;
  omp_set_num_threads(1);
  done = true;
}

// The job protocol. `claim_` packs the job's generation (high 32 bits) and its next unclaimed chunk
// (low 32 bits). To open a job the owner (1) closes the claim word under the new generation
// (next = kClosed), (2) stores the job's fields with release, (3) opens the claim word (next = 0),
// (4) bumps `wake_`. A worker reads the claim word, then the fields (acquire), then claims a chunk
// with a compare-exchange on the claim word. If it read a newer job's fields, it read them after
// step (1) of that job (acquire pairs with the release of step 2), so its compare-exchange sees the
// newer generation and fails: a chunk always runs with its own job's fields.
class Pool {
 public:
  static Pool& Get() {
    static Pool pool;
    return pool;
  }

  int threads() const { return threads_; }

  void Resize(int n) {
    std::lock_guard lock(owner_);
    StopWorkers();
    threads_ = n;
    // A worker starts from the wake count of now, so a bump made before it first looks (a job, or
    // the stop of StopWorkers) is not missed.
    const uint32_t seen = wake_.load(std::memory_order_acquire);
    for (int w = 1; w < n; ++w) workers_.emplace_back([this, w, seen] { WorkerLoop(w, seen); });
  }

  void Run(int64_t chunks, threads_internal::ChunkFn fn, void* ctx) {
    if (chunks <= 0) return;
    std::unique_lock lock(owner_, std::defer_lock);
    if (chunks == 1 || threads_ == 1 || t_in_region || !lock.try_lock()) {
      RunInline(chunks, fn, ctx);
      return;
    }
    STRETCH_CHECK(chunks < static_cast<int64_t>(kClosed), "{} chunks in one parallel region",
                  chunks);
    const uint64_t gen = ++generation_;
    claim_.store(gen << 32 | kClosed, std::memory_order_relaxed);
    fn_.store(fn, std::memory_order_release);
    ctx_.store(ctx, std::memory_order_release);
    chunks_.store(static_cast<uint32_t>(chunks), std::memory_order_release);
    done_.store(0, std::memory_order_relaxed);
    claim_.store(gen << 32, std::memory_order_release);
    wake_.store(static_cast<uint32_t>(gen), std::memory_order_release);
    wake_.notify_all();
    t_in_region = true;
    Participate(0);
    t_in_region = false;
    const auto total = static_cast<uint32_t>(chunks);
    for (uint32_t d = done_.load(std::memory_order_acquire); d != total;) {
      d = WaitWhileEqual(done_, d);
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  static constexpr uint32_t kClosed = 0xffffffffu;

  Pool() {
    // The default count, read before this thread's OpenMP count is set to 1 below:
    // OMP_NUM_THREADS when set, else the cores this process may run on.
    const int n = std::max(1, omp_get_max_threads());
    openblas_set_num_threads(1);
    BlasSingleThreadedHere();
    Resize(n);
  }
  ~Pool() {
    std::lock_guard lock(owner_);
    StopWorkers();
  }

  void StopWorkers() {
    if (workers_.empty()) return;
    stop_.store(true, std::memory_order_release);
    wake_.fetch_add(1, std::memory_order_release);
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    stop_.store(false, std::memory_order_release);
  }

  static void RunInline(int64_t chunks, threads_internal::ChunkFn fn, void* ctx) {
    struct Restore {
      bool was = t_in_region;
      ~Restore() { t_in_region = was; }
    } restore;
    t_in_region = true;
    for (int64_t c = 0; c < chunks; ++c) fn(ctx, c, 0);
  }

  // Claims and runs chunks of the current job until none is left.
  void Participate(int worker) {
    for (;;) {
      uint64_t c = claim_.load(std::memory_order_acquire);
      const uint32_t next = static_cast<uint32_t>(c);
      if (next == kClosed) return;
      const threads_internal::ChunkFn fn = fn_.load(std::memory_order_acquire);
      void* const ctx = ctx_.load(std::memory_order_acquire);
      const uint32_t chunks = chunks_.load(std::memory_order_acquire);
      if (next >= chunks) return;
      if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel)) continue;
      try {
        fn(ctx, next, worker);
      } catch (...) {
        std::lock_guard lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) done_.notify_all();
    }
  }

  void WorkerLoop(int worker, uint32_t seen) {
    // Ctrl-C and SIGTERM go to another thread (src/core/stop.cc): never to a worker, whose stack
    // a handler's frame would share. With no stop handlers the main thread takes them (and the
    // default action ends the process).
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    t_in_region = true;  // a region opened from a chunk runs inline
    BlasSingleThreadedHere();
    for (;;) {
      seen = WaitWhileEqual(wake_, seen);
      if (stop_.load(std::memory_order_acquire)) return;
      Participate(worker);
    }
  }

  std::mutex owner_;  // held by the thread that runs a job (and by Resize)
  int threads_ = 1;
  std::vector<std::thread> workers_;
  uint64_t generation_ = 0;
  alignas(64) std::atomic<uint64_t> claim_{kClosed};
  std::atomic<threads_internal::ChunkFn> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<uint32_t> chunks_{0};
  alignas(64) std::atomic<uint32_t> done_{0};
  alignas(64) std::atomic<uint32_t> wake_{0};
  std::atomic<bool> stop_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;  // the first exception a chunk of the current job threw
};

}  // namespace

int NumThreads() { return Pool::Get().threads(); }

void SetNumThreads(int n) {
  if (n < 1) n = 1;
  Pool& pool = Pool::Get();
  if (pool.threads() != n) pool.Resize(n);
}

bool InParallelRegion() { return t_in_region; }

namespace threads_internal {
void Run(int64_t chunks, ChunkFn fn, void* ctx) {
  BlasSingleThreadedHere();
  Pool::Get().Run(chunks, fn, ctx);
}
void SingleThreadedBlas() {
  Pool::Get();
  BlasSingleThreadedHere();
}
}  // namespace threads_internal

}  // namespace stretch
