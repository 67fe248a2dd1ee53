// The training curves of the report (src/report/train_curves.h): the logs of one run and of a
// model trained in stages, damaged lines, the Wilson interval of the copy readout, and the
// Training section's plots and tables (report_html.h).
#include "src/report/train_curves.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "src/report/report_html.h"
#include "src/report/svg_plot.h"
#include "tests/report/sample_records.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;

bool Has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

size_t Count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

// A log line as src/train/run.cc writes it: every step has a loss; `eval` adds the held-out loss
// and the copy readout (copy and its control, `n` tokens each, shares `copy` and 0.05).
std::string Line(int64_t step, double loss, bool eval = false, double copy = 0.5, int64_t n = 10) {
  std::string s = fmt::format(R"({{"grad_norm":1.0,"loss":{},"lr":0.001,"step":{})", loss, step);
  if (eval) {
    s +=
        fmt::format(R"(,"val_loss":{},"copy_accuracy":{},"copy_accuracy_n":{},"copy_control":0.05,)"
                    R"("copy_control_n":{},"passkey_keys":0.25,"passkey_keys_n":8)",
                    loss + 0.5, copy, n, n);
  }
  return s + "}\n";
}

class TrainCurvesTest : public testing::TempDirTest {
 protected:
  TrainCurvesTest() : TempDirTest("train_curves_test_") {}
  // Writes `text` to <dir>/<folder>/train_log.jsonl, making the folders.
  void Log(const std::string& folder, const std::string& text) {
    fs::create_directories(dir_ / folder);
    File(folder + "/train_log.jsonl", text);
  }
};

