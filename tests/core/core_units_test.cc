// The small units of src/core that have no file of their own: the always-on check (check.h), the
// aligned buffers (aligned.h), the thread pool (threads.h), the timer and the memory readings
// (timer.h), the progress line (progress.h), and the words of messages (words.h).
#include <cblas.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "src/core/aligned.h"
#include "src/core/check.h"
#include "src/core/error.h"
#include "src/core/progress.h"
#include "src/core/threads.h"
#include "src/core/timer.h"
#include "src/core/words.h"

namespace stretch {
namespace {

// ---- STRETCH_CHECK -----------------------------------------------------------------------------

// Death tests fork; the thread tests below may have started the thread pool, so the child re-runs
// the binary up to the statement instead of forking a threaded process.
class CheckDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// `text` as a POSIX extended regular expression that matches it literally (death tests match
// what the child wrote to stderr against a regex).
std::string EscapeRegex(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

int CountedValue(int* calls) {
  ++*calls;
  return 7;
}

TEST_F(CheckDeathTest, FailureNamesFileLineConditionAndMessageAndAborts) {
  // This build is the one the project ships (Release defines NDEBUG): an assert would vanish
  // here, the check must not.
  const int line = __LINE__ + 1;
  const auto fail = [] { STRETCH_CHECK(1 + 1 == 3, "x={} y={}", 7, "z"); };
  const std::string expected = std::string(__FILE__) + ":" + std::to_string(line) +
                               ": internal check failed: 1 + 1 == 3: x=7 y=z";
  EXPECT_EXIT(fail(), ::testing::KilledBySignal(SIGABRT), EscapeRegex(expected));
}

TEST_F(CheckDeathTest, FailureWithoutMessageEndsAtTheCondition) {
  const int line = __LINE__ + 1;
  const auto fail = [](int n) { STRETCH_CHECK(n > 0); };
  const std::string expected =
      std::string(__FILE__) + ":" + std::to_string(line) + ": internal check failed: n > 0\n";
  EXPECT_EXIT(fail(-1), ::testing::KilledBySignal(SIGABRT), EscapeRegex(expected));
}

TEST(Check, PassingCheckEvaluatesItsConditionOnceAndNeverFormatsTheMessage) {
  int cond_calls = 0, message_calls = 0;
  STRETCH_CHECK(CountedValue(&cond_calls) == 7, "{}", CountedValue(&message_calls));
  EXPECT_EQ(cond_calls, 1);
  EXPECT_EQ(message_calls, 0);
}

// ---- AlignedVector ------------------------------------------------------------------------------

template <typename T, size_t kAlign>
bool IsAligned(const std::vector<T, AlignedAllocator<T, kAlign>>& v) {
  return reinterpret_cast<std::uintptr_t>(v.data()) % kAlign == 0;
}

TEST(AlignedVector, DataIsOnA64ByteBoundaryForEverySizeAndType) {
  // Sizes that are not multiples of 64 bytes, so that a plain allocator would often return a
  // pointer 16 bytes past a boundary: many live buffers at once make a lucky pass unlikely.
  std::vector<AlignedVector<float>> floats;
  std::vector<AlignedVector<char>> chars;
  std::vector<AlignedVector<double>> doubles;
  for (size_t n = 1; n <= 200; n += 3) {
    floats.emplace_back(n, 1.5f);
    chars.emplace_back(n, 'a');
    doubles.emplace_back(n, 2.0);
    ASSERT_TRUE(IsAligned(floats.back())) << n;
    ASSERT_TRUE(IsAligned(chars.back())) << n;
    ASSERT_TRUE(IsAligned(doubles.back())) << n;
    EXPECT_EQ(floats.back()[n - 1], 1.5f);  // value-filled as a std::vector
  }
}

TEST(HugePageVector, LargeBuffersSitOnA2MiBBoundarySmallOnesOn64Bytes) {
  // The KV cache's buffers: from 2 MiB on, aligned to 2 MiB (where a huge page can start); below,
  // 64 bytes as AlignedVector. Grown across the threshold and back, value-filled, copied.
  constexpr size_t kHuge = size_t{2} << 20;
  const auto at = [](const void* p, size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a; };
  std::vector<HugePageVector<float>> live;
  for (const size_t n :
       {size_t{1}, size_t{1000}, kHuge / 4 - 1, kHuge / 4, kHuge / 4 + 17, 3 * kHuge / 4 + 5}) {
    live.emplace_back(n, 2.5f);
    const HugePageVector<float>& v = live.back();
    EXPECT_EQ(at(v.data(), n * sizeof(float) >= kHuge ? kHuge : 64), 0u) << n;
    EXPECT_EQ(v.front(), 2.5f);
    EXPECT_EQ(v.back(), 2.5f);
  }
  HugePageVector<uint16_t> grown(10, 7);
  grown.resize(kHuge, 9);  // 4 MiB of 16-bit values
  EXPECT_EQ(at(grown.data(), kHuge), 0u);
  EXPECT_EQ(grown[9], 7);
  EXPECT_EQ(grown.back(), 9);
  const HugePageVector<uint16_t> copy = grown;
  EXPECT_EQ(at(copy.data(), kHuge), 0u);
  EXPECT_EQ(copy, grown);
  grown.resize(5);
  grown.shrink_to_fit();  // back below the threshold: 64-byte alignment, freed with the same
  EXPECT_EQ(at(grown.data(), 64), 0u);
  EXPECT_EQ(grown[4], 7);
}

TEST(AlignedVector, StaysAlignedWhenItGrowsIsCopiedOrMoved) {
  AlignedVector<float> v;
  const float* last = nullptr;
  int reallocations = 0;
  for (int i = 0; i < 5000; ++i) {
    v.push_back(static_cast<float>(i));
    if (v.data() != last) {
      ++reallocations;
      last = v.data();
      ASSERT_TRUE(IsAligned(v)) << "after " << v.size() << " elements";
    }
  }
  EXPECT_GT(reallocations, 5);  // the loop did exercise reallocation
  for (int i = 0; i < 5000; ++i) ASSERT_EQ(v[static_cast<size_t>(i)], static_cast<float>(i));
  AlignedVector<float> copy = v;
  EXPECT_TRUE(IsAligned(copy));
  EXPECT_EQ(copy, v);
  AlignedVector<float> moved = std::move(copy);
  EXPECT_TRUE(IsAligned(moved));
  moved.resize(7);
  moved.shrink_to_fit();
  EXPECT_TRUE(IsAligned(moved));
}

TEST(AlignedVector, AllocatorHonoursALargerAlignment) {
  std::vector<std::vector<int, AlignedAllocator<int, 256>>> vs;
  for (size_t n = 1; n < 40; ++n) {
    vs.emplace_back(n, 3);
    ASSERT_TRUE(IsAligned(vs.back())) << n;
  }
  // Rebinding keeps the alignment (what a container's node allocator relies on).
  using Rebound = AlignedAllocator<int, 256>::rebind<double>::other;
  static_assert(std::is_same_v<Rebound, AlignedAllocator<double, 256>>);
  EXPECT_TRUE(AlignedAllocator<float>() == AlignedAllocator<float>());
}

// ---- threads ------------------------------------------------------------------------------------

// Restores the thread count a test changed, so later tests of this binary are not affected.
class ThreadsTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = NumThreads(); }
  void TearDown() override { SetNumThreads(saved_); }
  int saved_ = 1;
};

// The workers a region of many small items actually used (each item records its worker index).
std::vector<int> WorkersOfARegion(int64_t items) {
  std::vector<int> worker_of(static_cast<size_t>(items), -1);
  ParallelForEach(items, [&](int64_t i, int worker) {
    volatile double x = 0;  // a little work per item, so that every worker can join in
    for (int k = 0; k < 20000; ++k) x = x + k;
    worker_of[static_cast<size_t>(i)] = worker;
  });
  return worker_of;
}

TEST_F(ThreadsTest, SetThenGetRoundTripsAndRegionsUseThatManyWorkers) {
  EXPECT_GE(NumThreads(), 1);
  for (const int n : {1, 3, 2}) {
    SetNumThreads(n);
    EXPECT_EQ(NumThreads(), n);
    // BLAS is single-threaded: the pool splits matrix products itself (src/kernels/ops.cc).
    EXPECT_EQ(openblas_get_num_threads(), 1);
    for (const int w : WorkersOfARegion(64)) {
      EXPECT_GE(w, 0);  // every item ran
      EXPECT_LT(w, n);  // on one of the n workers
    }
  }
}

TEST_F(ThreadsTest, CountsBelowOneClampToOne) {
  for (const int n : {0, -1, -1000}) {
    SetNumThreads(3);
    SetNumThreads(n);
    EXPECT_EQ(NumThreads(), 1) << n;
    for (const int w : WorkersOfARegion(8)) EXPECT_EQ(w, 0) << n;
  }
}

TEST_F(ThreadsTest, ParallelForCoversEveryIndexOnceInRangesOfAtLeastTheGrain) {
  SetNumThreads(2);
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{100003}}) {
    for (const int64_t grain : {int64_t{1}, int64_t{64}, int64_t{5000}}) {
      std::vector<int> hits(static_cast<size_t>(n), 0);
      std::vector<std::pair<int64_t, int64_t>> ranges;
      std::mutex mu;
      ParallelFor(n, grain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        std::lock_guard lock(mu);
        ranges.emplace_back(b, e);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << n << " " << i;
      std::sort(ranges.begin(), ranges.end());
      for (size_t r = 0; r + 1 < ranges.size(); ++r) {  // all but the last range: >= grain
        EXPECT_GE(ranges[r].second - ranges[r].first, std::min(grain, n)) << n << " " << grain;
      }
    }
  }
}

