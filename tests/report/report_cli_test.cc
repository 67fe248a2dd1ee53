// `stretch report` as a user runs it (the built command, STRETCH_CLI_PATH): the files it writes,
// the inputs it refuses, and report.html opened in headless Chromium, where a render check that
// this test injects into a copy of the page must say that every plot drew.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "src/report/records.h"
#include "tests/cli/cli_run.h"
#include "tests/report/sample_records.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;
using testing::Has;
using testing::RunCli;

class ReportCliTest : public testing::TempDirTest {
 protected:
  ReportCliTest() : TempDirTest("report_cli_test_") {}
  // The sample records, written as the lab writes them.
  std::string SampleFile(const std::string& name) {
    const std::string path = Path(name);
    LabRecordWriter writer(path);
    for (const LabRecord& r : testing::SampleRecords()) writer.Append(r);
    return path;
  }
};

std::string Quote(const std::string& s) { return "'" + s + "'"; }

std::vector<std::string> SvgFiles(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".svg") out.push_back(e.path().stem().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST_F(ReportCliTest, WritesTablesPlotsAndPage) {
  const std::string records = SampleFile("results.jsonl");
  // A second file repeating a record, and ending in a cut line.
  const std::string more = File("more.jsonl", LabRecordJson(testing::SampleRecords()[0]).dump() +
                                                  "\n{\"record\": \"cell\", \"ver");
  const std::string out = Path("out");
  const auto r = RunCli("report " + Quote(records) + " " + Quote(more) + " --out " + Quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "read 64 records from 2 files: 1 duplicate skipped")) << r.out;
  EXPECT_TRUE(Has(r.out, "1 cut last line skipped")) << r.out;
  EXPECT_TRUE(Has(r.out, "| rope / direct |")) << r.out;
  EXPECT_TRUE(Has(r.out, "wrote 20 files (12 plots):")) << r.out;
  for (const char* name : {"tables.md", "summary.csv", "accuracy.csv", "loss.csv", "tail.csv",
                           "passkey.csv", "sliding.csv", "report.html"}) {
    EXPECT_TRUE(fs::exists(fs::path(out) / name)) << name;
    EXPECT_TRUE(Has(r.out, (fs::path(out) / name).string())) << name;
  }
  EXPECT_EQ(SvgFiles(out).size(), 12u);
  // Run again: the files are replaced, nothing else appears (no leftover temporary files).
  const auto again = RunCli("report " + Quote(records) + " --out " + Quote(out));
  ASSERT_EQ(again.exit_code, 0) << again.out;
  EXPECT_EQ(std::distance(fs::directory_iterator(out), fs::directory_iterator()), 20);
}

// The page and tables.md name the builds that scored the records (LabRecord::build): one build in
// a sentence, several with their counts, most first, and records without one counted apart.
TEST_F(ReportCliTest, NamesTheBuildsThatScoredTheRecords) {
  std::vector<LabRecord> records = testing::SampleRecords();
  ASSERT_GE(records.size(), 10u);
  const auto report = [&](const std::string& name) {
    const std::string path = Path(name + ".jsonl");
    {
      LabRecordWriter writer(path);
      for (const LabRecord& r : records) writer.Append(r);
    }
    const std::string out = Path(name);
    const auto r = RunCli("report " + Quote(path) + " --out " + Quote(out));
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return std::make_pair(testing::ReadBytes((fs::path(out) / "tables.md").string()),
                          testing::ReadBytes((fs::path(out) / "report.html").string()));
  };
  const auto [none, none_html] = report("none");
  EXPECT_FALSE(Has(none, "Scored by")) << "no record names a build: nothing to say";
  for (LabRecord& r : records) r.build = "1111aaaa2222";
  const auto [one, one_html] = report("one");
  EXPECT_TRUE(Has(one, " Scored by stretch 1111aaaa2222.")) << one;
  EXPECT_TRUE(Has(one_html, " Scored by stretch 1111aaaa2222."));
  const size_t n = records.size();
  for (size_t i = 0; i < 3; ++i) records[i].build = "";
  for (size_t i = 3; i < 5; ++i) records[i].build = "3333bbbb4444-dirty";
  const auto [several, several_html] = report("several");
  EXPECT_TRUE(Has(several, fmt::format(" Scored by 2 builds: stretch 1111aaaa2222 ({} records), "
                                       "stretch 3333bbbb4444-dirty (2 records), 3 records of "
                                       "builds from before records named theirs.",
                                       n - 5)))
      << several;
  // Read from a file: a build that is not printable ASCII shows its odd bytes as '?'.
  for (LabRecord& r : records) r.build = "12ab\x1b[2J\ncd";
  const auto [odd, odd_html] = report("odd");
  EXPECT_TRUE(Has(odd, " Scored by stretch 12ab?[2J?cd.")) << odd;
}

