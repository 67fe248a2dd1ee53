// Stop signals (src/core/stop.h) are taken by a thread of their own: the thread that installs the
// handlers blocks SIGINT and SIGTERM, so do the threads it starts afterwards and the thread pool's
// workers, and a signal sent to the process still reaches StopSignal(). (A handler run on a
// computing thread's stack corrupted the heap of `stretch train` about one Ctrl-C in twenty.)
#include "src/core/stop.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include "src/core/threads.h"

namespace stretch {
namespace {

bool Blocks(int signal) {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  return sigismember(&now, signal) == 1;
}

TEST(StopSignals, TakenByTheirOwnThreadNeverByAWorker) {
  // The pool's workers block them whether or not the handlers are installed.
  std::atomic<int> workers_unblocked{0};
  const std::thread::id caller = std::this_thread::get_id();
  ParallelForEach(256, [&](int64_t, int) {
    if (std::this_thread::get_id() != caller && (!Blocks(SIGINT) || !Blocks(SIGTERM))) {
      workers_unblocked++;
    }
  });
  EXPECT_EQ(workers_unblocked.load(), 0);

  InstallStopHandlers();
  InstallStopHandlers();  // idempotent
  EXPECT_TRUE(Blocks(SIGINT));
  EXPECT_TRUE(Blocks(SIGTERM));
  bool child_blocks = false;
  std::thread([&] { child_blocks = Blocks(SIGINT) && Blocks(SIGTERM); }).join();
  EXPECT_TRUE(child_blocks);

  SetStopSignalForTest(0);
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  for (int i = 0; i < 5000 && StopSignal() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(StopSignal(), SIGTERM);
  SetStopSignalForTest(0);
}

}  // namespace
}  // namespace stretch