TEST_F(ThreadsTest, ANestedRegionRunsInlineOnTheCallingWorker) {
  SetNumThreads(2);
  std::vector<int> outer(16, -1), inner(16 * 8, -1);
  ParallelForEach(16, [&](int64_t i, int worker) {
    EXPECT_TRUE(InParallelRegion());
    outer[static_cast<size_t>(i)] = worker;
    ParallelForEach(8, [&](int64_t j, int inner_worker) {
      inner[static_cast<size_t>(i * 8 + j)] = inner_worker;
    });
  });
  EXPECT_FALSE(InParallelRegion());
  for (const int w : inner) EXPECT_EQ(w, 0);  // inline: one worker
  for (const int w : outer) EXPECT_GE(w, 0);
}

TEST_F(ThreadsTest, AnExceptionInAChunkReachesTheCallerAfterTheRegion) {
  SetNumThreads(2);
  std::atomic<int> ran{0};
  EXPECT_THROW(ParallelForEach(100,
                               [&](int64_t i, int) {
                                 ran++;
                                 if (i == 37) throw Error("chunk 37 failed");
                               }),
               Error);
  EXPECT_EQ(ran.load(), 100);  // the other chunks still ran: nothing is left half done
  EXPECT_FALSE(InParallelRegion());
  // The pool is usable again.
  int64_t sum = 0;
  std::mutex mu;
  ParallelForEach(10, [&](int64_t i, int) {
    std::lock_guard lock(mu);
    sum += i;
  });
  EXPECT_EQ(sum, 45);
}

