// The one rule for every input (src/core/input_file.h): a regular file or a symlink to one is
// read; a device, a FIFO, a socket or a directory is refused by name before any read, and a FIFO
// is never opened (open() would wait for a writer).
#include "src/core/input_file.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "tests/testing/files.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using testing::ErrorOf;

class InputFileTest : public testing::TempDirTest {
 protected:
  InputFileTest() : TempDirTest("stretch_input_file_") {}
};

TEST_F(InputFileTest, ARegularFileAndASymlinkToOneAreRead) {
  const std::string file = File("a.txt", "hello");
  fs::create_symlink(file, Path("link.txt"));
  EXPECT_EQ(ReadInputFile(file, "a text file"), "hello");
  EXPECT_EQ(ReadInputFile(Path("link.txt"), "a text file"), "hello");
  EXPECT_NO_THROW(CheckRegularInput(Path("link.txt"), "a text file"));
  EXPECT_FALSE(CheckRegularInputOrDirectory(file, "a text file"));
  EXPECT_TRUE(CheckRegularInputOrDirectory(dir_.string(), "a text file"));
  EXPECT_EQ(InputFile(file, "a text file").size(), 5);
  EXPECT_EQ(ReadInputHead(file, 3), "hel");
  EXPECT_EQ(ReadInputHead(file, 100), "hello");
}

TEST_F(InputFileTest, ACharacterDeviceIsRefusedByName) {
  const std::string expected =
      "/dev/zero: a character device, not a regular file: expected a text file";
  EXPECT_EQ(ErrorOf([] { CheckRegularInput("/dev/zero", "a text file"); }), expected);
  EXPECT_EQ(ErrorOf([] { ReadInputFile("/dev/zero", "a text file"); }), expected);
  EXPECT_EQ(ErrorOf([] { InputFile("/dev/zero", "a text file"); }), expected);
  EXPECT_EQ(ErrorOf([] { CheckRegularInputOrDirectory("/dev/zero", "a text file", "--data"); }),
            "--data " + expected);
  EXPECT_EQ(ReadInputHead("/dev/zero", 4), "");
}

// Run with nobody writing: a reader that opened the FIFO would block here for ever (the test
// binary's own timeout is the guard).
TEST_F(InputFileTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  const std::string fifo = Path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  const std::string expected = fifo + ": a FIFO, not a regular file: expected a tokenizer";
  EXPECT_EQ(ErrorOf([&] { CheckRegularInput(fifo, "a tokenizer"); }), expected);
  EXPECT_EQ(ErrorOf([&] { InputFile(fifo, "a tokenizer"); }), expected);
  EXPECT_EQ(ErrorOf([&] { ReadInputFile(fifo, "a tokenizer"); }), expected);
  EXPECT_EQ(ReadInputHead(fifo, 4), "");
}

TEST_F(InputFileTest, ASocketAndADirectoryAreRefusedByName) {
  const std::string socket_path = Path("sock");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(socket_path.size(), sizeof(addr.sun_path));
  std::strcpy(addr.sun_path, socket_path.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(ErrorOf([&] { ReadInputFile(socket_path, "a JSON file"); }),
            socket_path + ": a socket, not a regular file: expected a JSON file");
  ::close(fd);
  EXPECT_EQ(ErrorOf([&] { ReadInputFile(dir_.string(), "a JSON file"); }),
            dir_.string() + ": a directory, not a regular file: expected a JSON file");
}

TEST_F(InputFileTest, AMissingPathIsNamedWithWhatWasExpected) {
  const std::string missing = Path("absent");
  EXPECT_EQ(ErrorOf([&] { CheckRegularInput(missing, "a JSON file", "--config"); }),
            "--config " + missing + ": no such file: expected a JSON file");
  EXPECT_EQ(ErrorOf([&] { CheckRegularInputOrDirectory(missing, "a corpus"); }),
            missing + ": no such file or directory: expected a corpus");
  EXPECT_EQ(ErrorOf([&] { ReadInputFile(missing, "a JSON file"); }),
            missing + ": cannot open for reading: No such file or directory");
  EXPECT_EQ(ReadInputHead(missing, 4), "");
}

TEST_F(InputFileTest, TheSizeCapIsNamed) {
  const std::string file = File("big.json", std::string(100, 'x'));
  EXPECT_EQ(ReadInputFile(file, "a JSON file", 100).size(), 100u);
  EXPECT_EQ(ErrorOf([&] { ReadInputFile(file, "a JSON file", 99); }),
            file + ": 100 bytes: expected a JSON file of at most 99 bytes");
}

}  // namespace
}  // namespace stretch
