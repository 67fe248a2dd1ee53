// The training loop of src/train/run.h: what it logs, when it evaluates, reports and saves, and
// that a run stopped at a checkpoint and continued gives the same records as one that was not.
#include "src/train/run.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/io/safetensors.h"
#include "src/train/checkpoint.h"
#include "src/train/run_dir.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

TrainArch LoopArch() {
  TrainArch a;
  a.model.dim = 16;
  a.model.hidden_dim = 24;
  a.model.n_layers = 2;
  a.model.n_heads = 2;
  a.model.n_kv_heads = 2;
  a.model.vocab_size = 20;
  a.model.seq_len = 8;
  a.model.attention.position = LayerPosition::kRope;
  a.model.attention.layers = {LayerLayout{true, 0}, LayerLayout{true, 0}};
  return a;
}

TrainerOptions LoopOptions() {
  TrainerOptions o;
  o.batch = 2;
  o.schedule = LrSchedule{3e-3, 3e-4, 2, 6};
  o.seed = 5;
  return o;
}

// Eight documents of 30..60 tokens (ids 1..19; 0 is BOS).
TokenDocuments Documents() {
  TokenDocuments docs;
  Rng rng(17);
  for (int d = 0; d < 8; ++d) {
    std::vector<int32_t> body(static_cast<size_t>(30 + 4 * d));
    for (int32_t& t : body) t = 1 + static_cast<int32_t>(rng.NextU64() % 19);
    docs.Add(0, body);
  }
  return docs;
}

std::vector<nlohmann::json> ReadLog(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

class TrainLoop : public testing::TempDirTest {
 protected:
  TrainLoop() : TempDirTest("stretch_loop_") {}
  void SetUp() override {
    TempDirTest::SetUp();
    docs_ = Documents();
    SplitOptions s;
    s.valid_documents = 2;
    split_ = SplitDocuments(docs_, s);
    sampler_ = std::make_unique<WindowSampler>(split_.train, 8);
    data_ = TrainingData{&split_, sampler_.get(),
                         ValidationWindows(split_.valid, 8, TailWindow::kDrop)};
  }
  TrainLoopOptions Options(const std::string& out) const {
    TrainLoopOptions o;
    o.out = out;
    o.steps = 6;
    o.eval_every = 2;
    o.eval_windows = 3;
    o.log_every = 4;
    o.save_every = 3;
    return o;
  }
  TokenDocuments docs_;
  DataSplit split_;
  std::unique_ptr<WindowSampler> sampler_;
  TrainingData data_;
};

TEST_F(TrainLoop, LogsEveryStepEvaluatesReportsAndSavesOnSchedule) {
  Trainer trainer(LoopArch(), LoopOptions());
  std::vector<TrainProgress> seen;
  const TrainLoopResult r = RunTrainingLoop(trainer, data_, Options(Path("")),
                                            [&](const TrainProgress& p) { seen.push_back(p); });
  EXPECT_EQ(r.steps_done, 6);
  EXPECT_EQ(r.last_saved, Path(StepFileName(6)));
  EXPECT_EQ(r.log_path, Path(kTrainLogName));
  EXPECT_TRUE(std::filesystem::exists(Path(StepFileName(3))));
  EXPECT_TRUE(std::filesystem::exists(Path(StepFileName(6))));
  EXPECT_FALSE(std::filesystem::exists(Path(StepFileName(2))));

  const std::vector<nlohmann::json> log = ReadLog(r.log_path);
  ASSERT_EQ(log.size(), 6u);
  ASSERT_EQ(seen.size(), 6u);
  for (int k = 0; k < 6; ++k) {
    const int step = k + 1;
    EXPECT_EQ(log[static_cast<size_t>(k)]["step"], step);
    EXPECT_EQ(seen[static_cast<size_t>(k)].stats.step, step);
    EXPECT_EQ(log[static_cast<size_t>(k)]["loss"].get<double>(),
              seen[static_cast<size_t>(k)].stats.loss);
    const bool evaluated = step % 2 == 0;
    EXPECT_EQ(log[static_cast<size_t>(k)].contains("val_loss"), evaluated) << step;
    EXPECT_EQ(seen[static_cast<size_t>(k)].eval.has_value(), evaluated) << step;
    // Reported: the first step, every 4th, and every evaluation.
    EXPECT_EQ(seen[static_cast<size_t>(k)].report, step == 1 || step % 4 == 0 || evaluated) << step;
  }
  // The evaluation is the held-out loss of the trainer at that step.
  const std::optional<EvalStats> again = EvaluateHeldOut(trainer, data_, 3);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->loss, log[5]["val_loss"].get<double>());
}

TEST_F(TrainLoop, AStoppedRunContinuedFromItsCheckpointLogsTheSameSteps) {
  const std::string whole = Path("whole"), part = Path("part");
  std::filesystem::create_directories(whole);
  std::filesystem::create_directories(part);
  {
    Trainer trainer(LoopArch(), LoopOptions());
    RunTrainingLoop(trainer, data_, Options(whole));
  }
  {
    Trainer trainer(LoopArch(), LoopOptions());
    TrainLoopOptions o = Options(part);
    o.steps = 3;  // stopped after the step-3 checkpoint
    RunTrainingLoop(trainer, data_, o);
  }
  {
    Trainer trainer(LoopArch(), LoopOptions());
    LoadCheckpointInto(trainer, SafetensorsFile(part + "/" + StepFileName(3)));
    RunTrainingLoop(trainer, data_, Options(part));
  }
  const std::vector<nlohmann::json> a = ReadLog(whole + "/" + kTrainLogName);
  const std::vector<nlohmann::json> b = ReadLog(part + "/" + kTrainLogName);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k]["step"], b[k]["step"]);
    EXPECT_EQ(a[k]["loss"], b[k]["loss"]) << k;
    EXPECT_EQ(a[k]["grad_norm"], b[k]["grad_norm"]) << k;
    // Step 3 was the stopped run's last step, so it was evaluated there (the last step always
    // is) and not in the whole run; every other evaluation is the same.
    if (k == 2) {
      EXPECT_FALSE(a[k].contains("val_loss"));
      EXPECT_TRUE(b[k].contains("val_loss"));
    } else {
      EXPECT_EQ(a[k].value("val_loss", -1.0), b[k].value("val_loss", -1.0)) << k;
    }
  }
}

TEST_F(TrainLoop, ALogEveryBelowOneIsAnError) {
  Trainer trainer(LoopArch(), LoopOptions());
  TrainLoopOptions o = Options(Path(""));
  o.log_every = 0;
  EXPECT_NE(testing::ErrorOf([&] {
              RunTrainingLoop(trainer, data_, o);
            }).find("TrainLoopOptions::log_every"),
            std::string::npos);
}

}  // namespace
}  // namespace stretch
