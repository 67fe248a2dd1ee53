// `stretch score --protocol`: the retrieval protocols run as a user runs them, on the tiny random
// model and character tokenizer (tests/cli/tiny_files.h: L = 64, 1200 tokens of text). The
// numbers of a random model mean nothing; the report's shape, its intervals and its errors do.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/cli_run.h"
#include "tests/cli/tiny_files.h"

namespace stretch {
namespace {

using testing::Files;
using testing::Has;
using testing::RunCli;
using testing::RunResult;

std::string Score() {
  return "score --model '" + Files().model + "' --tokenizer '" + Files().tok + "' --data '" +
         Files().text + "' --no-progress ";
}
std::string Temp(const std::string& name) { return Files().dir + "/" + name; }

// Every interval holds its estimate; accuracies lie in [0, 1].
void ExpectInterval(const nlohmann::json& i, bool proportion, const std::string& where) {
  const double e = i.at("estimate"), lo = i.at("low"), hi = i.at("high");
  EXPECT_LE(lo, e + 1e-12) << where;
  EXPECT_GE(hi, e - 1e-12) << where;
  if (proportion) {
    EXPECT_GE(lo, 0.0) << where;
    EXPECT_LE(hi, 1.0) << where;
  }
}

void ExpectArm(const nlohmann::json& a, const std::string& where) {
  ExpectInterval(a.at("accuracy"), true, where + " accuracy");
  ExpectInterval(a.at("loss"), false, where + " loss");
  EXPECT_GT(a.at("tokens_scored").get<int64_t>(), 0) << where;
}

TEST(ProtocolCli, HelpExplainsEveryProtocol) {
  const RunResult r = RunCli("score --help");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* s : {"far-copy[:source=text|random,span=32]", "repeat:period=N|kL",
                        "passkey[:layout=stretch|llama,digits=5]", "within-window control", "sees",
                        "llama-passkey", "--trials", "--distances", "--depths"}) {
    EXPECT_TRUE(Has(r.out, s)) << s << "\n" << r.out;
  }
}

TEST(ProtocolCli, FarCopyByDistanceWithIntervalsControlAndSeesBack) {
  const std::string json = Temp("far_copy.json");
  std::filesystem::remove(json);
  const RunResult r = RunCli(Score() +
                             "--ctx 128 --methods direct,pi --protocol far-copy "
                             "--protocol far-copy:source=random,span=16 --trials 3 "
                             "--bootstrap 200 --json-out '" +
                             json + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "== direct @ ctx 128")) << r.out;
  EXPECT_TRUE(Has(r.out, "== pi @ ctx 128")) << r.out;
  EXPECT_TRUE(Has(r.out, "copy - control")) << r.out;
  EXPECT_TRUE(Has(r.out, "sees back")) << r.out;
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
  EXPECT_EQ(j.at("trained_len"), 64);
  const nlohmann::json& results = j.at("protocol_results");
  ASSERT_EQ(results.size(), 4u) << "2 methods x 2 protocols";
  // L/4 = 16 is shorter than the 32-token span; then L/2, L and the whole window (128 - 32).
  std::vector<int64_t> distances;
  for (const auto& p : results[0].at("points")) distances.push_back(p.at("distance"));
  EXPECT_EQ(distances, (std::vector<int64_t>{32, 64, 96}));
  EXPECT_EQ(results[0].at("reference_distance"), 64);
  // A random model does not copy: its "sees back" is marked as saying nothing, and has no number
  // (a number beside "not informative" was read as one).
  EXPECT_EQ(results[0].at("sees_back_informative"), false);
  EXPECT_TRUE(results[0].at("sees_back").is_null());
  EXPECT_LT(results[0].at("max_gain").get<double>(), 0.2);
  EXPECT_TRUE(Has(r.out, "sees back: not informative")) << r.out;
  // span=16 reaches down to L/4.
  EXPECT_EQ(results[1].at("points")[0].at("distance"), 16);
  EXPECT_EQ(results[1].at("source"), "random");
  for (const auto& res : results) {
    for (const auto& p : res.at("points")) {
      ExpectArm(p.at("copy"), "copy");
      ExpectArm(p.at("control"), "control");
      EXPECT_EQ(p.at("copy").at("tokens_scored"), p.at("control").at("tokens_scored"))
          << "the same positions";
      ExpectInterval(p.at("accuracy_difference"), false, "difference");
      EXPECT_TRUE(p.at("tie").is_boolean());
    }
  }
}