TEST_F(ThreadsTest, ManyTinyRegionsInARowLoseNoItem) {
  SetNumThreads(2);
  std::atomic<int64_t> total{0};
  for (int r = 0; r < 20000; ++r) {
    ParallelForEach(3, [&](int64_t i, int) { total += i + 1; });
  }
  EXPECT_EQ(total.load(), 20000 * 6);
}

// ---- Timer and memory ---------------------------------------------------------------------------

TEST(Timer, ReadingsAreNonNegativeAndNeverDecrease) {
  Timer t;
  double previous = t.Seconds();
  EXPECT_GE(previous, 0.0);
  for (int i = 0; i < 10000; ++i) {
    const double now = t.Seconds();
    ASSERT_GE(now, previous) << i;
    previous = now;
  }
}

TEST(Timer, ResetRestartsTheClock) {
  Timer early;
  // Spin (no sleep: nothing is timed here) until the clock has visibly moved past early's start.
  while (early.Seconds() < 1e-3) {
  }
  Timer late;
  // Read late first: early started before late and is read after it, so it must show more.
  const double late_s = late.Seconds();
  const double early_s = early.Seconds();
  EXPECT_LE(late_s, early_s);
  EXPECT_GE(early_s, 1e-3);
  early.Reset();  // early now starts after late; read it first again
  const double early_after = early.Seconds();
  const double late_after = late.Seconds();
  EXPECT_GE(early_after, 0.0);
  EXPECT_LE(early_after, late_after);
}

