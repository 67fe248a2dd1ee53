// A whole training run from its options (src/train/train_run.h): a tiny run writes its
// checkpoints, log and stored options; a run stopped mid-way and resumed from its checkpoint ends
// with the uninterrupted run's losses and checkpoint, bit for bit; a fine-tune from a checkpoint
// at a longer length; bad options are refused by their field's name.
#include "src/train/train_run.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/io/safetensors.h"
#include "src/train/run_dir.h"
#include "tests/testing/files.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;

std::vector<nlohmann::json> ReadLog(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class TrainRun : public testing::TempDirTest {
 protected:
  TrainRun() : TempDirTest("stretch_train_run_") {}
  void SetUp() override {
    TempDirTest::SetUp();
    // Four documents of pseudo-English from a small word list, deterministic.
    const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "ran"};
    Rng rng(4);
    fs::create_directories(Path("corpus"));
    for (int d = 0; d < 4; ++d) {
      std::string text;
      for (int w = 0; w < 150; ++w) text += std::string(words[rng.NextU64() % 8]) + " ";
      File("corpus/doc" + std::to_string(d) + ".txt", text);
    }
  }
  TrainRunOptions Options(const std::string& out) const {
    TrainRunOptions o;
    o.data = Path("corpus");
    o.out = Path(out);
    o.seq_len = 16;
    o.dim = 16;
    o.layers = 1;
    o.heads = 2;
    o.steps = 6;
    o.batch = 2;
    o.save_every = 3;
    o.eval_every = 3;
    o.eval_windows = 2;
    o.log_every = 1;
    o.valid_fraction = 0.25;
    return o;
  }
  // Runs `o`, collecting the notes and the progress reports.
  TrainLoopResult Run(const TrainRunOptions& o) {
    notes_.clear();
    progress_.clear();
    return RunTraining(o, {[&](const std::string& line) { notes_ += line + "\n"; },
                           [&](const TrainProgress& p) { progress_.push_back(p); }});
  }
  std::string notes_;
  std::vector<TrainProgress> progress_;
};

TEST_F(TrainRun, ATinyRunWritesItsCheckpointsLogAndOptions) {
  TrainRunOptions o = Options("run");
  o.build = "1111aaaa2222";
  const TrainLoopResult r = Run(o);
  EXPECT_EQ(r.steps_done, 6);
  EXPECT_EQ(r.last_saved, Path("run/" + StepFileName(6)));
  EXPECT_TRUE(fs::exists(Path("run/" + StepFileName(3))));
  EXPECT_TRUE(fs::exists(Path("run/") + kTokenCacheName));
  EXPECT_EQ(ReadLog(r.log_path).size(), 6u);
  ASSERT_EQ(progress_.size(), 6u);
  EXPECT_TRUE(progress_[2].eval.has_value());
  EXPECT_TRUE(Has(notes_, "4 documents,")) << notes_;
  EXPECT_TRUE(Has(notes_, "bytes tokenizer")) << notes_;
  EXPECT_TRUE(Has(notes_, "parameters; dim 16, 1 layers, 2 heads; position rope")) << notes_;
  EXPECT_TRUE(Has(notes_, "unigram entropy of the training tokens")) << notes_;

  // The checkpoint stores the options with the defaults written out, as `stretch train` reads
  // them back on --resume.
  const SafetensorsFile f(r.last_saved);
  const nlohmann::json stored = nlohmann::json::parse(f.GetMetadata("stretch.cli"));
  EXPECT_EQ(stored, StoredRunOptions(o));
  EXPECT_EQ(stored.at("tokenizer"), "bytes");
  EXPECT_EQ(stored.at("block"), "llama");
  EXPECT_EQ(stored.at("seq_len"), 16);
  EXPECT_EQ(stored.at("kv_heads"), 0);
  EXPECT_EQ(stored.at("min_lr"), -1.0);
  EXPECT_EQ(stored.at("warmup"), -1);
  EXPECT_EQ(stored.at("init"), "");
  // The build that wrote it, apart from the options a resumed run must match.
  EXPECT_EQ(f.FindMetadata("stretch.build"), std::optional<std::string>("1111aaaa2222"));
  EXPECT_FALSE(stored.contains("build"));

  // A second new run into the directory is refused; with overwrite it replaces the first.
  const std::string refused = testing::ErrorOf([&] { Run(o); });
  EXPECT_TRUE(Has(refused, "TrainRunOptions::out " + o.out + " holds another run")) << refused;
  TrainRunOptions again = o;
  again.overwrite = true;
  again.steps = 2;
  again.build = "";
  Run(again);
  EXPECT_FALSE(SafetensorsFile(Path("run/" + StepFileName(2))).FindMetadata("stretch.build"))
      << "no build given: none written";
  EXPECT_TRUE(Has(notes_, "TrainRunOptions::overwrite: deleted the earlier run")) << notes_;
  EXPECT_FALSE(fs::exists(Path("run/" + StepFileName(6))));
  EXPECT_EQ(ReadLog(r.log_path).size(), 2u);
}