TEST_F(ReportCliTest, RefusesMissingFileMalformedLineAndOutputOverInput) {
  const std::string missing = Path("absent.jsonl");
  auto r = RunCli("report " + Quote(missing) + " --out " + Quote(Path("out")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, missing + ": no such file: expected a lab results file")) << r.out;

  const std::string good = LabRecordJson(testing::SampleRecords()[0]).dump() + "\n";
  const std::string bad = File("bad.jsonl", good + "{\"record\": \"cell\"}\n" + good);
  r = RunCli("report " + Quote(bad) + " --out " + Quote(Path("out")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, bad + ":2: field \"version\" is missing")) << r.out;
  EXPECT_FALSE(fs::exists(Path("out")));

  // --out naming an input file: refused before anything is written (a file is not a folder).
  const std::string records = SampleFile("results.jsonl");
  const std::string before = testing::ReadBytes(records);
  r = RunCli("report " + Quote(records) + " --out " + Quote(records));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "is a regular file; expected a directory")) << r.out;
  EXPECT_EQ(testing::ReadBytes(records), before);
  // An output file that would replace an input: refused, and no directory made.
  fs::copy_file(records, Path("report.html"));
  r = RunCli("report " + Quote(Path("report.html")) + " --out " + Quote(Path("new/..")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "refusing to write over an input")) << r.out;
  EXPECT_FALSE(fs::exists(Path("new")));

  // A records file inside --out named like one of the outputs.
  fs::create_directories(Path("d"));
  fs::copy_file(records, Path("d/tables.md"));
  r = RunCli("report " + Quote(Path("d/tables.md")) + " --out " + Quote(Path("d")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "refusing to write over an input")) << r.out;

  r = RunCli("report --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "non-repeat  genuine text")) << r.out;
  EXPECT_TRUE(Has(r.out, "repeat      a text of L tokens repeated")) << r.out;
}

constexpr const char* kRenderCheck = R"(window.addEventListener('load', function () {
  var plots = document.querySelectorAll('svg.plot');
  var lines = [];
  for (var i = 0; i < plots.length; i++) {
    var svg = plots[i], ok = false;
    try {
      var all = svg.getBBox();
      var data = svg.querySelector('g.data');
      var box = data ? data.getBBox() : null;
      ok = all.width > 0 && all.height > 0 && box !== null && (box.width > 0 || box.height > 0);
    } catch (e) {
      ok = false;
    }
    lines.push((ok ? 'PLOT-OK ' : 'PLOT-EMPTY ') + svg.getAttribute('data-plot'));
  }
  lines.push('PLOTS ' + plots.length);
  document.getElementById('render-check').textContent = lines.join('\n');
});
)";

// Headless Chromium, if installed: Debian's package `chromium` (scripts/setup.sh installs it for
// the tests).
std::string FindChromium() {
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (fs::exists(path)) return path;
  }
  return "";
}

TEST_F(ReportCliTest, TrainingCurvesFromTheModelsFolder) {
  // The lab's layout: OUT/results.jsonl beside OUT/models/<label>/train_log.jsonl (rope, in two
  // stages); alibi has no log.
  fs::create_directories(dir_ / "lab/models/rope/1-copy");
  fs::create_directories(dir_ / "lab/models/rope/2-text");
  const std::string eval =
      R"(,"val_loss":2.5,"copy_accuracy":0.5,"copy_accuracy_n":10,"copy_control":0.1,)"
      R"("copy_control_n":10})";
  File("lab/models/rope/1-copy/train_log.jsonl",
       "{\"step\":1,\"loss\":3.0}\n{\"step\":2,\"loss\":2.9" + eval + "\n");
  File("lab/models/rope/2-text/train_log.jsonl",
       "{\"step\":1,\"loss\":2.8}\n{\"step\":2,\"loss\":2.7" + eval + "\n");
  fs::create_directories(dir_ / "lab");
  const std::string records = SampleFile("lab/results.jsonl");
  const std::string out = Path("out");
  auto r = RunCli("report " + Quote(records) + " --out " + Quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "training note: alibi: no training log")) << r.out;
  EXPECT_TRUE(fs::exists(fs::path(out) / "training_loss_rope.svg"));
  EXPECT_TRUE(fs::exists(fs::path(out) / "training_copy_rope.svg"));
  EXPECT_FALSE(fs::exists(fs::path(out) / "training_loss_alibi.svg"));
  const std::string md = testing::ReadBytes((fs::path(out) / "tables.md").string());
  EXPECT_TRUE(Has(md, "stage 2 (text) from step 3")) << md;
  EXPECT_TRUE(Has(md, "| 4 | 2.500 | 50.0% (23.7-76.3) | 10.0% (1.8-40.4) |")) << md;

  // --models elsewhere: the folder next to the records is not read.
  fs::create_directories(dir_ / "elsewhere/alibi");
  File("elsewhere/alibi/train_log.jsonl", "{\"step\":1,\"loss\":3.0}\n");
  const std::string out2 = Path("out2");
  r = RunCli("report " + Quote(records) + " --models " + Quote(Path("elsewhere")) + " --out " +
             Quote(out2));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(fs::exists(fs::path(out2) / "training_loss_alibi.svg"));
  EXPECT_FALSE(fs::exists(fs::path(out2) / "training_loss_rope.svg"));
  EXPECT_TRUE(Has(r.out, "training note: rope: no training log")) << r.out;

  r = RunCli("report " + Quote(records) + " --models " + Quote(Path("absent")) + " --out " +
             Quote(Path("out3")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Has(r.out, "--models " + Path("absent") + ": no such directory")) << r.out;
  EXPECT_FALSE(fs::exists(Path("out3")));
}