TEST(Memory, ResidentSizesAreInBytesAndThePeakBoundsTheCurrent) {
  const int64_t current = CurrentRssBytes();
  const int64_t peak = PeakRssBytes();
  // A running test binary holds at least a few hundred kB; /proc gives kB, so bytes are x1024.
  EXPECT_GT(current, 100 * 1024);
  EXPECT_EQ(current % 1024, 0);
  EXPECT_EQ(peak % 1024, 0);
  EXPECT_GE(peak, current);  // the peak is read later and never decreases

  constexpr int64_t kTouched = 64 << 20;
  {
    AlignedVector<char> block(static_cast<size_t>(kTouched), 1);  // written, so resident
    const int64_t while_held = CurrentRssBytes();
    // Half the block as the bound: room for pages the kernel may reclaim under memory pressure,
    // yet a reading in kB instead of bytes (1024 times smaller) fails it.
    EXPECT_GE(while_held, kTouched / 2) << while_held;
    EXPECT_EQ(block[static_cast<size_t>(kTouched - 1)], 1);
  }
  EXPECT_GE(PeakRssBytes(), kTouched / 2);  // the high-water mark keeps the block after it is freed
}

// ---- Progress -----------------------------------------------------------------------------------

// Points fd 2 at something else for the test's duration: a pseudo-terminal (Progress's tty mode)
// or a pipe (logs). Progress decides which at construction, so it is built inside the scope.
// What was written is read back up to an end marker written after the code under test, so that
// "nothing printed" is checked without waiting for a timeout.
class StderrRedirect {
 public:
  explicit StderrRedirect(bool terminal) {
    std::fflush(stderr);
    saved_ = dup(2);
    int fds[2] = {-1, -1};
    if (terminal) {
      if (openpty(&fds[0], &fds[1], nullptr, nullptr, nullptr) != 0) return;
      termios raw{};
      tcgetattr(fds[1], &raw);
      cfmakeraw(&raw);  // no "\n" -> "\r\n": bytes arrive as written
      tcsetattr(fds[1], TCSANOW, &raw);
    } else if (pipe(fds) != 0) {
      return;
    }
    read_fd_ = fds[0];
    dup2(fds[1], 2);
    close(fds[1]);
    ok_ = true;
  }
  ~StderrRedirect() { Restore(); }
  bool ok() const { return ok_; }