// A run stopped after its step-3 checkpoint (the progress callback throws at step 4), then
// resumed from what ReadTrainResume finds: the same losses and the same last checkpoint as a run
// that was never stopped.
void ExpectResumedEqualsWhole(const TrainRunOptions& whole_options, const TrainRunOptions& o) {
  const TrainLoopResult whole = RunTraining(whole_options);

  struct Stop {};
  EXPECT_THROW(RunTraining(o, {{},
                               [](const TrainProgress& p) {
                                 if (p.stats.step == 4) throw Stop{};
                               }}),
               Stop);
  EXPECT_EQ(ReadLog(o.out + "/" + kTrainLogName).size(), 3u);
  const TrainResume resume = ReadTrainResume(o);
  EXPECT_EQ(resume.checkpoint, o.out + "/" + StepFileName(3));
  EXPECT_EQ(resume.stored, StoredRunOptions(o));
  TrainRunOptions resumed = o;
  resumed.resume_from = resume.checkpoint;
  std::string notes;
  int64_t reports = 0;
  const TrainLoopResult part =
      RunTraining(resumed, {[&](const std::string& line) { notes += line + "\n"; },
                            [&](const TrainProgress&) { ++reports; }});
  EXPECT_TRUE(Has(notes, "resumed from " + resume.checkpoint + " at step 3")) << notes;
  EXPECT_EQ(reports, 3);

  const std::vector<nlohmann::json> a = ReadLog(whole.log_path), b = ReadLog(part.log_path);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k]["loss"], b[k]["loss"]) << k;
    EXPECT_EQ(a[k]["grad_norm"], b[k]["grad_norm"]) << k;
    EXPECT_EQ(a[k].value("val_loss", -1.0), b[k].value("val_loss", -1.0)) << k;
  }
  EXPECT_EQ(testing::ReadBytes(whole.last_saved), testing::ReadBytes(part.last_saved));
}

TEST_F(TrainRun, AStoppedRunResumedEndsBitForBitAsTheUninterruptedOne) {
  ExpectResumedEqualsWhole(Options("whole"), Options("part"));
}

// The same with passkey rows in the batches: their depth, key and filler come from the trainer's
// Rng, which the checkpoint restores. Passkey documents need seq_len >= 61 (bytes).
TEST_F(TrainRun, AStoppedRunWithPasskeyRowsResumedEndsBitForBit) {
  auto with_passkey = [&](const std::string& out) {
    TrainRunOptions o = Options(out);
    o.seq_len = 64;
    o.passkey_share = 0.5;
    return o;
  };
  ExpectResumedEqualsWhole(with_passkey("whole"), with_passkey("part"));
  // The share is stored (and so resumed with); the losses differ from a run without it.
  const SafetensorsFile f(Path("part/" + StepFileName(6)));
  EXPECT_EQ(nlohmann::json::parse(f.GetMetadata("stretch.cli")).at("passkey_share"), 0.5);
  TrainRunOptions plain = with_passkey("plain");
  plain.passkey_share = 0;
  const TrainLoopResult p = Run(plain);
  EXPECT_NE(ReadLog(p.log_path)[5]["loss"], ReadLog(Path("part/") + kTrainLogName)[5]["loss"]);
}

