// src/io/output_file.h: paths compared by what they point at, and outputs that appear whole or not
// at all.
#include "src/io/output_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/files.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using testing::ErrorOf;
using testing::ReadBytes;
using testing::WriteBytes;

class OutputFileTest : public testing::TempDirTest {
 protected:
  OutputFileTest() : TempDirTest("stretch_output_file_") {}
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());  // a directory lists in no particular order
    return names;
  }
};

TEST_F(OutputFileTest, SamePathSeesThroughSpellingsAndLinks) {
  WriteBytes(Path("a"), "a");
  WriteBytes(Path("b"), "b");
  fs::create_directories(Path("d"));
  fs::create_symlink(Path("a"), Path("sym"));
  fs::create_hard_link(Path("a"), Path("hard"));
  EXPECT_TRUE(SamePath(Path("a"), Path("d/../a")));
  EXPECT_TRUE(SamePath(Path("a"), Path("./a")));
  EXPECT_TRUE(SamePath(Path("a"), Path("sym")));
  EXPECT_TRUE(SamePath(Path("a"), Path("hard")));
  EXPECT_FALSE(SamePath(Path("a"), Path("b")));
  // Files that do not exist yet compare by their resolved paths.
  EXPECT_TRUE(SamePath(Path("new"), Path("d/../new")));
  EXPECT_FALSE(SamePath(Path("new"), Path("new2")));
  // A link to a directory resolves for a file that does not exist under it.
  fs::create_directory_symlink(Path("d"), Path("dlink"));
  EXPECT_TRUE(SamePath(Path("d/x"), Path("dlink/x")));
}

TEST_F(OutputFileTest, PathWithinComparesWholeComponents) {
  fs::create_directories(Path("run/sub"));
  EXPECT_TRUE(PathWithin(Path("run/sub/x"), Path("run")));
  EXPECT_TRUE(PathWithin(Path("run"), Path("run/")));
  EXPECT_TRUE(PathWithin(Path("run/../run/x"), Path("run")));
  EXPECT_FALSE(PathWithin(Path("run2/x"), Path("run")));  // a shared prefix is not containment
  EXPECT_FALSE(PathWithin(Path("x"), Path("run")));
}

TEST_F(OutputFileTest, CheckOutputPathsNamesBothSides) {
  WriteBytes(Path("model.bin"), "m");
  const std::vector<NamedPath> inputs = {{"--model", Path("model.bin")}, {"--tokenizer", ""}};
  std::vector<NamedPath> outputs = {{"--json-out", Path("r.json")}, {"--per-token", ""}};
  CheckOutputPaths(inputs, outputs);  // distinct, and empty paths are not written
  outputs[1].path = Path("./model.bin");
  const std::string over = ErrorOf([&] { CheckOutputPaths(inputs, outputs); });
  EXPECT_NE(over.find("--per-token"), std::string::npos) << over;
  EXPECT_NE(over.find("--model"), std::string::npos) << over;
  outputs[1].path = Path("r.json");
  const std::string twice = ErrorOf([&] { CheckOutputPaths(inputs, outputs); });
  EXPECT_NE(twice.find("are the same file"), std::string::npos) << twice;
}

TEST_F(OutputFileTest, CheckInputsOutsideRefusesAnInputInTheDirectory) {
  fs::create_directories(Path("run"));
  const std::vector<NamedPath> ok = {{"--data", Path("corpus")}, {"--init", ""}};
  CheckInputsOutside(ok, {"--out", Path("run")});
  const std::vector<NamedPath> bad = {{"--init", Path("run/step-00000010.safetensors")}};
  const std::string e = ErrorOf([&] { CheckInputsOutside(bad, {"--out", Path("run")}); });
  EXPECT_NE(e.find("--init"), std::string::npos) << e;
  EXPECT_NE(e.find("inside --out"), std::string::npos) << e;
}