TEST_F(TrainCurvesTest, StagesReadInOrderWithStepsGoingOn) {
  // Stage 1: steps 1-4 (evaluations at 2 and 4); stage 2 starts its count again (1-3, evaluation
  // at 3); stage 10 goes on from the trainer's step (8-9): numbered 10, read after 2, not after 1.
  Log("m/1-periodic", Line(1, 3.0) + Line(2, 2.8, true) + Line(3, 2.7) + Line(4, 2.6, true));
  Log("m/2-text", Line(1, 2.9) + Line(2, 2.5) + Line(3, 2.4, true));
  Log("m/10-long", Line(8, 2.3) + Line(9, 2.2, true));
  fs::create_directories(dir_ / "m/3-empty");  // no log: not a stage
  const ModelCurves c = ReadModelCurves(Path("m"), "m");
  ASSERT_EQ(c.stages.size(), 3u);
  EXPECT_TRUE(c.staged());
  EXPECT_EQ(c.stages[0].name, "periodic");
  EXPECT_EQ(c.stages[1].name, "text");
  EXPECT_EQ(c.stages[2].index, 10);
  EXPECT_EQ(c.stages[0].start_step, 0);
  EXPECT_EQ(c.stages[1].start_step, 4);  // begins after stage 1's 4 steps
  EXPECT_EQ(c.stages[2].start_step, 7);
  std::vector<int64_t> steps, evals;
  for (const TrainStep& s : c.steps) steps.push_back(s.step);
  for (const TrainEval& e : c.evals) evals.push_back(e.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(evals, (std::vector<int64_t>{2, 4, 7, 9}));
  EXPECT_DOUBLE_EQ(c.steps[4].loss, 2.9);
  EXPECT_DOUBLE_EQ(c.evals[2].val_loss, 2.9);
  EXPECT_TRUE(c.notes.empty()) << c.notes.front();
}

TEST_F(TrainCurvesTest, DamagedLinesAreSkippedAndCounted) {
  // A line that is not JSON, one without a loss, a resumed run's repeated steps 2-3, and a last
  // line cut short by a kill.
  Log("m", Line(1, 3.0) + "{\"step\": 2, \"lo\n" + "{\"step\": 2}\n" + Line(2, 2.9) +
               Line(3, 2.8, true) + Line(2, 2.7) + Line(3, 2.6, true) + Line(4, 2.5) +
               R"({"loss": 2.4, "st)");
  const ModelCurves c = ReadModelCurves(Path("m"), "m");
  ASSERT_EQ(c.stages.size(), 1u);
  EXPECT_FALSE(c.staged());
  EXPECT_EQ(c.bad_lines, 2);
  EXPECT_EQ(c.partial_lines, 1);
  ASSERT_EQ(c.steps.size(), 4u);
  EXPECT_DOUBLE_EQ(c.steps[1].loss, 2.7);  // the resumed run's record of step 2 wins
  ASSERT_EQ(c.evals.size(), 1u);
  EXPECT_DOUBLE_EQ(c.evals[0].val_loss, 3.1);
  ASSERT_EQ(c.notes.size(), 2u);
  EXPECT_TRUE(Has(c.notes[0], "2 lines skipped (not JSON")) << c.notes[0];
  EXPECT_TRUE(Has(c.notes[1], "1 last line cut short")) << c.notes[1];
}

TEST_F(TrainCurvesTest, WilsonIntervalOfTheReadout) {
  Log("m", Line(1, 3.0, true, 0.5, 10));
  const ModelCurves c = ReadModelCurves(Path("m"), "m");
  ASSERT_EQ(c.evals.size(), 1u);
  const TrainShare& copy = c.evals[0].copy;
  ASSERT_TRUE(copy.known);
  EXPECT_EQ(copy.n, 10);
  // 5 of 10: p = 0.5, z = 1.96: centre 0.5, half width z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n)
  // = 0.2634; printed to three digits in the reference, hence the tolerance.
  EXPECT_NEAR(copy.ci.lo, 0.237, 5e-4);
  EXPECT_NEAR(copy.ci.hi, 0.763, 5e-4);
  EXPECT_FALSE(c.evals[0].textcopy.known);  // not in the line
  EXPECT_TRUE(c.evals[0].passkey_keys.known);
}

// The held-out loss's interval over the windows, as the trainer logs it (val_loss_ci); one that
// does not hold its value is damage, not an interval; logs before it have none.
TEST_F(TrainCurvesTest, TheHeldOutLossCarriesItsInterval) {
  Log("m", R"({"step":1,"loss":3.0,"val_loss":2.5,"val_loss_ci":[2.4,2.6]})"
           "\n"
           R"({"step":2,"loss":2.9,"val_loss":2.5,"val_loss_ci":[2.6,2.7]})"
           "\n"
           R"({"step":3,"loss":2.8,"val_loss":2.5})"
           "\n");
  const ModelCurves c = ReadModelCurves(Path("m"), "m");
  ASSERT_EQ(c.evals.size(), 3u);
  EXPECT_TRUE(c.evals[0].val_loss_ci.known);
  EXPECT_DOUBLE_EQ(c.evals[0].val_loss_ci.lo, 2.4);
  EXPECT_DOUBLE_EQ(c.evals[0].val_loss_ci.hi, 2.6);
  EXPECT_FALSE(c.evals[1].val_loss_ci.known);
  EXPECT_FALSE(c.evals[2].val_loss_ci.known);
  LabRecordFile records;
  records.records = testing::SampleRecords();
  const Report report = BuildReport(records, {"a.jsonl"}, {c});
  const std::string& md = report.files.front().content;
  EXPECT_TRUE(Has(md, "| 1 | 2.500 (2.400-2.600) |")) << md;
  EXPECT_TRUE(Has(md, "| 3 | 2.500 |")) << md;
}

TEST_F(TrainCurvesTest, TheReadoutsEffectiveCountWidensItsInterval) {
  // 100 tokens in correlated rows worth 10 trials (src/train/copy_data.h's EffectiveN): the
  // interval of 10 trials, 0.237..0.763, not of 100 (0.404..0.596).
  Log("m", R"({"step":1,"loss":3.0,"randcopy_accuracy":0.5,"randcopy_accuracy_n":100,)"
           R"("randcopy_accuracy_n_eff":10.0,"randcopy_control":0.5,"randcopy_control_n":100})"
           "\n");
  const ModelCurves c = ReadModelCurves(Path("m"), "m");
  ASSERT_EQ(c.evals.size(), 1u);
  EXPECT_EQ(c.evals[0].randcopy.n, 100);
  EXPECT_NEAR(c.evals[0].randcopy.ci.lo, 0.237, 5e-4);
  EXPECT_NEAR(c.evals[0].randcopy.ci.hi, 0.763, 5e-4);
  EXPECT_NEAR(c.evals[0].randcopy_control.ci.lo, 0.4038, 5e-4) << "no effective count logged";
}

TEST_F(TrainCurvesTest, RandcopyIsReadWhereLogged) {
  Log("m", R"({"step":1,"loss":3.0,"randcopy_accuracy":0.8,"randcopy_accuracy_n":10,)"
           R"("randcopy_control":0.1,"randcopy_control_n":10})"
           "\n");
  const ModelCurves c = ReadModelCurves(Path("m"), "m");
  ASSERT_EQ(c.evals.size(), 1u);  // a readout without a held-out loss is an evaluation too
  EXPECT_FALSE(c.evals[0].has_val_loss);
  EXPECT_TRUE(c.evals[0].randcopy.known);
  EXPECT_DOUBLE_EQ(c.evals[0].randcopy_control.value, 0.1);
  LabRecordFile records;
  records.records = testing::SampleRecords();
  const Report report = BuildReport(records, {"a.jsonl"}, {c});
  EXPECT_TRUE(Has(report.files.front().content, "| step | randcopy | randcopy control |"))
      << report.files.front().content;
}

TEST_F(TrainCurvesTest, MissingLogsGiveNotesNotErrors) {
  const ModelCurves none = ReadModelCurves(Path("absent"), "rope");
  EXPECT_TRUE(none.empty());
  ASSERT_EQ(none.notes.size(), 1u);
  EXPECT_TRUE(Has(none.notes[0], "rope: no training log")) << none.notes[0];
  fs::create_directories(dir_ / "lab/models/rope");
  const ModelCurves empty = ReadModelCurves(Path("lab/models/rope"), "rope");
  EXPECT_TRUE(empty.empty());
  EXPECT_TRUE(Has(empty.notes.at(0), "neither train_log.jsonl nor")) << empty.notes.at(0);
}

TEST_F(TrainCurvesTest, RecordsFindTheirModelsFolder) {
  Log("lab/models/rope", Line(1, 3.0) + Line(2, 2.0, true));
  Log("elsewhere/rope", Line(1, 3.0));
  LabRecordFile records;
  for (const char* model : {"rope", "alibi", "../x"}) {
    LabRecord r = testing::SampleCell(model, "direct", "nonrepeat", 256, 0.5);
    r.source = Path("lab/results.jsonl");
    records.records.push_back(r);
    records.records.push_back(r);  // named twice: read once
  }
  const std::vector<ModelCurves> next_to = ReadCurvesOfRecords(records);
  ASSERT_EQ(next_to.size(), 3u);
  EXPECT_EQ(next_to[0].folder, Path("lab/models/rope"));
  EXPECT_EQ(next_to[0].evals.size(), 1u);
  EXPECT_EQ(next_to[0].sources, std::vector<std::string>{Path("lab/results.jsonl")});
  EXPECT_TRUE(next_to[1].empty());
  EXPECT_TRUE(Has(next_to[2].notes.at(0), "cannot name a folder")) << next_to[2].notes.at(0);
  const std::vector<ModelCurves> given = ReadCurvesOfRecords(records, Path("elsewhere"));
  EXPECT_EQ(given[0].steps.size(), 1u);
  EXPECT_TRUE(given[0].evals.empty());
}

// Curves made in memory, as a report test passes them: `evals` evaluations of copy and control
// in two stages.
ModelCurves SampleCurves(const std::string& model, int evals) {
  ModelCurves c;
  c.model = model;
  c.stages = {{1, "periodic", "a", 0, 0}, {2, "text", "b", 20 * evals / 2, 0}};
  for (int64_t s = 1; s <= 20 * evals; ++s) c.steps.push_back({s, 3.0 - 0.001 * s});
  for (int i = 1; i <= evals; ++i) {
    TrainEval e;
    e.step = 20 * i;
    e.has_val_loss = true;
    e.val_loss = 3.0 - 0.01 * i;
    e.copy = {true, 0.1 * i, 100, {true, 0.1 * i - 0.05, 0.1 * i + 0.05}};
    e.copy_control = {true, 0.05, 100, {true, 0.02, 0.1}};
    c.evals.push_back(e);
  }
  return c;
}

const ReportFile* FileNamed(const Report& r, const std::string& name) {
  for (const ReportFile& f : r.files) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

double SvgWidth(const std::string& svg) {
  const size_t at = svg.find("width=\"");
  return at == std::string::npos ? -1 : std::stod(svg.substr(at + 7));
}

TEST(TrainCurvesReportTest, TrainingPlotsAndTables) {
  LabRecordFile records;
  records.records = testing::SampleRecords();
  const std::vector<ModelCurves> curves = {SampleCurves("rope", 3)};
  const Report report = BuildReport(records, {"a.jsonl"}, curves);
  const ReportFile* loss = FileNamed(report, "training_loss_rope.svg");
  const ReportFile* copy = FileNamed(report, "training_copy_rope.svg");
  ASSERT_NE(loss, nullptr);
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(FileNamed(report, "training_loss_alibi.svg"), nullptr);  // no curves given
  for (const ReportFile* f : {loss, copy}) {
    EXPECT_GT(SvgWidth(f->content), 0) << f->name;
    EXPECT_LE(SvgWidth(f->content), kPlotMaxWidth) << f->name;
    EXPECT_TRUE(Has(f->content, "max-width: 100%")) << f->name;
    EXPECT_TRUE(Has(f->content, ">2: text</text>")) << f->name;  // stage 2's mark
  }
  // One dot per evaluation: 3 held-out losses; 3 copies and 3 controls, each with its band.
  EXPECT_EQ(Count(loss->content, "<circle"), 3u);
  EXPECT_EQ(Count(copy->content, "<circle"), 6u);
  EXPECT_EQ(Count(copy->content, "<polygon"), 2u);
  const std::string& md = report.files.front().content;
  EXPECT_TRUE(Has(md, "## Training")) << md;
  EXPECT_TRUE(Has(md, "| step | held-out loss (nats) | copy | copy control |")) << md;
  EXPECT_TRUE(Has(md, "| 40 | 2.980 | 20.0% (15.0-25.0) | 5.0% (2.0-10.0) |")) << md;
  EXPECT_TRUE(Has(md, "stage 2 (text) from step 31")) << md;
  const std::string& html = report.files.back().content;
  const size_t training = html.find("<h2>Training</h2>"), plots = html.find("<h2>Plots</h2>");
  ASSERT_NE(training, std::string::npos);
  ASSERT_LT(training, plots);
  // The training plots are inline in the Training section, once.
  EXPECT_EQ(Count(html, "data-plot=\"training_copy_rope\""), 1u);
  EXPECT_GT(html.find("data-plot=\"training_copy_rope\""), training);
  EXPECT_LT(html.find("data-plot=\"training_copy_rope\""), plots);
  EXPECT_EQ(report.plots, Count(html, "<svg "));
}

TEST(TrainCurvesReportTest, ReportWithoutLogsStillBuilds) {
  LabRecordFile records;
  records.records = testing::SampleRecords();
  for (LabRecord& r : records.records) r.source = "/nonexistent/lab/results.jsonl";
  const Report plain = BuildReport(records, {"a.jsonl"});
  const Report report = BuildReport(records, {"a.jsonl"}, ReadCurvesOfRecords(records));
  EXPECT_EQ(report.plots, plain.plots);
  EXPECT_EQ(report.files.size(), plain.files.size());
  ASSERT_EQ(report.training_notes.size(), 2u);  // rope and alibi
  EXPECT_TRUE(Has(report.training_notes[0], "rope: no training log")) << report.training_notes[0];
  EXPECT_TRUE(Has(report.files.back().content, "<h2>Training</h2>"));
  EXPECT_FALSE(Has(plain.files.back().content, "<h2>Training</h2>"));
}

}  // namespace
}  // namespace stretch