// The same with copy rows (periodic, gapped, textcopy) and passkey rows: their draws come from the
// trainer's Rng too. The copy readout is logged at each evaluation (its rows are drawn apart from
// the batches, so it changes nothing of the run), and the mix and spans are stored.
TEST_F(TrainRun, AStoppedRunWithCopyRowsResumedEndsBitForBitAndLogsTheReadout) {
  auto with_copy = [&](const std::string& out) {
    TrainRunOptions o = Options(out);
    o.seq_len = 64;
    o.passkey_share = 0.1;
    o.copy_mix = CopyMix{0.0, 0.2, 0.3, 0.2};
    o.copy_span_max = 12;
    return o;
  };
  ExpectResumedEqualsWhole(with_copy("whole"), with_copy("part"));
  const nlohmann::json stored = nlohmann::json::parse(
      SafetensorsFile(Path("part/" + StepFileName(6))).GetMetadata("stretch.cli"));
  EXPECT_EQ(stored.at("mix"), "periodic=0.2,gapped=0.3,textcopy=0.2");
  EXPECT_EQ(stored.at("passkey_share"), 0.1);
  EXPECT_EQ(stored.at("copy_span_max"), 12);
  EXPECT_FALSE(stored.contains("copy_span_min"));
  const std::vector<nlohmann::json> log = ReadLog(Path("whole/") + kTrainLogName);
  ASSERT_EQ(log.size(), 6u);
  for (const char* key : {"copy_accuracy", "copy_control", "textcopy_accuracy", "textcopy_control",
                          "passkey_digits", "passkey_keys"}) {
    EXPECT_TRUE(log[2].contains(key)) << key << " " << log[2].dump();
    EXPECT_FALSE(log[1].contains(key)) << key;  // only at evaluations
  }
  EXPECT_EQ(log[2].at("passkey_keys_n"), 2);  // eval_windows trials
  // A run without copy rows: other batches, so other losses.
  TrainRunOptions plain = with_copy("plain");
  plain.copy_mix = CopyMix{};
  const TrainLoopResult p = Run(plain);
  EXPECT_NE(ReadLog(p.log_path)[5]["loss"], log[5]["loss"]);
}

// Randcopy rows with small alphabets of letters and digits: resumed bit for bit, the options
// stored, the randcopy readout logged.
TEST_F(TrainRun, RandCopyWithSmallAlphabetsResumedEndsBitForBitAndStoresItsOptions) {
  auto with_rand = [&](const std::string& out) {
    TrainRunOptions o = Options(out);
    o.seq_len = 64;
    o.copy_mix.randcopy = 0.4;
    o.copy_mix.gapped = 0.2;
    o.copy_span_max = 12;
    o.copy_alphabet_min = 3;
    o.copy_strings = "abcdefghij0123456789";
    return o;
  };
  ExpectResumedEqualsWhole(with_rand("whole"), with_rand("part"));
  const nlohmann::json stored = nlohmann::json::parse(
      SafetensorsFile(Path("part/" + StepFileName(6))).GetMetadata("stretch.cli"));
  EXPECT_EQ(stored.at("mix"), "gapped=0.2,randcopy=0.4");
  EXPECT_EQ(stored.at("copy_alphabet_min"), 3);
  EXPECT_EQ(stored.at("copy_strings"), "abcdefghij0123456789");
  const std::vector<nlohmann::json> log = ReadLog(Path("whole/") + kTrainLogName);
  ASSERT_EQ(log.size(), 6u);
  EXPECT_TRUE(log[2].contains("randcopy_accuracy")) << log[2].dump();
  EXPECT_TRUE(log[2].contains("randcopy_control")) << log[2].dump();
  // Another alphabet rule draws other rows, so other losses.
  TrainRunOptions whole = with_rand("whole_letters");
  whole.copy_alphabet_min = 0;
  EXPECT_NE(ReadLog(Run(whole).log_path)[5]["loss"], log[5]["loss"]);
}