TEST_F(OutputFileTest, CommittedFileReplacesTheTarget) {
  WriteBytes(Path("out.txt"), "old");
  {
    AtomicFile f(Path("out.txt"));
    f.Write("new ");
    EXPECT_EQ(ReadBytes(Path("out.txt")), "old") << "the target changes only on Commit";
    f.Write("text");
    f.Commit();
  }
  EXPECT_EQ(ReadBytes(Path("out.txt")), "new text");
  EXPECT_EQ(Names(), std::vector<std::string>{"out.txt"});
}

TEST_F(OutputFileTest, AbandonedFileLeavesTheTargetAndNoTemporaryFile) {
  WriteBytes(Path("out.txt"), "old");
  try {
    AtomicFile f(Path("out.txt"));
    f.Write("half of it");
    throw std::runtime_error("the writer fails");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(ReadBytes(Path("out.txt")), "old");
  EXPECT_EQ(Names(), std::vector<std::string>{"out.txt"});
  // A directory that does not exist: an error naming the target.
  const std::string e = ErrorOf([&] { AtomicFile f(Path("no/such/dir/out.txt")); });
  EXPECT_NE(e.find("no/such/dir/out.txt"), std::string::npos) << e;
}

TEST_F(OutputFileTest, PartialFileNamesAreRecognized) {
  const std::string p = PartialFileName(Path("step-00000010.safetensors"));
  EXPECT_EQ(fs::path(p).parent_path(), dir_);
  EXPECT_TRUE(IsPartialFileName(fs::path(p).filename().string())) << p;
  EXPECT_FALSE(fs::path(p).filename().string().ends_with(".safetensors"));
  EXPECT_TRUE(IsPartialFileName(".tokens.cache.partial-123-0"));
  for (const char* name : {"step-00000010.safetensors", ".partial-1-2", ".x.partial-1",
                           "x.partial-1-2", ".x.partial-a-2", ".x.partial-1-"}) {
    EXPECT_FALSE(IsPartialFileName(name)) << name;
  }
}

// ---- outputs that are not plain files: one test per kind of target (issue 40 item 1) ----

// A symbolic link to a regular file: the file at the end of the links is replaced, with its
// temporary file beside it (not beside the link), and the links stay links.
TEST_F(OutputFileTest, ALinkToARegularFileKeepsTheLinkAndReplacesItsTarget) {
  fs::create_directories(Path("sub"));
  WriteBytes(Path("sub/real.json"), "old");
  fs::create_symlink("sub/real.json", Path("link.json"));     // relative, to the link's folder
  fs::create_symlink(Path("link.json"), Path("link2.json"));  // a chain of two
  {
    AtomicFile f(Path("link2.json"));
    EXPECT_EQ(f.kind(), OutputKind::kReplace);
    f.Write("new");
    f.Commit();
  }
  EXPECT_TRUE(fs::is_symlink(Path("link.json")));
  EXPECT_TRUE(fs::is_symlink(Path("link2.json")));
  EXPECT_EQ(fs::read_symlink(Path("link.json")), "sub/real.json");
  EXPECT_EQ(ReadBytes(Path("sub/real.json")), "new");
  EXPECT_EQ(Names(), (std::vector<std::string>{"link.json", "link2.json", "sub"}))
      << "no temporary file left beside the links";
  EXPECT_EQ(ResolveOutput({"--json-out", Path("link2.json")}).path, Path("sub/real.json"))
      << "resolved through the links";
}

// A link that points nowhere yet: the write creates the file it points to, as a shell's `>` does,
// and the link stays. A link into a folder that does not exist is an error; nothing is created.
TEST_F(OutputFileTest, ADanglingLinkGetsItsTargetCreated) {
  fs::create_directories(Path("sub"));
  fs::create_symlink(Path("sub/new.json"), Path("link.json"));
  {
    AtomicFile f(Path("link.json"));
    f.Write("made");
    f.Commit();
  }
  EXPECT_TRUE(fs::is_symlink(Path("link.json")));
  EXPECT_EQ(ReadBytes(Path("sub/new.json")), "made");
  fs::create_symlink(Path("nowhere/new.json"), Path("bad.json"));
  const std::string e = ErrorOf([&] { AtomicFile f(Path("bad.json")); });
  EXPECT_NE(e.find("bad.json"), std::string::npos) << e;
  EXPECT_TRUE(fs::is_symlink(Path("bad.json")));
  EXPECT_FALSE(fs::exists(Path("nowhere")));
}

// A FIFO is opened and written (the open waits for the reader), never replaced by a file.
TEST_F(OutputFileTest, AFifoIsWrittenNotReplaced) {
  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0600), 0) << std::strerror(errno);
  // The reader holds a write end of its own until the write is done, so that it meets the end
  // of the stream then, whatever AtomicFile did (a plain reader of a FIFO that was replaced
  // instead would wait for ever).
  const int in = ::open(Path("fifo").c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(in, 0);
  const int keep = ::open(Path("fifo").c_str(), O_WRONLY);
  ASSERT_GE(keep, 0);
  ::fcntl(in, F_SETFL, 0);  // blocking reads from here on
  std::string got;
  std::thread reader([&] {
    char buf[4096];
    for (ssize_t n; (n = ::read(in, buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
  });
  {
    AtomicFile f(NamedPath{"--json-out", Path("fifo")});
    EXPECT_EQ(f.kind(), OutputKind::kStream);
    f.Write("through the pipe\n");
    f.Commit();
  }
  ::close(keep);
  reader.join();
  ::close(in);
  EXPECT_EQ(got, "through the pipe\n");
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(Path("fifo"))));
  EXPECT_EQ(Names(), std::vector<std::string>{"fifo"});
}

// A character device to write to: /dev/null (minor 3) or /dev/full (minor 7). A regression run as
// root would replace the machine's own node (root may rename in /dev), so root gets a private
// node of the same device in the test's folder; anyone else gets /dev's, which they cannot replace.
std::string CharDevice(const fs::path& dir, const std::string& name, unsigned minor) {
  const std::string mine = (dir / name).string();
  if (::geteuid() == 0 && ::mknod(mine.c_str(), S_IFCHR | 0666, makedev(1, minor)) == 0) {
    return mine;
  }
  return "/dev/" + name;
}

// A character device (/dev/null) is written as it is. Before the fix it was renamed over: as
// root, /dev/null became a regular file.
TEST_F(OutputFileTest, ACharacterDeviceIsWrittenNotReplaced) {
  const std::string null = CharDevice(dir_, "null", 3);
  ASSERT_TRUE(fs::is_character_file(null));
  {
    AtomicFile f(NamedPath{"--json-out", null});
    EXPECT_EQ(f.kind(), OutputKind::kStream);
    f.Write("nothing kept\n");
    f.Commit();
  }
  EXPECT_TRUE(fs::is_character_file(fs::symlink_status(null)));
  for (const auto& e : fs::directory_iterator(fs::path(null).parent_path())) {
    EXPECT_FALSE(IsPartialFileName(e.path().filename().string())) << e.path();
  }
  // A link to it: written through the link, the link kept.
  fs::create_symlink(null, Path("null_link"));
  {
    AtomicFile f(Path("null_link"));
    EXPECT_EQ(f.kind(), OutputKind::kStream);
    f.Write("x");
    f.Commit();
  }
  EXPECT_TRUE(fs::is_symlink(Path("null_link")));
  EXPECT_TRUE(fs::is_character_file(fs::symlink_status(null)));
  // /dev/full takes the open and refuses the bytes: the error names the output and the reason.
  const std::string full = CharDevice(dir_, "full", 7);
  if (fs::is_character_file(full)) {
    AtomicFile f(NamedPath{"--json-out", full});
    f.Write("more than fits");
    const std::string e = ErrorOf([&] { f.Commit(); });
    EXPECT_NE(e.find("--json-out " + full), std::string::npos) << e;
    EXPECT_NE(e.find(std::strerror(ENOSPC)), std::string::npos) << e;
    EXPECT_TRUE(fs::is_character_file(fs::symlink_status(full)));
  }
}

// A directory is refused by name, directly or through a link, before anything is created.
TEST_F(OutputFileTest, ADirectoryIsRefused) {
  fs::create_directories(Path("out"));
  fs::create_directory_symlink(Path("out"), Path("out_link"));
  const std::string e = ErrorOf([&] { AtomicFile f(NamedPath{"--json-out", Path("out")}); });
  EXPECT_NE(e.find("--json-out " + Path("out") + ": is a directory; expected a file path"),
            std::string::npos)
      << e;
  const std::string via = ErrorOf([&] { AtomicFile f(NamedPath{"--json-out", Path("out_link")}); });
  EXPECT_NE(via.find("is a symbolic link to " + Path("out") + ", a directory"), std::string::npos)
      << via;
  // CheckOutputPaths refuses it too, so that a command stops before its long work.
  const std::vector<NamedPath> outputs = {{"--per-token", Path("out")}};
  const std::string early = ErrorOf([&] { CheckOutputPaths({}, outputs); });
  EXPECT_NE(early.find("--per-token"), std::string::npos) << early;
  EXPECT_NE(early.find("is a directory"), std::string::npos) << early;
  EXPECT_EQ(Names(), (std::vector<std::string>{"out", "out_link"}));
  EXPECT_TRUE(fs::is_empty(Path("out")));
}

// A socket is refused by name and left as it is.
TEST_F(OutputFileTest, ASocketIsRefused) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = Path("sock");
  ASSERT_LT(path.size(), sizeof(addr.sun_path)) << path;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0)
      << std::strerror(errno);
  const std::string e = ErrorOf([&] { AtomicFile f(NamedPath{"--json-out", path}); });
  ::close(fd);
  EXPECT_NE(e.find("--json-out " + path + ": is a socket; expected a file path"), std::string::npos)
      << e;
  EXPECT_TRUE(fs::is_socket(fs::symlink_status(path)));
  EXPECT_EQ(Names(), std::vector<std::string>{"sock"});
}