TEST_F(ReportCliTest, EveryPlotRendersInChromium) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) {
    GTEST_SKIP() << "no chromium found (/usr/bin/chromium): install the Debian package "
                    "`chromium` (scripts/setup.sh all does) to run this test";
  }
  // Every kind of plot: the sample records, the retrieval lab's (far copy, repeat periods,
  // a model that failed the gate), and a training log of rope beside them (models/rope).
  const std::string records = SampleFile("results.jsonl");
  fs::create_directories(dir_ / "models/rope");
  File("models/rope/train_log.jsonl",
       "{\"step\":1,\"loss\":3.0}\n{\"step\":2,\"loss\":2.9,\"val_loss\":2.5,"
       "\"copy_accuracy\":0.5,\"copy_accuracy_n\":10}\n{\"step\":3,\"loss\":2.8,"
       "\"val_loss\":2.4,\"copy_accuracy\":0.6,\"copy_accuracy_n\":10}\n");
  const std::string retrieval = Path("retrieval.jsonl");
  {
    LabRecordWriter writer(retrieval);
    const testing::RetrievalLab lab = testing::SampleRetrievalLab();
    for (const LabGate& g : lab.gates) writer.Append(g);
    for (const LabRecord& r : lab.records) writer.Append(r);
  }
  const std::string out = Path("out");
  const auto r =
      RunCli("report " + Quote(records) + " " + Quote(retrieval) + " --out " + Quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::vector<std::string> svgs = SvgFiles(out);
  EXPECT_TRUE(std::find(svgs.begin(), svgs.end(), "far_copy_copier_text") != svgs.end());
  EXPECT_TRUE(std::find(svgs.begin(), svgs.end(), "training_copy_rope") != svgs.end());
  ASSERT_FALSE(svgs.empty());

  // The page holds no script (test scaffolding has no place in it): the check goes into a copy,
  // just before </body>. On load it writes PLOT-OK / PLOT-EMPTY per svg.plot (its data marks
  // have a nonzero bounding box), then PLOTS n, into <pre id="render-check">, which --dump-dom
  // prints.
  std::string html = testing::ReadBytes((fs::path(out) / "report.html").string());
  ASSERT_FALSE(Has(html, "render-check"));
  const size_t body_end = html.rfind("</body>");
  ASSERT_NE(body_end, std::string::npos);
  html.insert(body_end, std::string("<pre id=\"render-check\">not run</pre>\n<script>\n") +
                            kRenderCheck + "</script>\n");
  const std::string page = fs::absolute(Path("checked.html")).string();
  testing::WriteBytes(page, html);

  // A profile and HOME of its own, inside the test's directory; `timeout` in case it hangs.
  const std::string cmd = "HOME=" + Quote(dir_.string()) + " timeout 120 " + Quote(chromium) +
                          " --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage "
                          "--no-first-run --user-data-dir=" +
                          Quote(Path("profile")) + " --virtual-time-budget=5000 --dump-dom " +
                          Quote("file://" + page) + " 2>" + Quote(Path("chromium.log"));
  std::string dom;
  {
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof buf, p)) dom.append(buf, n);
    const int status = pclose(p);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "chromium failed: " << testing::ReadBytes(Path("chromium.log"));
  }
  const std::string open = "<pre id=\"render-check\">";
  const size_t begin = dom.find(open);
  ASSERT_NE(begin, std::string::npos) << dom.substr(0, 2000);
  const size_t end = dom.find("</pre>", begin);
  ASSERT_NE(end, std::string::npos);
  std::istringstream lines(dom.substr(begin + open.size(), end - begin - open.size()));
  std::vector<std::string> ok;
  std::string line, count;
  while (std::getline(lines, line)) {
    if (line.starts_with("PLOT-OK ")) {
      ok.push_back(line.substr(8));
    } else if (line.starts_with("PLOTS ")) {
      count = line.substr(6);
    } else {
      ADD_FAILURE() << "render check: " << line;
    }
  }
  std::sort(ok.begin(), ok.end());
  EXPECT_EQ(ok, svgs);
  EXPECT_EQ(count, std::to_string(svgs.size()));
}

}  // namespace
}  // namespace stretch