// A SentencePiece run trains on copy rows: its alphabets are encoded as mid-text tokens (encoded
// alone, each character would carry the dummy-prefix space, one token that every character shares,
// and the alphabets were refused as sharing it).
TEST_F(TrainRun, ASentencePieceRunTrainsOnCopyRows) {
  TrainRunOptions o = Options("bpe");
  o.tokenizer = TokenizerKind::kBpe;
  o.vocab_size = 300;
  o.seq_len = 64;
  o.copy_mix.gapped = 0.5;
  o.copy_mix.randcopy = 0.2;
  o.copy_span_max = 12;
  const TrainLoopResult r = Run(o);
  const std::vector<nlohmann::json> log = ReadLog(r.log_path);
  ASSERT_EQ(log.size(), 6u);
  EXPECT_TRUE(log[2].contains("copy_accuracy")) << log[2].dump();
}

// Runs without copy rows store exactly the options they stored before the options existed.
TEST(StoredRunOptionsTest, CopyMixAndSpansAreStoredOnlyWhenSet) {
  TrainRunOptions o;
  EXPECT_FALSE(StoredRunOptions(o).contains("mix"));
  EXPECT_FALSE(StoredRunOptions(o).contains("copy_span_min"));
  EXPECT_EQ(StoredRunOptions(o).size(), 28u);
  o.copy_mix.textcopy = 0.25;
  o.copy_span_min = 4;
  EXPECT_EQ(StoredRunOptions(o).at("mix"), "textcopy=0.25");
  EXPECT_EQ(StoredRunOptions(o).at("copy_span_min"), 4);
  EXPECT_EQ(StoredRunOptions(o).size(), 30u);
}

// Runs without passkey rows store exactly the options they stored before the option existed.
TEST(StoredRunOptionsTest, PasskeyShareIsStoredOnlyWhenNotZero) {
  TrainRunOptions o;
  EXPECT_FALSE(StoredRunOptions(o).contains("passkey_share"));
  EXPECT_EQ(StoredRunOptions(o).size(), 28u);
  o.passkey_share = 0.1;
  EXPECT_EQ(StoredRunOptions(o).at("passkey_share"), 0.1);
  EXPECT_FALSE(StoredRunOptions(o).contains("passkey_phrasings"));
  o.passkey_phrasings = "varied";
  EXPECT_EQ(StoredRunOptions(o).at("passkey_phrasings"), "varied");
  EXPECT_FALSE(StoredRunOptions(o).contains("passkey_filler"));
  o.passkey_filler = "mixed";
  EXPECT_EQ(StoredRunOptions(o).at("passkey_filler"), "mixed");
  EXPECT_FALSE(StoredRunOptions(o).contains("passkey_decoys"));
  o.passkey_decoys = 2;
  EXPECT_EQ(StoredRunOptions(o).at("passkey_decoys"), 2);
}

