// stretch tune's grid, its refinement steps, and the choice: the best cell is the lowest loss of
// all cells scored, and each cell's loss is exactly what scoring that spec alone gives.
#include "src/eval/tune.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/position/method.h"
#include "tests/testing/random_model.h"

namespace stretch {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(Tune, GridCoversEveryFamilyAtTheScaleOfTheTargetLength) {
  const std::vector<std::string> grid = TuneGrid(512, 4096);  // s = 8
  EXPECT_TRUE(Contains(grid, "direct"));
  EXPECT_TRUE(Contains(grid, "pi:factor=8"));
  EXPECT_TRUE(Contains(grid, "ntk:factor=32"));
  EXPECT_TRUE(Contains(grid, "yarn:factor=16"));
  EXPECT_TRUE(Contains(grid, "rerope:window=64"));
  EXPECT_TRUE(Contains(grid, "self-extend:group=8,window=256"));
  EXPECT_TRUE(Contains(grid, "lambda:sinks=4,window=512"));
  EXPECT_TRUE(Contains(grid, "blockwise"));
  for (const std::string& spec : grid) EXPECT_NO_THROW(ParseMethod(spec)) << spec;
  // Shorter than L: no scale below 1.
  EXPECT_TRUE(Contains(TuneGrid(512, 256), "pi:factor=1"));
}

TEST(Tune, NeighboursStepEachNumberBySquareRootOfTwo) {
  const std::vector<std::string> n = TuneNeighbours("self-extend:group=8,window=256");
  EXPECT_EQ(n.size(), 4u);
  EXPECT_TRUE(Contains(n, CanonicalSpec(ParseMethod("self-extend:group=6,window=256"))));
  EXPECT_TRUE(Contains(n, CanonicalSpec(ParseMethod("self-extend:group=11,window=256"))));
  EXPECT_TRUE(Contains(n, CanonicalSpec(ParseMethod("self-extend:group=8,window=181"))));
  EXPECT_TRUE(Contains(n, CanonicalSpec(ParseMethod("self-extend:group=8,window=362"))));
  // A factor below 1 is refused by the method: left out. log-n stays on.
  const std::vector<std::string> pi = TuneNeighbours("pi:factor=1+logn");
  ASSERT_EQ(pi.size(), 1u);
  EXPECT_EQ(pi[0], CanonicalSpec(ParseMethod("pi:factor=1.41421+logn")));
  EXPECT_TRUE(TuneNeighbours("direct").empty());
}

TEST(Tune, BestIsTheLowestLossOfTheCellsEachScoredAsOnItsOwn) {
  const ModelConfig c = testing::TinyConfig();  // L = 64
  const Model m = testing::RandomModel(c, 3);
  Transformer model(m);
  Rng rng(9);
  std::vector<int> stream(3000);
  for (int& t : stream) t = static_cast<int>(rng.NextU64() % 40);
  TuneOptions o;
  o.ctx = 256;
  o.windows = 2;
  size_t calls = 0;
  const TuneResult r = RunTune(model, stream, o, [&](const TuneCell&, size_t, size_t) { ++calls; });
  ASSERT_FALSE(r.cells.empty());
  EXPECT_EQ(calls, r.cells.size());
  EXPECT_GE(r.cells.size(), TuneGrid(64, 256).size() - static_cast<size_t>(r.refused));
  for (const TuneCell& cell : r.cells) {
    EXPECT_LE(r.cells[r.best].summary.MeanLoss(), cell.summary.MeanLoss()) << cell.spec;
  }
  // The winner's loss is what scoring it alone gives.
  ScoreOptions so;
  so.ctx = 256;
  so.max_windows = 2;
  so.progress = false;
  model.SetMethod(ParseMethod(r.cells[r.best].spec), 256);
  EXPECT_DOUBLE_EQ(ScoreStream(model, stream, so).MeanLoss(), r.cells[r.best].summary.MeanLoss());
  // Too short a sample is refused.
  EXPECT_THROW(RunTune(model, std::span<const int>(stream).first(100), o), Error);
}

}  // namespace
}  // namespace stretch
