// src/train/run_dir.h: what a run's directory holds, and clearing it.
#include "src/train/run_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/testing/files.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using testing::WriteBytes;

class RunDirTest : public testing::TempDirTest {
 protected:
  RunDirTest() : TempDirTest("stretch_run_dir_") {}
};

TEST_F(RunDirTest, StepFilesAreNewestFirstAndNamedExactly) {
  EXPECT_EQ(StepFileName(40), "step-00000040.safetensors");
  for (const char* name :
       {"step-00000002.safetensors", "step-00000010.safetensors", "step-0000001.safetensors",
        "step-0000000x.safetensors", "step-00000003.safetensors.bak", "notes.md"}) {
    WriteBytes(Path(name), "x");
  }
  const auto files = StepFiles(dir_.string());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].first, 10);
  EXPECT_EQ(files[1].first, 2);
  EXPECT_TRUE(StepFiles(Path("missing")).empty());
}

TEST_F(RunDirTest, ScanSaysWhatOfARunIsThere) {
  EXPECT_FALSE(ScanRunDir(Path("missing")).HoldsRun());
  WriteBytes(Path(kTokenCacheName), "c");
  WriteBytes(Path(".step-00000004.safetensors.partial-99-0"), "half");
  RunDirContents c = ScanRunDir(dir_.string());
  EXPECT_FALSE(c.HoldsRun()) << "a cache and a killed first write are not a run";
  EXPECT_TRUE(c.cache);
  EXPECT_EQ(c.partial.size(), 1u);
  WriteBytes(Path(kTrainLogName), "{}\n");
  EXPECT_TRUE(ScanRunDir(dir_.string()).HoldsRun());
  WriteBytes(Path("step-00000004.safetensors"), "x");
  c = ScanRunDir(dir_.string());
  EXPECT_EQ(c.Describe(),
            "1 checkpoint (newest step-00000004.safetensors), train_log.jsonl, tokens.cache, "
            "1 partial file(s)");
}

TEST_F(RunDirTest, ClearRemovesTheRunAndNothingElse) {
  for (const char* name :
       {"step-00000002.safetensors", "step-00000004.safetensors", kTrainLogName, kTokenCacheName,
        ".tokens.cache.partial-5-1", "notes.md", "step-4.safetensors"}) {
    WriteBytes(Path(name), "x");
  }
  EXPECT_EQ(ClearRunDir(dir_.string()), 5);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir_)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"notes.md", "step-4.safetensors"}));
}

}  // namespace
}  // namespace stretch