// init: the checkpoint's architecture and tokenizer at a new length with position
// interpolation; without a seq_len, the checkpoint's.
TEST_F(TrainRun, InitFineTunesACheckpointAtALongerLength) {
  TrainRunOptions base = Options("base");
  base.steps = 2;
  base.save_every = 2;
  Run(base);
  const std::string ck = Path("base/" + StepFileName(2));

  TrainRunOptions tune;
  tune.data = Path("corpus");
  tune.out = Path("tune");
  tune.init = Path("base");  // a run's directory: its newest checkpoint
  tune.seq_len = 32;
  tune.position = "rope:pi=2";
  tune.steps = 2;
  tune.batch = 2;
  tune.eval_every = 0;
  tune.valid_fraction = 0.25;
  const TrainLoopResult r = Run(tune);
  EXPECT_TRUE(Has(notes_, "(the checkpoint's bytes tokenizer, vocabulary")) << notes_;
  EXPECT_TRUE(Has(notes_, "TrainRunOptions::init " + ck + ": from the checkpoint:")) << notes_;
  EXPECT_TRUE(Has(notes_,
                  "changed: seq_len 16 -> 32, position rope:base=10000 -> "
                  "rope:base=10000,pi=2\n"))
      << notes_;
  EXPECT_TRUE(Has(notes_, "parameters initialized from " + ck)) << notes_;
  const SafetensorsFile f(r.last_saved);
  const nlohmann::json config = nlohmann::json::parse(f.GetMetadata("stretch.config"));
  EXPECT_EQ(config.at("seq_len"), 32);
  EXPECT_EQ(config.at("dim"), 16);
  EXPECT_EQ(config.at("rope_interpolation"), 2.0);
  const nlohmann::json stored = nlohmann::json::parse(f.GetMetadata("stretch.cli"));
  EXPECT_EQ(stored.at("init"), ck);
  EXPECT_EQ(stored.at("seq_len"), 32);

  TrainRunOptions same_length = tune;
  same_length.out = Path("same_length");
  same_length.seq_len.reset();
  same_length.position.reset();
  const TrainLoopResult s = Run(same_length);
  EXPECT_TRUE(Has(notes_, "changed: nothing")) << notes_;
  const nlohmann::json kept =
      nlohmann::json::parse(SafetensorsFile(s.last_saved).GetMetadata("stretch.config"));
  EXPECT_EQ(kept.at("seq_len"), 16);
}

