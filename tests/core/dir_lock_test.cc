// The folder lock (src/core/dir_lock.h). Two DirLocks in one process open the lock file twice, and
// flock(2) treats two opens as two holders, so one process shows what two processes would see.
#include "src/core/dir_lock.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "src/core/error.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

class DirLockTest : public testing::TempDirTest {
 protected:
  DirLockTest() : TempDirTest("stretch_dir_lock_") {}
  std::string Lock() const { return DirLock::PathIn(dir_.string()); }
};

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_F(DirLockTest, ASecondHolderIsRefusedWithTheFirstOnesPid) {
  std::optional<DirLock> first;
  first.emplace(Lock(), "--out runs/a");
  EXPECT_FALSE(first->takeover_note());
  const std::optional<LockHolder> holder = ReadLockHolder(Lock());
  ASSERT_TRUE(holder);
  EXPECT_EQ(holder->pid, static_cast<long long>(::getpid()));
  EXPECT_FALSE(holder->since.empty());
  const std::string message = ErrorOf([&] { DirLock second(Lock(), "--out runs/a"); });
  EXPECT_NE(message.find("--out runs/a is in use by another stretch process, pid " +
                         std::to_string(::getpid())),
            std::string::npos)
      << message;
  // Let go cleanly: the next holder takes it without a note, and the file names nobody between.
  first.reset();
  EXPECT_FALSE(ReadLockHolder(Lock()));
  DirLock third(Lock(), "--out runs/a");
  EXPECT_FALSE(third.takeover_note());
}

// The holder writes its line just after it takes the lock: a process refused in between reads an
// empty file, and waits a moment for the line, so that it can name the holder.
TEST_F(DirLockTest, ARefusalWaitsForTheHoldersLineToNameIt) {
  const int fd = ::open(Lock().c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);  // held, and the file still empty
  std::thread writer([fd] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::string line = "424242\t2026-12-04 21:00:00\tstretch train --out runs/a\n";
    [[maybe_unused]] const ssize_t n = ::pwrite(fd, line.data(), line.size(), 0);
  });
  const std::string message = ErrorOf([&] { DirLock second(Lock(), "--out runs/a"); });
  writer.join();
  ::close(fd);
  EXPECT_NE(message.find("in use by another stretch process, pid 424242"), std::string::npos)
      << message;
}

// A holder killed while it held the lock leaves its line in the file (the kernel drops the lock
// itself): the next process takes the lock and says whose it was.
TEST_F(DirLockTest, ALockLeftByAKilledHolderIsTakenOverWithANote) {
  {
    std::ofstream f(Lock());
    f << "999999999\t2026-11-28 10:00:00\tstretch lab --quick\n";
  }
  DirLock lock(Lock(), "--out lab");
  ASSERT_TRUE(lock.takeover_note());
  EXPECT_NE(lock.takeover_note()->find("took over the lock of pid 999999999 (since 2026-11-28 "
                                       "10:00:00): stretch lab --quick"),
            std::string::npos)
      << *lock.takeover_note();
  EXPECT_EQ(ReadLockHolder(Lock())->pid, static_cast<long long>(::getpid()));
}

TEST_F(DirLockTest, SharedHoldersExcludeAnExclusiveOneAndTheOtherWayRound) {
  std::optional<DirLock> a, b;
  a.emplace(Lock(), "lab", DirLock::Mode::kShared);
  b.emplace(Lock(), "lab", DirLock::Mode::kShared);  // two ranks of one lab
  EXPECT_NE(ErrorOf([&] { DirLock x(Lock(), "lab"); }).find("lab is in use"), std::string::npos);
  a.reset();
  b.reset();
  DirLock x(Lock(), "lab");
  EXPECT_NE(ErrorOf([&] { DirLock s(Lock(), "lab", DirLock::Mode::kShared); }).find("in use"),
            std::string::npos);
}

TEST_F(DirLockTest, AMissingFolderIsAnErrorNamingIt) {
  const std::string path = Path("no/such/dir/.stretch.lock");
  const std::string message = ErrorOf([&] { DirLock l(path, "--out no/such/dir"); });
  EXPECT_NE(message.find("--out no/such/dir: cannot open its lock file"), std::string::npos)
      << message;
}

}  // namespace
}  // namespace stretch