TEST(ProtocolCli, RepeatPeriodsInTokensOrMultiplesOfL) {
  const RunResult r = RunCli(Score() +
                             "--ctx 256 --protocol repeat:period=2L --protocol "
                             "repeat:period=L --protocol repeat:period=100 "
                             "--protocol nonrepeat --trials 2 --bootstrap 200 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  const nlohmann::json& res = j.at("protocol_results");
  ASSERT_EQ(res.size(), 4u);
  EXPECT_EQ(res[0].at("period"), 128);
  EXPECT_EQ(res[0].at("within_window_control"), false);
  EXPECT_EQ(res[1].at("period"), 64);
  EXPECT_EQ(res[1].at("within_window_control"), true) << "period L: labelled";
  EXPECT_TRUE(Has(res[1].at("description"), "within-window control"));
  EXPECT_EQ(res[2].at("period"), 100);
  for (int k = 0; k < 3; ++k) {
    ExpectArm(res[k].at("repeat"), "repeat");
    ExpectArm(res[k].at("control"), "control");
    // Scored from the second copy's second token: ctx - period - 1 per sequence.
    EXPECT_EQ(res[k].at("repeat").at("tokens_scored").get<int64_t>(),
              2 * (256 - res[k].at("period").get<int64_t>() - 1));
  }
  ExpectArm(res[3].at("result"), "nonrepeat");
  EXPECT_EQ(res[3].at("result").at("tokens_scored"), 2 * 256);
}

// The stretch layout at 300 (3 filler windows of the 1200-token text), llama.cpp's at 800 (its
// junk is the filler; its needle goes between repetitions of about 90 tokens, so the window must
// hold several).
TEST(ProtocolCli, PasskeyBothLayoutsWithTheirControls) {
  struct Case {
    std::string args, layout;
    int digits;
  };
  for (const Case& c : {Case{"--ctx 300 --protocol passkey", "stretch", 5},
                        Case{"--ctx 800 --protocol passkey:layout=llama,digits=4", "llama", 4}}) {
    const RunResult r =
        RunCli(Score() + c.args + " --depths 0,0.5,1 --trials 3 --bootstrap 200 --json");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    const nlohmann::json& res = j.at("protocol_results");
    ASSERT_EQ(res.size(), 1u);
    EXPECT_EQ(res[0].at("layout"), c.layout);
    EXPECT_EQ(res[0].at("digits"), c.digits);
    ASSERT_EQ(res[0].at("points").size(), 3u);
    double last_distance = 1e9;
    for (const auto& pt : res[0].at("points")) {
      for (const char* arm : {"passkey", "control"}) {
        const nlohmann::json& a = pt.at(arm);
        EXPECT_EQ(a.at("trials"), 3);
        EXPECT_EQ(a.at("digits_scored"), 3 * c.digits);
        ExpectInterval(a.at("exact"), true, "exact");
        ExpectInterval(a.at("digit_accuracy"), true, "digits");
        ExpectInterval(a.at("digit_loss"), false, "digit loss");
        // One count a digit place, each of 3 trials at most, together the digits right.
        const auto by_place = a.at("right_by_place").get<std::vector<int64_t>>();
        ASSERT_EQ(by_place.size(), static_cast<size_t>(c.digits));
        int64_t right = 0;
        for (const int64_t n : by_place) {
          EXPECT_GE(n, 0);
          EXPECT_LE(n, 3);
          right += n;
        }
        EXPECT_NEAR(static_cast<double>(right),
                    a.at("digit_accuracy").at("estimate").get<double>() * 3 * c.digits, 1e-9);
      }
      // Deeper needles sit closer to the question.
      EXPECT_LT(pt.at("needle_to_answer").get<double>(), last_distance) << c.layout;
      last_distance = pt.at("needle_to_answer");
    }
  }
  const RunResult text = RunCli(Score() +
                                "--ctx 800 --protocol passkey:layout=llama --depths 0.5 "
                                "--trials 2 --bootstrap 200");
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_TRUE(Has(text.out, "keys read back")) << text.out;
  EXPECT_TRUE(Has(text.out, "control (no key)")) << text.out;
  EXPECT_TRUE(Has(text.out, "/2 ")) << text.out;
  EXPECT_TRUE(Has(text.out, "right by place")) << text.out;
  EXPECT_TRUE(Has(text.out, "ctrl by place")) << text.out;
}

// `stretch tune` ranks with its retrieval column and says what a tie is; a recommended method
// that masks keys out (window, lambda, ...) says on its line how far it sees at most, and no
// other recommended method does. Which method a random model gets is not the point.
TEST(ProtocolCli, TuneSaysWhatATieIsAndHowFarAMaskedMethodSees) {
  for (const char* objective : {"loss", "retrieval", "both"}) {
    const RunResult r = RunCli("tune --model '" + Files().model + "' --tokenizer '" + Files().tok +
                               "' --data '" + Files().text +
                               "' --ctx 256 --windows 2 --rounds 0 --retrieval-trials 2 --span 8 "
                               "--objective " +
                               objective);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_TRUE(Has(r.out, "(tie): cannot be told apart from rank 1")) << r.out;
    const size_t at = r.out.find("recommended: --method ");
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
    const std::string spec = line.substr(22, line.find(' ', 22) - 22);
    bool masked = false;
    for (const char* m : {"window", "lambda", "blockwise", "chunked", "streaming"}) {
      masked = masked || spec.rfind(std::string(m) + ":", 0) == 0 || spec == m;
    }
    EXPECT_EQ(Has(line, "WARNING: it sees no key"), masked) << line;
  }
}

TEST(ProtocolCli, BadSpecsAndFlagsFailBeforeScoring) {
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"--ctx 128 --protocol copy", "unknown protocol \"copy\""},
      {"--ctx 128 --protocol repeat", "repeat:period=N"},
      {"--ctx 128 --protocol repeat:period=1.5L", "period=1.5L: expected kL with k a whole"},
      {"--ctx 128 --protocol repeat:period=2L", "expected a period below the window"},
      {"--ctx 128 --protocol far-copy:source=books", "expected text or random"},
      {"--ctx 128 --protocol far-copy --distances 8", "shorter than the span"},
      {"--ctx 128 --protocol far-copy --distances 200", "none fits ctx 128"},
      // No distance by default: once silently an empty table and exit status 0.
      {"--ctx 128 --protocol far-copy:span=100", "ctx 128 is too short for a span of 100"},
      {"--ctx 128 --protocol passkey:layout=gpt", "expected stretch or llama"},
      {"--ctx 128 --protocol far-copy --tail 16", "--tail"},
      {"--ctx 128 --protocol far-copy --max-windows 2", "--trials"},
      {"--ctx 512 --protocol far-copy --trials 50", "fewer than the 50 asked for"},
  };
  for (const Case& c : cases) {
    const RunResult r = RunCli(Score() + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_TRUE(Has(r.out, c.message)) << c.args << "\n" << r.out;
  }
}

}  // namespace
}  // namespace stretch
