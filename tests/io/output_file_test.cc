// src/io/output_file.h: paths compared by what they point at, and outputs that appear whole or not
// at all.
#include "src/io/output_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
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

}  // namespace
}  // namespace stretch