// "-" is standard output where the output accepts it (text outputs), refused elsewhere;
// /dev/stdout is this process's standard output too, even when it is a regular file (here the
// file gtest captures it into), which must be written, not replaced.
TEST_F(OutputFileTest, DashIsStandardOutputWhereAccepted) {
  ::testing::internal::CaptureStdout();
  {
    AtomicFile f(NamedPath{"--json-out", "-", OutputForm::kFileOrStdout});
    EXPECT_EQ(f.kind(), OutputKind::kStdout);
    f.Write("first\n");
    f.Commit();
  }
  {
    AtomicFile f(NamedPath{"--json-out", "/dev/stdout", OutputForm::kFileOrStdout});
    EXPECT_EQ(f.kind(), OutputKind::kStdout);
    f.Write("second\n");
    f.Commit();
  }
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "first\nsecond\n");
  EXPECT_FALSE(fs::exists("-"));
  const std::string e = ErrorOf([&] { AtomicFile f(NamedPath{"--out", "-"}); });
  EXPECT_NE(e.find("--out -: standard output (-) is not accepted"), std::string::npos) << e;
  const std::string dir = ErrorOf([] { ResolveOutput({"--out", "-", OutputForm::kDirectory}); });
  EXPECT_NE(dir.find("expected a directory"), std::string::npos) << dir;
}