TEST_F(TrainRun, BadOptionsAreRefusedByTheirFieldsName) {
  auto error = [&](const TrainRunOptions& o) { return testing::ErrorOf([&] { Run(o); }); };
  TrainRunOptions o = Options("bad");
  o.out.clear();
  EXPECT_TRUE(Has(error(o), "TrainRunOptions::out is required")) << error(o);
  o = Options("bad");
  o.data.clear();
  EXPECT_TRUE(Has(error(o), "TrainRunOptions::data is required")) << error(o);
  o = Options("bad");
  o.overwrite = true;
  o.resume_from = Path("bad/" + StepFileName(3));
  EXPECT_TRUE(Has(error(o),
                  "TrainRunOptions::overwrite and TrainRunOptions::resume_from "
                  "contradict each other"))
      << error(o);
  o = Options("bad");
  o.min_lr = -0.5;
  EXPECT_TRUE(
      Has(error(o), "TrainRunOptions::min_lr: found -0.5, expected a finite number in [0, 1000]"))
      << error(o);
  o = Options("bad");
  o.block = "gau";
  o.heads = 4;
  EXPECT_TRUE(Has(error(o),
                  "TrainRunOptions::heads 4 TrainRunOptions::kv_heads 0: the GAU block "
                  "has a single head"))
      << error(o);
  o = Options("bad");
  o.data = Path("bad/corpus");  // data inside the run's directory
  fs::create_directories(o.data);
  EXPECT_TRUE(
      Has(error(o), "TrainRunOptions::data " + o.data + " lies inside TrainRunOptions::out"))
      << error(o);
  o = Options("bad");
  o.passkey_share = 0.6;
  EXPECT_TRUE(Has(
      error(o), "TrainRunOptions::passkey_share: found 0.6, expected a finite number in [0, 0.5]"))
      << error(o);
  o = Options("bad");
  o.passkey_share = 0.1;  // at seq_len 16
  EXPECT_TRUE(Has(error(o),
                  "TrainRunOptions::seq_len 16: too short for passkey documents "
                  "(TrainRunOptions::passkey_share 0.1): the needle, the question, the key twice "
                  "and a few filler tokens need TrainRunOptions::seq_len >= 61"))
      << error(o);
  o = Options("bad");
  o.copy_mix = CopyMix{0.0, 0.5, 0.6, 0.0};
  EXPECT_TRUE(Has(error(o),
                  "TrainRunOptions::copy_mix periodic=0.5,gapped=0.6 with "
                  "TrainRunOptions::passkey_share 0: the shares add up to 1.1, expected at most 1"))
      << error(o);
  o = Options("bad");
  o.copy_mix.gapped = -0.1;
  EXPECT_TRUE(Has(error(o),
                  "TrainRunOptions::copy_mix: gapped share -0.1: expected a finite "
                  "number in [0, 1]"))
      << error(o);
  o = Options("bad");
  o.copy_mix.gapped = 0.5;
  o.copy_span_max = 8;  // at seq_len 16: two copies and BOS need 2 max <= 15
  EXPECT_TRUE(Has(error(o),
                  "TrainRunOptions::copy_span_min 2, TrainRunOptions::copy_span_max 8: string "
                  "lengths 2..8 at sequence length 16: expected 2 <= min <= max and 2 max <= 15"))
      << error(o);
  o = Options("bad");
  o.copy_alphabet_min = 27;
  EXPECT_TRUE(
      Has(error(o), "TrainRunOptions::copy_alphabet_min: found 27, expected 0 (off) or 2..26"))
      << error(o);
  o = Options("bad");
  o.passkey_filler = "junk";
  EXPECT_TRUE(Has(error(o), "TrainRunOptions::passkey_filler \"junk\": expected")) << error(o);
  o = Options("bad");
  o.passkey_decoys = 5;
  EXPECT_TRUE(Has(error(o), "TrainRunOptions::passkey_decoys: found 5, expected")) << error(o);
  o = Options("bad");
  o.passkey_phrasings = "many";
  EXPECT_TRUE(Has(error(o), "TrainRunOptions::passkey_phrasings \"many\": expected")) << error(o);
  o = Options("bad");
  o.copy_strings = "abca";
  EXPECT_TRUE(Has(error(o), "TrainRunOptions::copy_strings \"abca\": character 4 (byte 97)"))
      << error(o);
  o = Options("bad");
  o.copy_mix.gapped = 0.5;
  o.copy_strings = "abcX";  // X is a gap character
  EXPECT_TRUE(Has(error(o), "share token")) << error(o);
  EXPECT_TRUE(Has(testing::ErrorOf([&] { ReadTrainResume(Options("empty")); }),
                  "TrainRunOptions::resume_from: no complete checkpoint in"));

  // init: a size that differs from the checkpoint's.
  TrainRunOptions base = Options("base");
  base.steps = 1;
  Run(base);
  o = Options("bad_init");
  o.init = Path("base");
  o.dim = 32;
  EXPECT_TRUE(Has(error(o), "TrainRunOptions::dim 32: the checkpoint " +
                                Path("base/" + StepFileName(1)) + " has dim=16"))
      << error(o);
}

// The architecture of a run is built from its options only after their ranges are checked: a
// layer count of 555555551 (fuzz train_config, fuzz/regressions/train_config/) allocated a layer
// list of 26 GB before any check refused it.
TEST(TrainRunArchitecture, ChecksTheRangesBeforeBuildingTheLayerList) {
  TrainRunOptions o;
  o.layers = 555555551;
  const std::string error = testing::ErrorOf([&] { RunArchitecture(o, 300); });
  EXPECT_NE(error.find("TrainRunOptions::layers: found 555555551, expected a whole number in [1, "),
            std::string::npos)
      << error;
  o.layers = 2;
  EXPECT_EQ(RunArchitecture(o, 300).model.n_layers, 2);
}

}  // namespace
}  // namespace stretch