  // Everything written to fd 2 since the redirection; restores fd 2.
  std::string Finish() {
    static constexpr char kEnd[] = "<end of stderr>";
    std::fflush(stderr);
    if (write(2, kEnd, sizeof kEnd - 1) != static_cast<ssize_t>(sizeof kEnd - 1)) return "?";
    std::string out;
    char buf[512];
    while (out.find(kEnd) == std::string::npos) {
      pollfd p{read_fd_, POLLIN, 0};
      if (poll(&p, 1, 10000) <= 0) break;  // the marker never came: the test fails on it below
      const ssize_t n = read(read_fd_, buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    Restore();
    const size_t end = out.find(kEnd);
    EXPECT_NE(end, std::string::npos) << out;
    return end == std::string::npos ? out : out.substr(0, end);
  }

 private:
  void Restore() {
    if (saved_ >= 0) {
      std::fflush(stderr);
      dup2(saved_, 2);
      close(saved_);
      saved_ = -1;
    }
    if (read_fd_ >= 0) {
      close(read_fd_);
      read_fd_ = -1;
    }
  }
  int saved_ = -1, read_fd_ = -1;
  bool ok_ = false;
};

// Whether `text` is `pattern` with each '#' standing for one or more decimal digits.
bool MatchesWithNumbers(std::string_view text, std::string_view pattern) {
  size_t i = 0;
  for (const char p : pattern) {
    if (p == '#') {
      const size_t start = i;
      while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
      if (i == start) return false;
    } else if (i >= text.size() || text[i++] != p) {
      return false;
    }
  }
  return i == text.size();
}

// Waits (asserting nothing about time) until `t` reads at least `seconds`.
void WaitFor(const Timer& t, double seconds) {
  while (t.Seconds() < seconds) usleep(10000);
}

TEST(Progress, ShortWorkInALogStaysQuiet) {
  StderrRedirect err(/*terminal=*/false);
  ASSERT_TRUE(err.ok());
  {
    // Not a terminal: the first line would come after 10 s of work; this loop takes far less.
    Progress p("score", 5, "windows");
    for (int64_t done = 0; done <= 5; ++done) p.Update(done);
    p.Finish();
  }
  EXPECT_EQ(err.Finish(), "");
}

TEST(Progress, OnATerminalRewritesOneLineAndEndsIt) {
  StderrRedirect err(/*terminal=*/true);
  if (!err.ok()) GTEST_SKIP() << "no pseudo-terminal on this machine (openpty failed)";
  {
    Timer t;
    Progress p("score", 10, "windows");
    WaitFor(t, 0.6);
    p.Update(3);
    p.Update(10);  // the last step always prints once something has
    p.Finish();
    p.Finish();    // a second Finish adds nothing
    p.Update(10);  // nor does an Update after Finish
  }                // nor the destructor
  const std::string out = err.Finish();
  // Each line starts with a carriage return and ends by clearing the rest of the terminal line;
  // the seconds depend on the machine's speed, so they are matched as numbers only (#).
  EXPECT_TRUE(MatchesWithNumbers(out,
                                 "\rscore: 3/10 windows (30.0%), #.# s, ~# s left\x1b[K"
                                 "\rscore: 10/10 windows (100.0%), #.# s, ~0 s left\x1b[K"
                                 "\n"))
      << "got: " << ::testing::PrintToString(out);
}

TEST(Progress, DisabledPrintsNothingEvenOnATerminal) {
  StderrRedirect err(/*terminal=*/true);
  if (!err.ok()) GTEST_SKIP() << "no pseudo-terminal on this machine (openpty failed)";
  {
    Timer t;
    Progress p("score", 4, "windows", /*enabled=*/false);
    WaitFor(t, 0.6);
    for (int64_t done = 0; done <= 4; ++done) p.Update(done);
  }
  EXPECT_EQ(err.Finish(), "");
}

TEST(Progress, ZeroTotalReportsComplete) {
  StderrRedirect err(/*terminal=*/true);
  if (!err.ok()) GTEST_SKIP() << "no pseudo-terminal on this machine (openpty failed)";
  {
    Timer t;
    Progress p("tokenize", 0, "files");
    WaitFor(t, 0.6);
    p.Update(0);
  }
  const std::string out = err.Finish();
  EXPECT_TRUE(MatchesWithNumbers(out, "\rtokenize: 0/0 files (100.0%), #.# s, ~0 s left\x1b[K\n"))
      << ::testing::PrintToString(out);
}

}  // namespace
}  // namespace stretch

TEST(Words, CountsListsAndPrintableBytes) {
  EXPECT_EQ(stretch::Counted(1, "window"), "1 window");
  EXPECT_EQ(stretch::Counted(2, "window"), "2 windows");
  EXPECT_EQ(stretch::Counted(0, "copy", "copies"), "0 copies");
  EXPECT_EQ(stretch::JoinNames({"a", "b", "c"}), "a, b and c");
  // Space and '~' (0x20, 0x7e) are printable; DEL (0x7f), a control byte, a NUL and the bytes of a
  // UTF-8 letter are not, and each such byte becomes one stand-in.
  EXPECT_TRUE(stretch::IsPrintableAscii(' '));
  EXPECT_TRUE(stretch::IsPrintableAscii('~'));
  EXPECT_FALSE(stretch::IsPrintableAscii('\x7f'));
  EXPECT_FALSE(stretch::IsPrintableAscii('\x1f'));
  const std::string bytes("a b~\x7f\n\0\xc3\xa9z", 10);
  EXPECT_EQ(stretch::PrintableAscii(bytes, '?'), "a b~?????z");
  EXPECT_EQ(stretch::PrintableAscii("", '.'), "");
}