// A file in a folder that does not exist: the message names the folder, not only the temporary
// file's "No such file or directory".
TEST_F(OutputFileTest, AMissingFolderIsNamed) {
  const std::string target = Path("nodir") + "/x.gguf";
  const std::string e = ErrorOf([&] { AtomicFile f(NamedPath{"--out", target}); });
  EXPECT_NE(e.find("cannot create the temporary file"), std::string::npos) << e;
  EXPECT_NE(e.find("(the folder " + Path("nodir") + " does not exist"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(Path("nodir")));
}

// Two outputs on standard output would interleave (score's per-token CSV, then its JSON): refused,
// by either spelling; one of them on standard output beside a file is fine.
TEST_F(OutputFileTest, TwoOutputsOnStandardOutputAreRefused) {
  const NamedPath csv{"--per-token", "-", OutputForm::kFileOrStdout};
  const NamedPath json{"--json-out", "-", OutputForm::kFileOrStdout};
  const NamedPath stdout_link{"--json-out", "/dev/stdout", OutputForm::kFileOrStdout};
  const std::string e = ErrorOf([&] { CheckOutputPaths({}, std::vector<NamedPath>{csv, json}); });
  EXPECT_NE(e.find("--per-token - and --json-out - both write to standard output"),
            std::string::npos)
      << e;
  if (ResolveOutput(stdout_link).kind == OutputKind::kStdout) {  // not where fd 1 is closed
    EXPECT_THROW(CheckOutputPaths({}, std::vector<NamedPath>{csv, stdout_link}), Error);
  }
  const NamedPath file{"--json-out", Path("out.json"), OutputForm::kFileOrStdout};
  EXPECT_NO_THROW(CheckOutputPaths({}, std::vector<NamedPath>{csv, file}));
  EXPECT_NO_THROW(CheckOutputPaths({}, std::vector<NamedPath>{csv, {"--json-out", ""}}));
}

// A folder output (train, lab, report --out): a folder or a new path; anything else is refused.
TEST_F(OutputFileTest, AFolderOutputRefusesOtherKinds) {
  fs::create_directories(Path("run"));
  WriteBytes(Path("file"), "x");
  EXPECT_EQ(ResolveOutput({"--out", Path("run"), OutputForm::kDirectory}).kind,
            OutputKind::kDirectory);
  EXPECT_EQ(ResolveOutput({"--out", Path("new"), OutputForm::kDirectory}).kind,
            OutputKind::kDirectory);
  const std::string e = ErrorOf([&] {
    ResolveOutput({"--out", Path("file"), OutputForm::kDirectory});
  });
  EXPECT_NE(e.find("is a regular file; expected a directory"), std::string::npos) << e;
  const std::string null = ErrorOf([&] {
    ResolveOutput({"--out", "/dev/null", OutputForm::kDirectory});
  });
  EXPECT_NE(null.find("is a character device; expected a directory"), std::string::npos) << null;
}

// A pid that is certainly gone: a child that exited and was reaped.
pid_t DeadPid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

// A write killed midway leaves its partial file; the next successful write to the same target
// removes it, and only it: a live process's partial file and another target's stay (issue 40
// item 6).
TEST_F(OutputFileTest, ASuccessfulWriteRemovesTheStalePartialFilesOfItsTarget) {
  const pid_t dead = DeadPid();
  const std::string stale = Path(".model.gguf.partial-" + std::to_string(dead) + "-0");
  const std::string live = Path(".model.gguf.partial-" + std::to_string(::getpid()) + "-99");
  const std::string other = Path(".other.gguf.partial-" + std::to_string(dead) + "-0");
  // A target whose own name looks like a partial file's does not own model.gguf's.
  const std::string lookalike =
      Path(".model.gguf.partial-1-2.partial-" + std::to_string(dead) + "-0");
  for (const std::string& p : {stale, live, other, lookalike}) WriteBytes(p, "half");
  EXPECT_EQ(StalePartialFilesOf(Path("model.gguf")), std::vector<std::string>{stale});
  {
    AtomicFile f(Path("model.gguf"));
    f.Write("whole");
    f.Commit();
    EXPECT_EQ(f.removed_partials(), std::vector<std::string>{stale});
  }
  EXPECT_EQ(ReadBytes(Path("model.gguf")), "whole");
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
  EXPECT_TRUE(fs::exists(lookalike));
}

}  // namespace
}  // namespace stretch
