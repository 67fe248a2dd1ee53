#include "src/lab/lab.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <ranges>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "src/core/content_hash.h"
#include "src/core/dir_lock.h"
#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/core/rng.h"
#include "src/core/stop.h"
#include "src/core/threads.h"
#include "src/core/timer.h"
#include "src/core/words.h"
#include "src/eval/nbce.h"
#include "src/eval/protocols.h"
#include "src/eval/retrieval.h"
#include "src/eval/rotation.h"
#include "src/eval/sweep.h"
#include "src/io/model_file.h"
#include "src/io/output_file.h"
#include "src/io/passkey.h"
#include "src/io/stretch_checkpoint.h"
#include "src/lab/gate.h"
#include "src/lab/score_cell.h"
#include "src/model/transformer.h"
#include "src/position/method.h"
#include "src/position/plan.h"
#include "src/report/train_curves.h"
#include "src/train/arch_spec.h"
#include "src/train/copy_data.h"
#include "src/train/run.h"
#include "src/train/run_dir.h"
#include "src/train/train_run.h"
#include "src/train/trainer.h"

namespace stretch {
namespace fs = std::filesystem;
namespace {

using Note = std::function<void(const std::string&)>;

void Tell(const Note& note, const std::string& line) {
  if (note) note(line);
}

// The cells left unscored because a method cannot run them (a RoPE method on a model trained
// with windows, NBCE on a protocol it has no question in, a length too short for a passkey
// layout), told once per model, not once a cell: the full lab printed 3,400 such lines before its
// first step. Cells refused for the same reason (its text with its quoted specs left out) share one
// clause: the methods with their cells, then the first one's reason (its spec resolved for the
// first cell).
class RefusalTally {
 public:
  void Add(const std::string& method, const std::string& why) {
    const std::string kind = WithoutQuotes(why);
    auto group = std::find_if(groups_.begin(), groups_.end(),
                              [&](const Group& g) { return g.kind == kind; });
    if (group == groups_.end()) group = groups_.insert(groups_.end(), Group{kind, why, {}});
    auto m = std::find_if(group->methods.begin(), group->methods.end(),
                          [&](const auto& x) { return x.first == method; });
    if (m == group->methods.end()) m = group->methods.insert(group->methods.end(), {method, 0});
    m->second++;
  }
  // One line for the model, then forgets it.
  void Flush(const Note& note, const std::string& label) {
    if (groups_.empty()) return;
    int64_t total = 0;
    std::vector<std::string> clauses;
    for (const Group& g : groups_) {
      std::vector<std::string> names, counted;
      bool same = true;
      for (const auto& [method, cells] : g.methods) {
        total += cells;
        same = same && cells == g.methods[0].second;
        names.push_back(method);
        counted.push_back(fmt::format("{} ({})", method, cells));
      }
      const int64_t first = g.methods[0].second;
      clauses.push_back(same ? fmt::format("{} ({}{}): {}", fmt::join(names, ", "),
                                           Counted(first, "cell"),
                                           g.methods.size() == 1 ? "" : " each", g.why)
                             : fmt::format("{} (cells): {}", fmt::join(counted, ", "), g.why));
    }
    Tell(note, fmt::format("{}: {} not scored, their method or length unable to run them: {}",
                           label, Counted(total, "cell"), fmt::join(clauses, "; ")));
    groups_.clear();
  }

 private:
  static std::string WithoutQuotes(const std::string& s) {
    std::string out;
    bool quoted = false;
    for (const char c : s) {
      if (c == '"')
        quoted = !quoted;
      else if (!quoted)
        out += c;
    }
    return out;
  }
  struct Group {
    std::string kind, why;
    std::vector<std::pair<std::string, int64_t>> methods;  // in the order met, with their cells
  };
  std::vector<Group> groups_;
};

// Whether the cell is left unscored under `gate`: a far-copy or passkey cell beyond L whose gate
// part failed (gate.h, NotInformativeReason), unless the options ask for those too. Repeat cells
// are scored whatever the gate says: the seeds' repeat column.
bool GateHoldsBack(const LabOptions& o, const LabGate& gate, const CellPlan& c) {
  if (o.score_not_informative || c.ctx <= o.train_len) return false;
  if (c.protocol != "far-copy" && c.protocol != "passkey") return false;
  LabRecord r;
  r.protocol = c.protocol;
  r.material = c.material;
  return !NotInformativeReason(gate, r).empty();
}

// Why a model of this configuration cannot run the cell's method (a RoPE scaling on a model
// without RoPE, say), or nothing when it can. The architecture decides it: no weights needed.
std::optional<std::string> CellRefusal(const ModelConfig& config, const CellPlan& c) {
  try {
    const SweepMethod m = ParseSweepMethod(c.method);
    if (m.nbce) {
      // NBCE answers a question after a context: the fixed tail (its tail is the question) and
      // the passkey (its question and answer); the other protocols score every position.
      if (c.protocol == "passkey" && !c.layout.empty()) {
        return fmt::format("{}: NBCE scores the passkey in stretch's layout only, not in layout {}",
                           c.method, c.layout);
      }
      if (c.protocol != "tail" && c.protocol != "passkey") {
        return fmt::format(
            "{}: NBCE scores a question after a context (protocols tail and passkey), not the "
            "{} protocol's every position",
            c.method, c.protocol);
      }
      NbceChunkLength(config, *m.nbce, c.protocol == "tail" ? c.tail : 1);
      return std::nullopt;
    }
    CheckMethodFitsLayout(config, MakeAttentionPlan(m.method, ModelGeometry(config), c.ctx));
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

}  // namespace

bool LabCellRescored(const ModelConfig& config, const std::string& method, int64_t ctx,
                     int scoring) {
  if (scoring >= kLabScoringRevision) return false;
  // Revision 3: Self-Extend's defaults. A spec that gives both its group and its window resolves
  // as before; any other (the default, reach=R, a group or a window alone) may not.
  if (scoring < 3) {
    try {
      const Method m = ParseSweepMethod(method).method;
      if (m.rel.map->name == "self-extend" && (m.rel.ints[0] == 0 || m.rel.window == 0)) {
        return true;
      }
    } catch (const Error&) {
      // not a method this build parses: the rules below decide
    }
  }
  if (scoring >= 2) return false;
  // Revision 2: the trained scales that count keys (log-n, SSMax, the per-position lambda) count
  // the keys a query sees. Every cell of a model with a local layer (its weights too were trained
  // under the old count: such a checkpoint is refused, and the model trained again), else only
  // where some query sees fewer than i + 1 keys, under a masked method at this length (NBCE's rows
  // run under its method: the same test).
  const AttentionLayout& a = config.attention;
  if (!(a.log_length_scale || a.position_log_scale || a.ssmax)) return false;
  if (std::any_of(a.layers.begin(), a.layers.end(),
                  [](const LayerLayout& l) { return l.Local(); })) {
    return true;
  }
  AttentionPlan plan;
  try {
    plan = MakeAttentionPlan(ParseSweepMethod(method).method, ModelGeometry(config), ctx);
  } catch (const Error&) {
    return false;  // a method this model refuses: never scored, nothing to score again
  }
  for (int64_t i = 0; i < ctx; ++i) {
    if (plan.VisibleKeys(i) != i + 1) return true;
  }
  return false;
}

namespace {

// Relative cost of scoring `sequences` of `ctx` tokens: the projections grow with ctx, attention
// with ctx^2 (per token, attention costs about 2 ctx / (12 dim) of the projections' work).
double CellWeight(int64_t sequences, int64_t ctx, int dim) {
  return static_cast<double>(sequences) * static_cast<double>(ctx) *
         (1.0 + static_cast<double>(ctx) / (6.0 * dim));
}

// The far-copy span: LabOptions::copy_span, or by default min(32, L / 4).
// `model_ids`: each model's LabModelId.
std::vector<CellPlan> PlanCells(const LabOptions& o, const std::string& corpus,
                                const std::vector<std::string>& model_ids) {
  std::vector<CellPlan> cells;
  const int64_t L = o.train_len;
  const int64_t longest = L * *std::max_element(o.factors.begin(), o.factors.end());
  for (size_t m = 0; m < o.models.size(); ++m) {
    if (static_cast<int>(m % static_cast<size_t>(o.ranks)) != o.rank) continue;
    for (const std::string& method : o.methods) {
      // `c` holds the protocol's fields; the rest (model, method, keys, weight) is filled here.
      auto add = [&](CellPlan c) {
        c.model = m;
        c.method = method;
        c.weight = CellWeight(c.sequences * c.arms, c.ctx, o.dim);
        LabRecord r;
        r.corpus = corpus;
        r.model = o.models[m].label;
        r.method = method;
        r.protocol = c.protocol;
        r.ctx = c.ctx;
        r.tail = c.tail;
        r.stride = c.stride;
        r.depth = c.depth;
        r.period = c.period;
        r.distance = c.distance;
        r.material = c.material;
        r.layout = c.layout;
        c.legacy_key = LabRecordKey(r);
        r.model_id = model_ids[m];
        c.key = LabRecordKey(r);
        cells.push_back(std::move(c));
      };
      auto cell = [](const char* protocol, int64_t ctx, int64_t sequences) {
        CellPlan c;
        c.protocol = protocol;
        c.ctx = ctx;
        c.sequences = sequences;
        return c;
      };
      add(cell("nonrepeat", L, 8 * o.windows));
      for (const int64_t k : o.factors) {
        add(cell("nonrepeat", k * L, o.windows));
        add(cell("repeat", k * L, o.windows));
        for (const int64_t p : o.repeat_periods) {  // longer than any window of L
          if (p * L >= k * L) continue;
          CellPlan c = cell("repeat", k * L, o.windows);
          c.period = p * L;
          c.arms = 2;
          add(std::move(c));
        }
      }
      if (o.tail) {
        for (int64_t c = L; c <= longest; c *= 2) {
          CellPlan t = cell("tail", c, o.tail_samples);
          t.tail = L / 2;
          add(std::move(t));
        }
      }
      if (o.sliding_stride > 0) {
        for (const int64_t k : o.factors) {
          CellPlan c = cell("sliding", k * L, o.windows);
          c.stride = o.sliding_stride;
          add(std::move(c));
        }
      }
      for (const int64_t k : o.passkey_trials > 0 ? o.factors : std::vector<int64_t>{}) {
        for (const std::string layout : {"", "llama"}) {
          if (!layout.empty() && !o.passkey_llama) continue;
          for (const double d : o.passkey_depths) {
            CellPlan c = cell("passkey", k * L, o.passkey_trials);
            c.depth = d;
            c.layout = layout;
            c.arms = 2;  // the trials and their controls (no needle), in both layouts
            add(std::move(c));
          }
        }
      }
      for (const int64_t k : o.copy_trials > 0 ? o.factors : std::vector<int64_t>{}) {
        for (const int64_t d : DefaultCopyDistances(L, k * L, CopySpan(o))) {
          if (d < L) continue;  // within L: the gate's
          for (const char* material : {"text", "random"}) {
            const bool text = std::string_view(material) == "text";
            CellPlan c = cell("far-copy", k * L,
                              text && o.text_copy_trials > 0 ? o.text_copy_trials : o.copy_trials);
            c.distance = d;
            c.material = material;
            c.arms = 2;
            add(std::move(c));
          }
        }
      }
    }
  }
  return cells;
}

std::string Minutes(double seconds) {
  if (seconds < 90) return fmt::format("{:.0f} s", seconds);
  if (seconds < 5400) return fmt::format("{:.1f} min", seconds / 60);
  return fmt::format("{:.1f} h", seconds / 3600);
}

// The vocabulary the models will have: the bytes tokenizer's, or the size asked of SentencePiece.
int LabVocab(const LabOptions& o) {
  return ParseTokenizerKind(o.tokenizer) == TokenizerKind::kBytes
             ? TrainingTokenizer::Bytes().vocab_size()
             : o.vocab_size;
}

// The runs a model is trained in: one (no stages), or one per stage.
size_t RunCount(const LabOptions& o) { return o.stages.empty() ? 1 : o.stages.size(); }

// The folder of run `i` of model `m`: OUT/models/<label>, or OUT/models/<label>/<i+1>-<name>.
std::string RunDir(const LabOptions& o, const LabModel& m, size_t i) {
  const fs::path dir = fs::path(o.out) / "models" / m.label;
  if (o.stages.empty()) return dir.string();
  return (dir / fmt::format("{}-{}", i + 1, o.stages[i].name)).string();
}

// Stage i of model m: the lab's, with the model's own MIX when it has one (LabModel::stage_mix).
LabStage StageOf(const LabOptions& o, const LabModel& m, size_t i) {
  const LabStage& st = o.stages[i];
  const auto own = m.stage_mix.find(st.name);
  if (own == m.stage_mix.end()) return st;
  return ParseLabStage(fmt::format("{}:{}:{}:{}", st.name, st.steps, st.lr, own->second),
                       fmt::format("model {}'s stage_mix", m.label));
}

// The training options of run `i` of model `m` (stage i, or the one run).
TrainRunOptions StageRunOptions(const LabOptions& o, const LabModel& m, const LabCorpus& corpus,
                                size_t i) {
  TrainRunOptions r;
  r.data = corpus.train_path;
  r.out = RunDir(o, m, i);
  r.tokenizer = ParseTokenizerKind(o.tokenizer);
  if (*r.tokenizer != TokenizerKind::kBytes) r.vocab_size = o.vocab_size;
  r.block = m.block;
  r.position = m.position;
  r.attention = m.AttentionOfRun(i, o.stages.size());
  r.dim = o.dim;
  r.layers = o.layers;
  if (m.block.rfind("gau", 0) != 0) r.heads = o.heads;
  r.seq_len = o.train_len;
  r.steps = o.steps;
  r.batch = o.batch;
  r.lr = o.lr;
  r.seed = o.seed;
  r.save_every = std::max<int64_t>(1, o.steps / 4);
  r.eval_every = std::max<int64_t>(1, o.steps / 4);
  r.eval_windows = 32;
  r.log_every = std::max<int64_t>(1, std::min<int64_t>(50, o.steps / 10));
  r.passkey_share = o.passkey_share;
  r.bos_rows = o.bos_rows;
  r.build = o.build;
  if (!o.stages.empty()) {
    const LabStage st = StageOf(o, m, i);
    r.steps = st.steps;
    r.lr = st.lr;
    r.save_every = std::max<int64_t>(1, st.steps / 4);
    r.eval_every = std::max<int64_t>(1, st.steps / 4);
    r.log_every = std::max<int64_t>(1, std::min<int64_t>(50, st.steps / 10));
    r.passkey_share = st.mix.passkey;  // as `stretch train --mix` sets it
    r.copy_mix = st.mix;
    r.copy_mix.passkey = 0.0;
    r.copy_alphabet_min = st.alphabet_min;
    r.copy_strings = st.strings;
    r.passkey_phrasings = st.passkey_phrasings;
    r.passkey_filler = st.passkey_filler;
    r.passkey_decoys = st.passkey_decoys;
    r.copy_span_min = st.span_min;
    r.copy_span_max = st.span_max;
    r.eval_every = std::max<int64_t>(1, st.steps / 10);  // the report's training curves
    if (i > 0) r.init = RunDir(o, m, i - 1);             // its newest checkpoint: the stage's last
  }
  return r;
}

// The options of the run whose model the lab scores (the last stage's, or the one run's).
TrainRunOptions RunOptionsOf(const LabOptions& o, const LabModel& m, const LabCorpus& corpus) {
  return StageRunOptions(o, m, corpus, RunCount(o) - 1);
}

// Training steps of one model, over all its stages.
int64_t ModelSteps(const LabOptions& o) {
  if (o.stages.empty()) return o.steps;
  int64_t n = 0;
  for (const LabStage& st : o.stages) n += st.steps;
  return n;
}

// "stage 2/3 (gapped)", or "" without stages.
std::string StageLabel(const LabOptions& o, size_t i) {
  if (o.stages.empty()) return "";
  return fmt::format("stage {}/{} ({})", i + 1, o.stages.size(), o.stages[i].name);
}

// Seconds the lab's work takes on this machine, measured at the start on a model of the lab's
// shape with random weights: training steps as the lab runs them (side_by_side models at once,
// each on its share of the threads, so that they contend for the memory as they will), and
// scoring a batch of sequences (one per thread, as ScoreWindows runs them) at half the longest
// length and at the longest, fitted as a c + b c^2 seconds per sequence of c tokens; then the
// same at the longest length with each method, as a multiple of `direct` (the dynamic methods
// re-rotate every key for every query beyond L and cost several times more). Timed from one step
// of one model and one sequence shared by the threads, the fresh-clone quick lab of 2026-12-03 on
// an Intel Xeon was estimated at 31.2 minutes and took 38.9; timed as here, the same lab (with
// the probes' last-layer saving, about 30 minutes) is estimated at 26-28. A probe that
// scores only a sequence's end (far copy, passkey) runs the last layer on those rows alone: its
// sequences cost end_share of a whole one, timed at the longest length.
struct Calibration {
  double step_seconds = 0;
  double a = 0, b = 0;
  double end_share = 1;
  std::map<std::string, double> method_cost;  // beyond L; 1 when not measured (or refused)
  int64_t train_len = 0;
  double Sequence(int64_t c, const std::string& method) const {
    const auto it = method_cost.find(method);
    const double m = c > train_len && it != method_cost.end() ? it->second : 1.0;
    return m * (a * static_cast<double>(c) + b * static_cast<double>(c) * static_cast<double>(c));
  }
};

// How many of `models` models TrainModels trains at once: one per thread at most.
size_t SideBySide(size_t models) {
  return std::min<size_t>(models, static_cast<size_t>(std::max(1, NumThreads())));
}

// Training steps are timed on `train_threads` threads each, side_by_side models at once when
// several train side by side (TrainModels); the scoring on all of them.
Calibration Calibrate(const LabOptions& o, const LabModel& m, int vocab_size, int64_t longest,
                      const std::set<std::string>& methods, int train_threads,
                      size_t side_by_side) {
  Calibration cal;
  const TrainRunOptions run = RunOptionsOf(o, m, LabCorpus{});
  const TrainArch arch = RunArchitecture(run, vocab_size);
  TrainerOptions to;
  to.batch = o.batch;
  const int64_t T = o.train_len;
  const BatchSource random = [&](Rng& rng, int64_t B, std::vector<int>& tokens) {
    tokens.resize(static_cast<size_t>(B * (T + 1)));
    for (int& t : tokens) t = static_cast<int>(rng.NextU64() % static_cast<uint64_t>(vocab_size));
  };
  const int threads = NumThreads();
  SetNumThreads(train_threads);
  constexpr int kTimedSteps = 3;
  std::vector<std::unique_ptr<Trainer>> trainers;
  for (size_t k = 0; k < std::max<size_t>(1, side_by_side); ++k) {
    trainers.push_back(std::make_unique<Trainer>(arch, to));
  }
  std::vector<double> seconds(trainers.size(), 0.0);
  auto steps = [&](size_t k) {
    trainers[k]->Step(random);  // first touches of memory, thread start-up
    Timer step;
    for (int i = 0; i < kTimedSteps; ++i) trainers[k]->Step(random);
    seconds[k] = step.Seconds() / kTimedSteps;
  };
  if (trainers.size() == 1) {
    steps(0);
  } else {
    std::vector<std::thread> pool;
    for (size_t k = 0; k < trainers.size(); ++k) pool.emplace_back(steps, k);
    for (std::thread& th : pool) th.join();
  }
  cal.step_seconds =
      o.step_seconds > 0 ? o.step_seconds : *std::max_element(seconds.begin(), seconds.end());
  SetNumThreads(threads);
  const Model model = InferenceModel(arch, trainers[0]->params(), "calibration");
  Transformer t(model);
  const SequenceScorer scorer = ModelSequenceScorer(t, "", false);
  Rng rng(1);
  // Seconds a sequence of c + 1 tokens takes among a batch of one per thread.
  const size_t batch = static_cast<size_t>(std::max(1, threads));
  auto time_one = [&](int64_t c, int64_t first = 0) {
    std::vector<std::vector<int>> seqs(batch, std::vector<int>(static_cast<size_t>(c + 1)));
    for (std::vector<int>& seq : seqs) {
      for (int& x : seq) x = static_cast<int>(rng.NextU64() % static_cast<uint64_t>(vocab_size));
    }
    Timer timer;
    scorer(seqs, first, {});
    return timer.Seconds() / static_cast<double>(batch);
  };
  const double c1 = static_cast<double>(longest / 2), c2 = static_cast<double>(longest);
  const double t1 = time_one(longest / 2), t2 = time_one(longest);
  // The end a probe scores: a far-copy span (span 16 and its control) or a passkey's answer.
  if (t2 > 0)
    cal.end_share = std::min(1.0, time_one(longest, std::max<int64_t>(0, longest - 32)) / t2);
  cal.b = std::max(0.0, (t2 / c2 - t1 / c1) / (c2 - c1));
  cal.a = std::max(0.0, (t2 - cal.b * c2 * c2) / c2);
  cal.train_len = o.train_len;
  for (const std::string& method : methods) {
    AttentionPlan plan;
    try {
      // NBCE runs K + 1 rows of at most L tokens: close to direct at the same length.
      if (ParseSweepMethod(method).nbce) continue;
      plan = MakeAttentionPlan(ParseMethod(method), t.Geometry(), longest);
      CheckMethodFitsLayout(t.config(), plan);
    } catch (const Error&) {
      continue;  // not on this model's layout: counted at direct's cost
    }
    t.SetPlan(std::move(plan));
    if (t2 > 0) cal.method_cost[method] = time_one(longest) / t2;
  }
  return cal;
}

struct Progress {
  double eval_weight_total = 0, eval_weight_done = 0, eval_seconds = 0;
  double seconds_per_weight = 1;  // the calibration's, until cells have been timed
  int64_t cells_total = 0, cells_done = 0;
  double train_seconds_left = 0;  // models still to train, at the measured pace
  bool model_timed = false;       // a whole model's training timed (else: the pace of its steps)
  Timer timer;

  double SecondsLeft() const {
    const double rate = eval_weight_done > 0 && eval_seconds > 0 ? eval_seconds / eval_weight_done
                                                                 : seconds_per_weight;
    return train_seconds_left + rate * (eval_weight_total - eval_weight_done);
  }
  // `more`: seconds left of the work under way that SecondsLeft does not count (the training of
  // the model at hand).
  std::string Line(const std::string& what, double more = 0) const {
    return fmt::format("lab [{}/{} cells, {} elapsed, ETA {}] {}", cells_done, cells_total,
                       Minutes(timer.Seconds()), Minutes(SecondsLeft() + more), what);
  }
};

// Whether the run in `dir` holds a checkpoint of step `steps` or later.
bool Trained(const std::string& dir, int64_t steps) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  try {
    return ReadModelFileHeader(NewestCheckpointIn(dir)).step >= steps;
  } catch (const Error&) {
    return false;
  }
}

// Whether the model's last run holds its last step.
bool ModelTrained(const LabOptions& o, const LabModel& m, const LabCorpus& corpus) {
  const TrainRunOptions run = RunOptionsOf(o, m, corpus);
  return Trained(run.out, run.steps);
}

// A model's training options as the lab compares them between runs: StoredRunOptions without
// the keys that name places: init, out, and data (the lab's own copy of the corpus, which moves
// with OUT; the records name the corpus by its label).
nlohmann::json ComparedOptions(nlohmann::json j) {
  for (const char* key : {"init", "out", "data"}) j.erase(key);
  return j;
}

// What a model is, as 16 hex digits: the hash of its corpus's label and the training options
// that the lab compares on a resume (so the same model, trained anywhere, has the same id, and
// two models that share a label but not their options do not).
// Stage i's compared options with its keys prefixed "<i+1>-<name>.", so that the options of all
// stages make one object and a difference is named with its stage ("2-gapped.lr").
nlohmann::json StageKeys(const LabOptions& o, size_t i, const nlohmann::json& compared) {
  if (o.stages.empty()) return compared;
  nlohmann::json j = nlohmann::json::object();
  for (auto it = compared.begin(); it != compared.end(); ++it) {
    j[fmt::format("{}-{}.{}", i + 1, o.stages[i].name, it.key())] = it.value();
  }
  return j;
}

// Run i's options as compared (StageKeys).
nlohmann::json StageCompared(const LabOptions& o, const LabModel& m, const LabCorpus& corpus,
                             size_t i) {
  return StageKeys(o, i, ComparedOptions(StoredRunOptions(StageRunOptions(o, m, corpus, i))));
}

// A model's training options as compared: its one run's, or every stage's (StageKeys), in one
// object.
nlohmann::json ModelCompared(const LabOptions& o, const LabModel& m, const LabCorpus& corpus) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t i = 0; i < RunCount(o); ++i) j.update(StageCompared(o, m, corpus, i));
  return j;
}

std::string LabModelId(const LabOptions& o, const LabModel& m, const LabCorpus& corpus) {
  ContentHash h;
  h.Update(corpus.label);
  h.Update(std::string_view("\n"));
  h.Update(ModelCompared(o, m, corpus).dump());
  return fmt::format("{:016x}", h.Digest());
}

// Refuses, naming the first key that differs (a key on one side only differs too), a model
// trained with other options than the lab asks for now; `source` says where they were read.
void CompareModelOptions(const LabOptions& o, const LabModel& m, const nlohmann::json& have,
                         const nlohmann::json& want, const std::string& source) {
  std::set<std::string> keys;
  for (auto it = have.begin(); it != have.end(); ++it) keys.insert(it.key());
  for (auto it = want.begin(); it != want.end(); ++it) keys.insert(it.key());
  auto value = [](const nlohmann::json& j, const std::string& key) {
    return j.contains(key) ? j.at(key).dump() : std::string("(unset)");
  };
  // A model trained in one run (a lab from before stages) asked for in stages, or the reverse:
  // every key differs; say what to do instead of naming the first.
  const bool staged_have = !have.contains("lr"), staged_want = !want.contains("lr");
  if (staged_have != staged_want) {
    Fail(
        "{}: model {} was trained {} ({}), the lab now asks for {}: {}, use another --out, or "
        "delete {} and the model's records to train it again",
        o.out, m.label, staged_have ? "in stages" : "in one run (a lab from before stages)", source,
        staged_want ? "stages" : "one run",
        staged_have ? "give the stages it was trained with (--stage)"
                    : "give --no-stages (with its --steps, --lr, --passkey-share) to resume it",
        (fs::path(o.out) / "models" / m.label).string());
  }
  for (const std::string& key : keys) {
    if (have.contains(key) && want.contains(key) && have.at(key) == want.at(key)) continue;
    const bool bos = key.ends_with("bos_rows");
    Fail(
        "{}: model {} was trained with {} = {} ({}), the lab now asks for {}: {}use another "
        "--out, or delete {} and the model's records to train it again",
        o.out, m.label, key, value(have, key), source, value(want, key),
        bos && !o.bos_rows ? "drop --no-bos-rows, "
        : bos              ? "give --no-bos-rows to resume it as trained (a lab from before "
                             "every row began with BOS), "
                           : "",
        (fs::path(o.out) / "models" / m.label).string());
  }
}

// Trains model `m` unless its (last) run already holds the last step; continues a run cut short.
// With stages, each in turn: a finished stage is passed over, one cut short continued, the next
// started from the previous one's last checkpoint.
// `progress` is read under `mu` (other models may be training at the same time).
// `pace`, called with `mu` held at each progress line, gets the seconds a whole model takes at the
// pace of this run's steps so far (for the ETA of the models still waiting).
// Returns the seconds its training loops counted as a pause (TrainProgress::paused_seconds).
double TrainModel(const LabOptions& o, const LabModel& m, const LabCorpus& corpus,
                  const LabCallbacks& cb, const std::string& model_label, const Progress& progress,
                  std::mutex& mu, const std::function<void(double)>& pace) {
  double paused = 0;
  for (size_t i = 0; i < RunCount(o); ++i) {
    TrainRunOptions run = StageRunOptions(o, m, corpus, i);
    const std::string stage = StageLabel(o, i);
    const std::string label = stage.empty() ? model_label : model_label + ", " + stage;
    // Steps of the stages after this one, for the ETA.
    int64_t later_steps = 0;
    for (size_t k = i + 1; k < RunCount(o); ++k) later_steps += o.stages[k].steps;
    std::error_code ec;
    std::optional<std::string> newest;
    if (fs::is_directory(run.out, ec)) {
      try {
        newest = NewestCheckpointIn(run.out);
      } catch (const Error&) {
        // A folder without a complete checkpoint: a run killed before its first save. Nothing of
        // it can be continued; start again there.
        run.overwrite = true;
      }
    }
    // The stage's last copy readout, and the warning where the copy has not come: `source` says
    // where the readout was read.
    const auto tell_readout = [&](const CopyReadout& readout, const char* source) {
      Tell(cb.note, fmt::format("{}: copy readout at the last evaluation{} (held-out rows, "
                                "accuracy / control): {}",
                                label, source, CopyReadoutText(readout)));
      // The warning only where the stage trains on gapped or periodic rows, the copy it reads.
      const bool trains_copy = run.copy_mix.gapped > 0.0 || run.copy_mix.periodic > 0.0;
      if (const auto why = CopyNotComeWarning(readout, i + 1 == RunCount(o)); why && trains_copy) {
        Tell(cb.note, fmt::format("{}: {}", label, *why));
      }
    };
    if (newest) {
      // A checkpoint this build refuses (one written under rules it no longer runs, say): the
      // lab says which folder to delete for the model to be trained again.
      TrainResume resume;
      int64_t step = 0;
      try {
        resume = ReadTrainResume(run);
        step = ReadModelFileHeader(resume.checkpoint).step;
      } catch (const Error& e) {
        Fail(
            "{}: {}. For the lab: delete {} and run it again (it trains the model from the "
            "start and scores its cells again)",
            label, e.what(), (fs::path(o.out) / "models" / m.label).string());
      }
      CompareModelOptions(o, m, StageKeys(o, i, ComparedOptions(resume.stored)),
                          StageKeys(o, i, ComparedOptions(StoredRunOptions(run))),
                          resume.checkpoint);
      if (step >= run.steps) {
        Tell(cb.note, fmt::format("{}: trained already ({})", label, resume.checkpoint));
        // Its run printed its readout; printed again, so that a resumed lab shows every stage's.
        const std::string log = (fs::path(run.out) / kTrainLogName).string();
        if (const auto readout = LastCopyReadout(log))
          tell_readout(*readout, ", from its training log");
        continue;
      }
      run.resume_from = resume.checkpoint;
      Tell(cb.note, fmt::format("{}: continuing from {}", label, resume.checkpoint));
    } else if (!run.init.empty()) {
      Tell(cb.note, fmt::format("{}: starting from the last checkpoint of {}", label, run.init));
    }
    TrainRunCallbacks tcb;
    tcb.note = [&](const std::string& line) { Tell(cb.note, label + ": " + line); };
    std::optional<CopyReadout> readout;  // the run's last evaluation's
    double run_paused = 0;
    tcb.progress = [&](const TrainProgress& p) {
      if (p.copy) readout = p.copy;
      run_paused = p.paused_seconds;
      if (!cb.progress || !p.report) return;
      std::string line = fmt::format("{}: training step {}/{}, loss {:.3f}, {:.0f} tokens/s", label,
                                     p.stats.step, p.steps, p.stats.loss, p.tokens_per_s);
      if (p.eval) {
        line += fmt::format(", held-out loss {:.3f}", p.eval->loss);
        if (p.eval->loss_ci_known) {
          line += fmt::format(" ({:.3f}-{:.3f})", p.eval->loss_lo, p.eval->loss_hi);
        }
      }
      const double per_step =
          p.eta_seconds / static_cast<double>(std::max<int64_t>(1, p.steps - p.stats.step));
      std::unique_lock<std::mutex> lock(mu);
      if (pace && p.stats.step > 0) pace(per_step * static_cast<double>(ModelSteps(o)));
      line = progress.Line(line, p.eta_seconds + per_step * static_cast<double>(later_steps));
      lock.unlock();
      cb.progress(line);
    };
    RunTraining(run, tcb);
    paused += run_paused;
    if (readout) tell_readout(*readout, "");
  }
  return paused;
}

// "a (3), b (1)": each name with its count.
std::string NamesWithCounts(const std::map<std::string, int64_t>& counts) {
  std::vector<std::string> parts;
  for (const auto& [name, n] : counts) parts.push_back(fmt::format("{} ({})", name, n));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// Each model's architecture (the configuration its training options give, no weights), built
// when first asked for.
class LabConfigs {
 public:
  LabConfigs(const LabOptions& o, const LabCorpus& corpus, int vocab)
      : o_(o), corpus_(corpus), vocab_(vocab), configs_(o.models.size()) {}
  const ModelConfig& Of(size_t model) {
    std::optional<ModelConfig>& config = configs_.at(model);
    if (!config)
      config = RunArchitecture(RunOptionsOf(o_, o_.models[model], corpus_), vocab_).model;
    return *config;
  }

 private:
  const LabOptions& o_;
  const LabCorpus& corpus_;
  int vocab_;
  std::vector<std::optional<ModelConfig>> configs_;
};

// Says whose records the folder holds beside this run's models (an earlier preset's, or another
// --models): the report shows every model of the folder, so the lab says so before it does.
void TellOtherModels(const LabOptions& o, const LabCorpus& corpus, const LabRecordFile& read,
                     const LabCallbacks& cb) {
  std::map<std::string, int64_t> others;  // "model" or "model (corpus C)" -> records
  for (const LabRecord& r : read.records) {
    const bool ours = r.corpus == corpus.label &&
                      std::any_of(o.models.begin(), o.models.end(),
                                  [&](const LabModel& m) { return m.label == r.model; });
    if (!ours) {
      others[r.corpus == corpus.label ? r.model
                                      : fmt::format("{} (corpus {})", r.model, r.corpus)]++;
    }
  }
  if (!others.empty()) {
    Tell(cb.note, fmt::format("{} also holds the records of models this run does not train: {}; "
                              "the report shows them beside this run's models (another --out "
                              "keeps runs apart)",
                              o.out, NamesWithCounts(others)));
  }
}

// The keys of `cells` (this rank's) that the records `read` hold already, and each cell's
// held_back (a gate read back whose part it needs failed). A cell recorded under earlier scoring
// rules that score it otherwise now (LabCellRescored) is not done: its `stale_key` is set (RunLab
// voids that record, which stays in its file unread, and scores the cell again); a note names them.
// A gate measured under such rules holds nothing back: it is measured again.
std::unordered_set<std::string> CellsDone(const LabOptions& o, const LabCorpus& corpus,
                                          const std::vector<std::string>& model_ids,
                                          const LabRecordFile& read, LabConfigs& configs,
                                          std::vector<CellPlan>& cells, const LabCallbacks& cb) {
  std::unordered_map<std::string, int> scoring;  // key -> the rules its record was scored by
  for (const LabRecord& r : read.records) scoring[r.key] = r.scoring;
  std::unordered_set<std::string> done;
  std::map<std::string, int64_t> rescored;  // model label -> cells
  for (CellPlan& c : cells) {
    auto it = scoring.find(c.key);
    if (it == scoring.end()) it = scoring.find(c.legacy_key);
    if (it != scoring.end()) {
      if (it->second < kLabScoringRevision &&
          LabCellRescored(configs.Of(c.model), c.method, c.ctx, it->second)) {
        rescored[o.models[c.model].label]++;
        c.stale_key = it->first;
      } else {
        done.insert(c.key);
      }
    }
    if (!o.gate || done.count(c.key)) continue;
    for (const LabGate& g : read.gates) {  // a gate measured before: its failed parts' cells
      if (g.corpus == corpus.label && g.model_id == model_ids[c.model] &&
          (g.scoring >= kLabScoringRevision ||
           !LabCellRescored(configs.Of(c.model), "direct", o.train_len, g.scoring)) &&
          GateHoldsBack(o, g, c)) {
        c.held_back = true;
      }
    }
  }
  if (!rescored.empty()) {
    Tell(cb.note,
         fmt::format("cells recorded by an earlier build whose scoring rules score them otherwise "
                     "now (src/report/records.h, kLabScoringRevision) are scored again: {}; their "
                     "old records stay in {}, voided (a \"void\" line each), so that no report "
                     "reads them (a cell the copy gate now holds back stays without a record)",
                     NamesWithCounts(rescored), o.out));
  }
  return done;
}

// The test documents in the model's tokens, without BOS.
std::vector<std::vector<int>> EncodeTest(const TextTokenizer& tok, const LabCorpus& corpus) {
  std::vector<std::vector<int>> out;
  for (const std::string& text : corpus.test_documents) {
    std::vector<int> ids = tok.EncodePrompt(text);
    if (!ids.empty() && ids.front() == tok.bos()) ids.erase(ids.begin());  // its BOS
    if (!ids.empty()) out.push_back(std::move(ids));
  }
  return out;
}

}  // namespace

// The presets' training recipe, in one place (issue 41: small models trained on prose alone never
// copy; a synthetic curriculum makes them, in a few million tokens at L = 128):
//   copy     short periodic random strings (4..12 tokens): the easiest copying, learnt first;
//   gapped   gapped copies: copying over every distance up to L;
//   small    gapped copies from small alphabets: a copy found by matching several tokens;
//   mixed    text with randcopy, textcopy, gapped and passkey rows (digits in the strings), so the
//            model keeps language and retrieval together;
//   prose    textperiodic rows added: copying switched on for prose too. Its length decides how
//            far back prose is copied: 1,500 steps until the tenth round of docs/training.md,
//            3,000 until the twentieth (far copy at 16x, ReRoPE with log-n, +26..+28 points
//            against +16..+20), 6,000 since (the RoPE model over three seeds: prose from 992
//            back at 8x, every ReRoPE and Self-Extend cell 0-7 points higher, plain ReRoPE
//            +21..+23 against +18..+20). Its textfar rows (0.15 of 0.5 copying prose) copy from
//            L/2 to L back: the model then reads prose back from near L about as well as from
//            L/2, and the
//            methods that land far keys near L gain (twelfth round: 8x Self-Extend from 4L back
//            +13 to +32, YaRN from 8L back +16 to +28).
std::vector<LabStage> CopyCurriculum() {
  // Measured in docs/training.md (four rounds; each stage there is one `stretch train` run). The
  // first stage's short strings matter most: with strings of 8..40 tokens the phase change came
  // after 2,000-2,500 steps or not at all; with 4..12 it comes by step 500-750. Its learning rate
  // decides whether it comes for every seed: over seeds 1-8, gapped copies read 0.99-1.00 after the
  // gapped stage for 3 seeds and 0.11-0.14 for 5 with lr 3e-3 (of the two such seeds the quick
  // lab trained to the end, three models of four failed a gate part or copied little beyond L),
  // 0.99-1.00 for all 8 with 1e-3 (docs/training.md, nineteenth round). The prose stage's
  // passkey documents take a block of text repeated as their filler half of the time
  // (filler=mixed): trained on text filler alone, the RoPE model of seed 1 read none of 60
  // passkeys in llama.cpp's layout at 8x (its junk repeated, the model answers with prose), with
  // it 19 of 60; in stretch's layout 86 of 120 against 69 over the same methods at 8x and 16x,
  // far copies within their intervals or higher (docs/training.md, twenty-fourth round; over
  // three seeds far copy at 16x rose on every seed, twenty-fifth round). No decoys (decoys=N):
  // the prose stage retrained with one from the same mixed-stage weights moved which models lose
  // their keys at 8x rather than how many (eight models, five methods, 60 keys each: 1,366 ->
  // 1,428 of 2,400; the RoPE model of seed 1 246 -> 103, Gutenberg RoPE 117 -> 247), and cost
  // llama.cpp's layout (82 -> 3 of 1,440) and YaRN (122 -> 72): docs/training.md, twenty-sixth
  // round.
  auto mix = [](const char* text) { return ParseCopyMix(text, "CopyCurriculum"); };
  const std::string digits = "abcdefghijklmnopqrstuvwxyz0123456789";
  return {
      {"copy", 1000, 1e-3, mix("periodic=1"), 0, "", 4, 12},
      {"gapped", 400, 2e-3, mix("gapped=1"), 0, ""},
      {"small", 400, 2e-3, mix("gapped=1"), 3, ""},
      {"mixed", 1500, 1e-3, mix("text=0.2,textcopy=0.1,randcopy=0.2,gapped=0.3,passkey=0.2"), 3,
       digits},
      {"prose", 6000, 1e-3,
       mix("text=0.1,textperiodic=0.3,textcopy=0.05,textfar=0.15,randcopy=0.15,gapped=0.05,"
           "passkey=0.2"),
       3, digits, 0, 0, "", "mixed"},
  };
}

LabStage ParseLabStage(std::string_view text, const std::string& what) {
  const auto fail = [&](const std::string& why) {
    Fail(
        "{} {}: {} (expected NAME:STEPS:LR:MIX, e.g. copy:2500:3e-3:periodic=0.5,gapped=0.5; MIX "
        "as `stretch train --mix`)",
        what, text, why);
  };
  std::vector<std::string_view> pieces;
  size_t begin = 0;
  for (int k = 0; k < 3; ++k) {  // MIX is the rest: it holds no ':'
    const size_t colon = text.find(':', begin);
    if (colon == std::string_view::npos) break;
    pieces.push_back(text.substr(begin, colon - begin));
    begin = colon + 1;
  }
  if (pieces.size() != 3) fail(fmt::format("found {} ':'-separated pieces", pieces.size() + 1));
  pieces.push_back(text.substr(begin));
  LabStage st;
  st.name = std::string(pieces[0]);
  if (st.name.empty() || st.name.find_first_not_of(
                             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
                             std::string::npos) {
    fail(fmt::format("name \"{}\" is not a folder name of letters, digits, '-' and '_'", st.name));
  }
  const std::string steps(pieces[1]), lr(pieces[2]);
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(steps.c_str(), &end, 10);
  if (steps.empty() || *end != '\0' || errno != 0 || n < 1 || n > TrainRunLimits::max_steps) {
    fail(fmt::format("STEPS \"{}\" is not a whole number in [1, {}]", steps,
                     TrainRunLimits::max_steps));
  }
  st.steps = n;
  end = nullptr;
  const double r = std::strtod(lr.c_str(), &end);
  if (lr.empty() || *end != '\0' || !std::isfinite(r) || r <= 0 || r > TrainRunLimits::max_lr) {
    fail(fmt::format("LR \"{}\" is not a number in (0, {}]", lr, TrainRunLimits::max_lr));
  }
  st.lr = r;
  if (pieces[3].empty()) fail("MIX is empty (text=1 for text alone)");
  // alphabet-min=N, span=A..B, phrasings=one|varied, filler=text|mixed, decoys=N and
  // strings=CHARS out of the list; the rest is --mix's.
  std::string shares;
  for (size_t b = 0; b <= pieces[3].size();) {
    size_t e = pieces[3].find(',', b);
    if (e == std::string_view::npos) e = pieces[3].size();
    const std::string_view entry = pieces[3].substr(b, e - b);
    b = e + 1;
    if (entry.starts_with("alphabet-min=")) {
      const std::string v(entry.substr(13));
      char* vend = nullptr;
      const long long a = std::strtoll(v.c_str(), &vend, 10);
      if (v.empty() || *vend != '\0' || a < 2 || a > 36) {
        fail(fmt::format("alphabet-min \"{}\" is not a whole number in [2, 36]", v));
      }
      st.alphabet_min = a;
    } else if (entry.starts_with("span=")) {
      const std::string v(entry.substr(5));
      const size_t dots = v.find("..");
      const auto number = [](const std::string& t) -> long long {
        char* tend = nullptr;
        errno = 0;
        const long long x = std::strtoll(t.c_str(), &tend, 10);
        return t.empty() || *tend != '\0' || errno != 0 ? -1 : x;
      };
      const long long lo = dots == std::string::npos ? -1 : number(v.substr(0, dots));
      const long long hi = dots == std::string::npos ? -1 : number(v.substr(dots + 2));
      if (lo < 2 || hi < lo || hi > TrainRunLimits::max_seq_len) {
        fail(fmt::format("span \"{}\" is not A..B, whole numbers with 2 <= A <= B", v));
      }
      st.span_min = lo;
      st.span_max = hi;
    } else if (entry.starts_with("phrasings=")) {
      st.passkey_phrasings = std::string(entry.substr(10));
      if (st.passkey_phrasings == "one") st.passkey_phrasings.clear();
      if (!st.passkey_phrasings.empty() && st.passkey_phrasings != "varied") {
        fail(fmt::format("phrasings \"{}\": expected one or varied", st.passkey_phrasings));
      }
    } else if (entry.starts_with("filler=")) {
      st.passkey_filler = std::string(entry.substr(7));
      if (st.passkey_filler == "text") st.passkey_filler.clear();
      if (!st.passkey_filler.empty() && st.passkey_filler != "mixed") {
        fail(fmt::format("filler \"{}\": expected text or mixed", st.passkey_filler));
      }
    } else if (entry.starts_with("decoys=")) {
      const std::string v(entry.substr(7));
      char* vend = nullptr;
      const long long d = std::strtoll(v.c_str(), &vend, 10);
      if (v.empty() || *vend != '\0' || d < 0 || d > TrainRunLimits::max_passkey_decoys) {
        fail(fmt::format("decoys \"{}\" is not a whole number in [0, {}]", v,
                         TrainRunLimits::max_passkey_decoys));
      }
      st.passkey_decoys = static_cast<int>(d);
    } else if (entry.starts_with("strings=")) {
      st.strings = std::string(entry.substr(8));
      if (st.strings.size() < 2) fail("strings= needs at least 2 characters");
    } else {
      shares += (shares.empty() ? "" : ",") + std::string(entry);
    }
  }
  if (shares.empty()) shares = "text=1";
  try {
    st.mix = ParseCopyMix(shares, what + " " + std::string(text) + ": MIX");
  } catch (const Error& e) {
    fail(e.what());
  }
  if (st.mix.passkey > TrainRunLimits::max_passkey_share) {
    fail(fmt::format("passkey={} is above the most a run takes, {}", st.mix.passkey,
                     TrainRunLimits::max_passkey_share));
  }
  return st;
}

std::string LabStageText(const LabStage& st) {
  std::vector<std::string> shares;
  const std::string copy = CopyMixText(st.mix);
  if (st.mix.passkey > 0) shares.push_back(fmt::format("passkey={}", st.mix.passkey));
  if (!copy.empty()) shares.push_back(copy);
  if (shares.empty()) shares.push_back("text=1");
  if (st.alphabet_min != 0) shares.push_back(fmt::format("alphabet-min={}", st.alphabet_min));
  if (!st.strings.empty()) shares.push_back("strings=" + st.strings);
  if (st.span_min != 0) shares.push_back(fmt::format("span={}..{}", st.span_min, st.span_max));
  if (!st.passkey_phrasings.empty()) shares.push_back("phrasings=" + st.passkey_phrasings);
  if (!st.passkey_filler.empty()) shares.push_back("filler=" + st.passkey_filler);
  if (st.passkey_decoys > 0) shares.push_back(fmt::format("decoys={}", st.passkey_decoys));
  return fmt::format("{}:{}:{}:{}", st.name, st.steps, st.lr, fmt::join(shares, ","));
}

std::optional<std::string> CopyNotComeWarning(const CopyReadout& r, bool last) {
  if (r.copy.n == 0 || r.copy.value() - r.copy_control.value() >= 0.25) return std::nullopt;
  return fmt::format(
      "warning: the copy across a gap has not come {}(gapped copies read {:.3f} against {:.3f} "
      "with nothing to copy, less than 0.25 above): {}the model fails the copy gate at L or "
      "copies little beyond it; another --seed trains another draw of the recipe",
      last ? "" : "yet ", r.copy.value(), r.copy_control.value(),
      last ? "" : "a later stage may still bring it, else ");
}

namespace {
// Self-Extend's two choices of group, beside each other: the default follows the authors'
// empirical rule (the farthest keys at most 2L/3 back, neighbour window L/4); reach=1 takes the
// smallest group the trained length allows (the farthest keys at L - 1: the paper's
// (L - W) G + W >= L'), the first one the authors advised trying. Same window, so the rows differ
// in the group alone: precision against positions the model saw often (docs/training.md,
// thirty-fourth round; src/position/maps/self_extend.cc).
constexpr const char* kSelfExtendSmallest = "self-extend:reach=1";

}  // namespace

LabOptions QuickLab() {
  LabOptions o;
  o.layers = 2;
  o.stages = CopyCurriculum();
  // KeyNorm's copy stage with plain keys (LabModel::first_stage_attention): from scratch it does
  // not learn to copy at this size (docs/training.md). KeyNorm as Su defines it (kexue.fm,
  // archives/9859): the key's length takes the place of sqrt(d), logit = q . k / |k|, no
  // 1/sqrt(head dim) beside it (`scale=1`); with both, the unit keys' logits were too flat to
  // copy prose beyond L (docs/training.md, thirteenth round: far copy of prose at 8x from 992
  // back, ReRoPE +5 -> +34 points).
  // Both with log-n in training (the seeds' "-log n" models: query i's logits times
  // ln(i + 1) / ln L at every position, AttentionConfig::log_length_scale): a model that learnt
  // its copy with that scale keeps more of its sharpness beyond L under ReRoPE and Self-Extend,
  // where the plain models read prose back from 992 tokens at 8x with plain ReRoPE at +2..+23
  // points and the default Self-Extend at +8..+10; with log-n in training +25..+42 and +9..+29
  // over three seeds (docs/training.md, twenty-second round).
  o.models = {{"rope-logn", "llama", "rope", "logn"},
              {"keynorm-logn", "llama", "rope", "keynorm,scale=1,logn", "full"}};
  // Both models train the same stages: KeyNorm's own prose MIX (more passkey rows, no rows of
  // prose copied from far back) read far copy of prose worse at 8x than the curriculum's, with
  // passkeys at L as high, once the prose stage had 6,000 steps (docs/training.md, twenty-first
  // round).
  // The methods the seeds compare, each with its defaults (scaled to s = length / L): the RoPE
  // scalings, ReRoPE with and without log-n, Self-Extend, and the local masks that see no
  // further than a window (the retrieval cells show what they lose).
  o.methods = {"direct", "pi",          "ntk",          "ntk+logn",    "yarn",
               "rerope", "rerope+logn", "leaky-rerope", "self-extend", kSelfExtendSmallest,
               "window", "lambda"};
  o.copy_trials = 16;
  // Prose far copy sits 20-35 points above its control, near the 25 asked: at 16 trials the
  // quick lab's Self-Extend read +25 / +23 / +21 at 16x where 48 trials read +29 / +26 / +28 on
  // the same model (docs/training.md, eleventh round). Random strings keep 16 (margins 60-90).
  o.text_copy_trials = 48;
  return o;
}

LabOptions FullLab() {
  LabOptions o;
  // 2 layers, as the quick lab: the copy curriculum was tuned at that depth (docs/training.md),
  // and at 4 layers the whole preset was estimated at 9.3 h on 2 cores, past the 8 h it is meant
  // to fit in. With 2 layers the local/global layouts below alternate every other layer.
  o.layers = 2;
  o.stages = CopyCurriculum();
  o.copy_trials = 32;
  o.steps = 3000;
  o.windows = 32;
  o.tail_samples = 32;
  o.passkey_depths = {0.0, 0.25, 0.5, 0.75, 1.0};
  o.passkey_trials = 20;
  o.sliding_stride = o.train_len;
  // The seeds' attention variants (kexue.fm/archives/9859: log n, QueryNorm, KeyNorm, cosine,
  // each with and without log n) on the LLaMA block, which copies at 2 layers; the seeds' own
  // block, a single-head GAU, does not (docs/training.md, fifth and fourteenth rounds), so it is
  // kept once, as the seeds' baseline: its loss and accuracy beyond L are measured, its retrieval
  // cells are marked not informative by the copy gate. The normalised variants train their copy
  // stage with plain attention and switch from the second stage on, as the quick lab's KeyNorm
  // model (LabModel::first_stage_attention).
  o.models = {
      {"rope", "llama", "rope", "full"},
      {"rope-logn", "llama", "rope", "logn"},
      {"querynorm", "llama", "rope", "querynorm", "full"},
      {"querynorm-logn", "llama", "rope", "querynorm,logn", "full"},
      {"keynorm", "llama", "rope", "keynorm,scale=1", "full"},
      {"keynorm-logn", "llama", "rope", "keynorm,scale=1,logn", "full"},
      {"cosine", "llama", "rope", "cosine", "full"},
      {"cosine-logn", "llama", "rope", "cosine,logn", "full"},
      {"gau", "gau", "rope", "full"},
      {"window", "llama", "rope", "window=32"},
      {"hwfa", "llama", "rope", "hwfa=32"},
      {"alibi", "llama", "alibi", "full"},
      {"kerple", "llama", "kerple-log", "full"},
      {"xpos", "llama", "xpos", "full"},
      {"nope", "llama", "nope", "full"},
      {"sandwich", "llama", "sandwich", "full"},
      // The layouts of current models: Gemma 3 (local windows at base 10,000, a global layer at
      // a large base) and Llama 4 iRoPE (chunked RoPE layers, a NoPE layer with the temperature
      // tuning).
      {"gemma3", "llama", "rope:base=1000000", "gemma3=32/2"},
      {"llama4", "llama", "rope", "llama4=32/2"},
  };
  // Self-Extend with log-n at inference beside it, as ReRoPE: half of the variants are trained
  // without log-n, and on those the authors' rule alone read prose from 992 back at 8x at +1 to
  // +38 points where with +logn it read +16 to +48; on the log-n variants, where +logn applies
  // log-n twice, it reads prose as well or better and costs next-token accuracy at 16x (up to 11
  // points) and KeyNorm's passkeys (docs/results.md, "The full preset's Self-Extend by its
  // authors' rule").
  o.methods = {"direct",
               "pi",
               "ntk",
               "ntk+logn",
               "yarn",
               "rerope",
               "rerope+logn",
               "leaky-rerope",
               "self-extend",
               "self-extend+logn",
               kSelfExtendSmallest,
               "window"};
  return o;
}

void ValidateLabOptions(const LabOptions& o) {
  if (o.train_len < 8) Fail("LabOptions::train_len: found {}, expected at least 8", o.train_len);
  if (o.steps < 1) Fail("LabOptions::steps: found {}, expected at least 1", o.steps);
  if (o.models.empty()) Fail("LabOptions::models: none given");
  if (o.methods.empty()) Fail("LabOptions::methods: none given");
  if (o.factors.empty()) Fail("LabOptions::factors: none given");
  for (const int64_t k : o.factors) {
    if (k < 2 || k > 1024) Fail("LabOptions::factors: found {}, expected 2..1024", k);
  }
  if (o.windows < 1) Fail("LabOptions::windows: found {}, expected at least 1", o.windows);
  if (o.tail && o.tail_samples < 1) {
    Fail("LabOptions::tail_samples: found {}, expected at least 1", o.tail_samples);
  }
  if (o.passkey_trials < 0) {
    Fail("LabOptions::passkey_trials: found {}, expected >= 0", o.passkey_trials);
  }
  for (const double d : o.passkey_depths) {
    if (!(d >= 0 && d <= 1)) Fail("LabOptions::passkey_depths: found {}, expected 0..1", d);
  }
  if (!(o.passkey_share >= 0 && o.passkey_share <= 0.5)) {
    Fail("LabOptions::passkey_share: found {}, expected 0..0.5", o.passkey_share);
  }
  for (const LabModel& m : o.models) {
    for (const auto& own : m.stage_mix) {
      bool found = false;
      for (size_t i = 0; i < o.stages.size(); ++i) {
        if (o.stages[i].name != own.first) continue;
        found = true;
        StageOf(o, m, i);  // parses it, naming the model
      }
      if (!found) {
        Fail("LabOptions::models: model {} gives a MIX for stage {}, which the lab does not have",
             m.label, own.first);
      }
    }
  }
  std::set<std::string> stage_names;
  for (const LabStage& st : o.stages) {
    const std::string text = LabStageText(st);
    ParseLabStage(text, "LabOptions::stages");  // name, steps, lr, shares
    if (!stage_names.insert(st.name).second) {
      Fail("LabOptions::stages: stage name {} twice (each names a folder)", st.name);
    }
    if (st.span_min != 0 || st.span_max != 0) {
      CheckCopySpans(
          {st.span_min, st.span_max}, o.train_len,
          fmt::format("LabOptions::stages {}: span={}..{}", st.name, st.span_min, st.span_max));
    }
  }
  if (o.copy_trials < 0) Fail("LabOptions::copy_trials: found {}, expected >= 0", o.copy_trials);
  if (o.text_copy_trials < 0) {
    Fail("LabOptions::text_copy_trials: found {}, expected >= 0", o.text_copy_trials);
  }
  constexpr int64_t kMinSpan = 5;  // FarCopyOptions: at least its n-gram (4) + 1
  if (o.copy_trials > 0 && (CopySpan(o) < kMinSpan || 2 * CopySpan(o) > o.train_len)) {
    Fail(
        "LabOptions::copy_span: found {}{}, expected {}..{} (half the training length {}: the "
        "gate copies within it)",
        CopySpan(o), o.copy_span > 0 ? "" : " (min(32, L / 4))", kMinSpan, o.train_len / 2,
        o.train_len);
  }
  for (const int64_t p : o.repeat_periods) {
    if (p < 2 || p > 1024) {
      Fail("LabOptions::repeat_periods: found {}, expected 2..1024 (multiples of L beyond L)", p);
    }
  }
  if (o.ranks < 1 || o.rank < 0 || o.rank >= o.ranks) {
    Fail("LabOptions::rank {} of {}: expected 0 <= rank < ranks", o.rank, o.ranks);
  }
  std::set<std::string> labels;
  for (const LabModel& m : o.models) {
    if (m.label.empty() || m.label.find_first_of("/\\ ") != std::string::npos || m.label == "." ||
        m.label == "..") {
      Fail("LabOptions::models: label \"{}\" cannot name a folder", m.label);
    }
    if (!labels.insert(m.label).second) Fail("LabOptions::models: label {} twice", m.label);
    try {
      for (size_t i = 0; i < RunCount(o); ++i) {
        const TrainRunOptions run = StageRunOptions(o, m, LabCorpus{}, i);
        RunArchitecture(run, LabVocab(o));
        // A SentencePiece tokenizer is trained with the first run: its rows are checked then.
        if (*run.tokenizer == TokenizerKind::kBytes && run.passkey_share > 0.0) {
          const int64_t need =
              PasskeyRowMinLength(TrainingTokenizer::Bytes(), run.passkey_phrasings);
          if (o.stages.empty()) CheckPasskeyRowsFit(run, o.train_len, TrainingTokenizer::Bytes());
          if (o.train_len < need) {  // a stage's share comes from its MIX, not --passkey-share
            Fail(
                "stage {}: passkey={} in its MIX: LabOptions::train_len {} is too short for "
                "passkey documents (the needle, the question, the key and a few filler tokens "
                "need LabOptions::train_len >= {} with the bytes tokenizer)",
                o.stages[i].name, run.passkey_share, o.train_len, need);
          }
        }
      }
    } catch (const Error& e) {
      Fail("model {}: {}", m.label, e.what());
    }
  }
  std::set<std::string> specs;
  for (const std::string& s : o.methods) {
    ParseSweepMethod(s);
    if (!specs.insert(s).second) Fail("LabOptions::methods: {} twice", s);
  }
}

// Each model's training options, one file per model, OUT/options/<label>.json, so that a lab
// resumed with other options is refused by name even where the model's own folder (whose
// checkpoints store them too) is gone, as in a lab finished elsewhere from its records. An entry
// is written once the options are known to be the model's: its folder holds a checkpoint made
// with them, or the lab has just trained it. An entry of a model with neither a checkpoint nor a
// record is stale (nothing made with those options is left: the way to train a model again is to
// delete its folder and its records) and is dropped. Each model's file is written only by the
// rank that trains the model.
class ModelOptionsBook {
 public:
  ModelOptionsBook(const LabOptions& o, const LabCorpus& corpus,
                   const std::set<std::string>& recorded)
      : o_(o), corpus_(corpus), dir_(fs::path(o.out) / "options") {
    for (size_t mi = 0; mi < o.models.size(); ++mi) {
      const LabModel& m = o.models[mi];
      const nlohmann::json want = Want(m);
      // The newest checkpoint of each run (stage) that has one.
      std::vector<std::optional<std::string>> checkpoints;
      std::optional<std::string> checkpoint;
      for (size_t i = 0; i < RunCount(o); ++i) {
        checkpoints.push_back(NewestCheckpointOf(RunDir(o, m, i)));
        if (checkpoints.back()) checkpoint = checkpoints.back();
      }
      const fs::path file = dir_ / (m.label + ".json");
      std::error_code ec;
      if (fs::is_regular_file(file, ec)) {
        if (!checkpoint && !recorded.count(m.label)) {
          if (Mine(mi)) fs::remove(file, ec);  // stale
          continue;
        }
        const nlohmann::json have = nlohmann::json::parse(
            ReadInputFile(file.string(), "a JSON file of a model's training options"), nullptr,
            /*allow_exceptions=*/false);
        if (!have.is_object()) {
          Fail("{}: expected a JSON object of model {}'s training options (the lab writes it)",
               file.string(), m.label);
        }
        CompareModelOptions(o_, m, have, want, file.string());
      } else if (checkpoint && Mine(mi)) {
        for (size_t i = 0; i < RunCount(o); ++i) {
          if (!checkpoints[i]) continue;
          const TrainRunOptions run = StageRunOptions(o, m, corpus, i);
          CompareModelOptions(o_, m, StageKeys(o, i, ComparedOptions(ReadTrainResume(run).stored)),
                              StageCompared(o, m, corpus, i), *checkpoints[i]);
        }
        Write(m);
      }
    }
  }

  // The lab has trained model `m` (or found it trained) with the options asked for now.
  void Write(const LabModel& m) const {
    fs::create_directories(dir_);
    AtomicFile file((dir_ / (m.label + ".json")).string());
    file.Write(Want(m).dump(2) + "\n");
    file.Commit();
  }

 private:
  bool Mine(size_t mi) const {
    return static_cast<int>(mi % static_cast<size_t>(o_.ranks)) == o_.rank;
  }

  nlohmann::json Want(const LabModel& m) const { return ModelCompared(o_, m, corpus_); }

  static std::optional<std::string> NewestCheckpointOf(const std::string& dir) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return std::nullopt;
    try {
      return NewestCheckpointIn(dir);
    } catch (const Error&) {
      return std::nullopt;  // a run killed before its first save
    }
  }

  const LabOptions& o_;
  const LabCorpus& corpus_;
  fs::path dir_;
};

// Trains models `mine` (TrainModel each), up to one per thread at a time, each on its share of
// the threads; notes and progress lines are passed on one at a time. per_model_seconds: the pace,
// calibrated or measured, updated from each model trained; `later`: models of later batches still
// to train, for the time left. The first error (a stop signal: Stopped) is thrown once every model
// under way has stopped.
void TrainModels(const LabOptions& o, const LabCorpus& corpus, const LabCallbacks& cb,
                 const std::vector<size_t>& mine, std::vector<size_t> to_train,
                 double& per_model_seconds, Progress& progress,
                 const ModelOptionsBook& options_book, size_t later) {
  if (mine.empty()) return;
  const int threads = NumThreads();
  const size_t side_by_side = SideBySide(mine.size());
  std::mutex mu;  // guards cb, progress, to_train and next
  LabCallbacks locked;
  if (cb.note) {
    locked.note = [&](const std::string& line) {
      const std::lock_guard<std::mutex> lock(mu);
      cb.note(line);
    };
  }
  if (cb.progress) {
    locked.progress = [&](const std::string& line) {
      const std::lock_guard<std::mutex> lock(mu);
      cb.progress(line);
    };
  }
  // The models waiting for a free slot, and the `later` ones of the batches after this one (which
  // may have more slots), at the pace measured (or calibrated) so far.
  const auto waiting_seconds = [&] {
    return per_model_seconds * static_cast<double>(to_train.size()) /
               static_cast<double>(side_by_side) +
           per_model_seconds * static_cast<double>(later) /
               static_cast<double>(std::max<size_t>(1, SideBySide(later)));
  };
  size_t next = 0;
  std::exception_ptr first_error;
  const auto worker = [&] {
    for (;;) {
      size_t mi = 0;
      bool training = false;
      {
        const std::lock_guard<std::mutex> lock(mu);
        if (next == mine.size() || first_error) return;
        mi = mine[next++];
        const auto it = std::find(to_train.begin(), to_train.end(), mi);
        training = it != to_train.end();
        if (training) to_train.erase(it);
        progress.train_seconds_left = waiting_seconds();
      }
      const LabModel& lm = o.models[mi];
      const std::string label = fmt::format("model {} ({}/{})", lm.label, mi + 1, o.models.size());
      try {
        Timer train_timer;
        // Until a whole model has trained, the waiting models' ETA follows this one's steps: the
        // calibration at the start can be far off (timed while other work had the cores, a
        // lab at nice 19 beside a build measured 2.68 s a step for a real 0.08).
        const auto pace = [&](double model_seconds) {
          if (progress.model_timed || !training) return;
          per_model_seconds = model_seconds;
          progress.train_seconds_left = waiting_seconds();
        };
        const double paused = TrainModel(o, lm, corpus, locked, label, progress, mu, pace);
        options_book.Write(lm);
        const std::lock_guard<std::mutex> lock(mu);
        if (training) {
          // The rest at this pace: its wall time less what its loops counted as a pause (a
          // stopped process, a suspended machine).
          per_model_seconds = std::max(0.0, train_timer.Seconds() - paused);
          progress.model_timed = true;
        }
        progress.train_seconds_left = waiting_seconds();
      } catch (const Stopped& e) {
        const std::lock_guard<std::mutex> lock(mu);
        if (!first_error) {
          first_error = std::make_exception_ptr(Stopped(
              e.signal(), fmt::format("{} while training {}; {} cells recorded; the same `stretch "
                                      "lab` command continues the lab",
                                      e.what(), label, progress.cells_done)));
        }
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mu);
        if (!first_error) first_error = std::current_exception();
      }
    }
  };
  if (side_by_side <= 1) {
    worker();
  } else {
    // Each run's parallel regions use threads / side_by_side threads; a region opened while
    // another run holds the pool runs on its own thread alone (src/core/threads.h), so with more
    // threads than models the pool's workers go to whichever run asks first.
    SetNumThreads(std::max(1, threads / static_cast<int>(side_by_side)));
    Tell(cb.note, fmt::format("training {} models side by side, {} thread{} each", side_by_side,
                              NumThreads(), NumThreads() == 1 ? "" : "s"));
    std::vector<std::thread> pool;
    for (size_t k = 0; k < side_by_side; ++k) pool.emplace_back(worker);
    for (std::thread& t : pool) t.join();
    SetNumThreads(threads);
  }
  if (first_error) std::rethrow_exception(first_error);
}

LabResult RunLab(const LabOptions& o, const LabCallbacks& cb) {
  ValidateLabOptions(o);
  LabResult result;
  Timer total_timer;
  fs::create_directories(o.out);
  // One lab at a time in a folder (src/core/dir_lock.h): taken before anything in it is written.
  // The ranks of one MPI lab share the folder's lock and each holds its own records file's.
  const std::string what = "LabOptions::out " + o.out;
  const DirLock folder_lock(DirLock::PathIn(o.out), what,
                            o.ranks == 1 ? DirLock::Mode::kExclusive : DirLock::Mode::kShared);
  std::optional<DirLock> rank_lock;
  if (o.ranks > 1) {
    rank_lock.emplace((fs::path(o.out) / fmt::format(".results-rank{}.lock", o.rank)).string(),
                      fmt::format("{} (rank {} of {})", what, o.rank, o.ranks));
  }
  if (folder_lock.takeover_note()) Tell(cb.note, *folder_lock.takeover_note());
  if (rank_lock && rank_lock->takeover_note()) Tell(cb.note, *rank_lock->takeover_note());
  result.records_path =
      (fs::path(o.out) /
       (o.ranks == 1 ? std::string("results.jsonl") : fmt::format("results-rank{}.jsonl", o.rank)))
          .string();
  if (const std::optional<std::string> repaired = RepairLabRecords(result.records_path)) {
    Tell(cb.note, *repaired);
  }
  const LabCorpus corpus = PrepareLabCorpus(o.corpus, o.out);
  Tell(
      cb.note,
      fmt::format("corpus {} ({}): {} ({:.1f} MB), {} ({:.1f} MB); {}", corpus.label, corpus.source,
                  Counted(corpus.train_documents, "training document"), corpus.train_bytes / 1e6,
                  Counted(static_cast<int64_t>(corpus.test_documents.size()), "test document"),
                  corpus.test_bytes / 1e6, corpus.split_rule));

  // Cells already done, in any results file of the folder (other ranks' too).
  std::vector<std::string> model_ids;
  for (const LabModel& m : o.models) model_ids.push_back(LabModelId(o, m, corpus));
  std::set<std::string> recorded;  // models with a record
  const LabRecordFile read = ReadLabRecords(LabResultFiles(o.out));
  for (const LabRecord& r : read.records) recorded.insert(r.model);
  TellOtherModels(o, corpus, read, cb);
  if (!read.torn_lines.empty()) {
    Tell(cb.note, fmt::format("skipped {} torn line(s) of other ranks' records files: {}",
                              read.torn_lines.size(), fmt::join(read.torn_lines, ", ")));
  }
  const ModelOptionsBook options_book(o, corpus, recorded);

  LabRecordWriter writer(result.records_path);

  std::vector<CellPlan> cells = PlanCells(o, corpus.label, model_ids);
  const int vocab = LabVocab(o);
  LabConfigs configs(o, corpus, vocab);
  const std::unordered_set<std::string> done =
      CellsDone(o, corpus, model_ids, read, configs, cells, cb);
  const int64_t L = o.train_len;
  const int64_t longest = L * *std::max_element(o.factors.begin(), o.factors.end());
  // Which cells a model's layout refuses (a RoPE method on ALiBi, say) follows from its
  // architecture alone; a model with no cell left to score is neither trained nor loaded, so a
  // lab resumed from its records alone (its models' folders gone) does only the work left.
  std::vector<bool> pending(o.models.size(), false);
  for (CellPlan& c : cells) {  // this rank's cells (PlanCells)
    if (done.count(c.key) || c.held_back) continue;
    c.refusal = CellRefusal(configs.Of(c.model), c);
    if (!c.refusal) pending[c.model] = true;
  }
  std::vector<size_t> to_train;
  for (size_t mi = 0; mi < o.models.size(); ++mi) {
    if (static_cast<int>(mi % static_cast<size_t>(o.ranks)) != o.rank) continue;
    if (pending[mi] && !ModelTrained(o, o.models[mi], corpus)) {
      to_train.push_back(mi);
    }
  }
  // The calibration times what is left to do: nothing when every cell is recorded, and only the
  // methods with a cell to score.
  std::set<std::string> methods_left;
  for (const CellPlan& c : cells) {
    if (!done.count(c.key) && !c.refusal && !c.held_back) methods_left.insert(c.method);
  }
  const bool work_left = std::find(pending.begin(), pending.end(), true) != pending.end();
  // This rank's models with cells left: TrainModels trains them side by side, each on its share.
  std::vector<size_t> mine;
  for (size_t mi = 0; mi < o.models.size(); ++mi) {
    if (static_cast<int>(mi % static_cast<size_t>(o.ranks)) == o.rank && pending[mi]) {
      mine.push_back(mi);
    }
  }
  const size_t side_by_side = std::max<size_t>(1, SideBySide(mine.size()));
  const int train_threads = std::max(1, NumThreads() / static_cast<int>(side_by_side));
  const Calibration cal =
      work_left
          ? Calibrate(o, o.models[to_train.empty() ? 0 : to_train[0]], vocab, longest, methods_left,
                      train_threads, std::min(side_by_side, std::max<size_t>(1, to_train.size())))
          : Calibration{};
  for (CellPlan& c : cells) {
    c.weight = static_cast<double>(c.sequences * c.arms) * cal.Sequence(c.ctx, c.method);
    if (c.protocol == "far-copy" || c.protocol == "passkey") c.weight *= cal.end_share;
  }
  Progress progress;
  progress.seconds_per_weight = 1.0;
  double per_model_seconds = static_cast<double>(ModelSteps(o)) * cal.step_seconds;
  progress.train_seconds_left =
      static_cast<double>(to_train.size()) * per_model_seconds / static_cast<double>(side_by_side);
  for (const CellPlan& c : cells) {
    progress.cells_total++;
    if (done.count(c.key)) {
      progress.cells_done++;
      result.cells_skipped++;
    } else if (c.held_back) {
      progress.cells_done++;
      result.cells_held_back++;
    } else if (c.refusal) {
      progress.cells_done++;
      result.cells_refused++;
    } else {
      progress.eval_weight_total += c.weight;
    }
  }
  Tell(cb.note,
       fmt::format("plan: {} model{} x {} method{}, lengths {} x {}, {} cells ({} done "
                   "already{}{}); results in {}",
                   o.models.size(), o.models.size() == 1 ? "" : "s", o.methods.size(),
                   o.methods.size() == 1 ? "" : "s", o.train_len, fmt::join(o.factors, "/"),
                   cells.size(), result.cells_skipped,
                   result.cells_refused > 0
                       ? fmt::format(", {} that their method cannot run", result.cells_refused)
                       : std::string(),
                   result.cells_held_back > 0
                       ? fmt::format(", {} left unscored by the copy gate", result.cells_held_back)
                       : std::string(),
                   result.records_path));
  Tell(cb.note,
       fmt::format("estimated time: about {} ({} model{} to train, {} steps each{} at {:.2f} s a "
                   "step on {} thread{} measured now, {} at a time; scoring {} cells), on {}",
                   Minutes(progress.SecondsLeft()), to_train.size(),
                   to_train.size() == 1 ? "" : "s", ModelSteps(o),
                   o.stages.empty() ? std::string() : fmt::format(" in {} stages", o.stages.size()),
                   cal.step_seconds, train_threads, train_threads == 1 ? "" : "s",
                   std::min(side_by_side, std::max<size_t>(1, to_train.size())),
                   progress.cells_total - progress.cells_done, Counted(NumThreads(), "thread")));
  std::vector<std::string> model_labels;  // (no std::views: clang 14 with libstdc++ 12 has none)
  for (const LabModel& m : o.models) model_labels.push_back(m.label);
  Tell(cb.note, fmt::format("models: {}; methods: {}", fmt::join(model_labels, ", "),
                            fmt::join(o.methods, ", ")));
  for (size_t mi = 0; mi < o.models.size(); ++mi) {
    if (static_cast<int>(mi % static_cast<size_t>(o.ranks)) != o.rank) continue;
    const LabModel& lm = o.models[mi];
    const std::string label = fmt::format("model {} ({}/{})", lm.label, mi + 1, o.models.size());
    RefusalTally refused;
    for (const CellPlan& c : cells) {
      if (c.model == mi && c.refusal) refused.Add(c.method, *c.refusal);
    }
    refused.Flush(cb.note, label);
    if (!pending[mi]) {
      Tell(cb.note,
           fmt::format("{}: every cell recorded already (or refused); not trained or loaded",
                       label));
    }
  }
  if (o.plan_only) {
    result.seconds = total_timer.Seconds();
    return result;
  }
  // The records of earlier rules that would score otherwise: voided now, so that whatever happens
  // next (the cell scored, held back by the gate, the lab stopped) no report reads them.
  for (CellPlan& c : cells) {
    if (!c.stale_key.empty()) writer.AppendVoid(c.stale_key, kLabScoringRevision);
  }
  // Training first, every model of this rank that has cells left, several at once: a small
  // model's step does not keep two cores busy (measured at dim 128, L = 128, 2 cores: one run on
  // 2 threads 16k tokens/s, two runs on 1 thread each 13k tokens/s apiece), so the models train
  // side by side, each on its share of the threads, and are scored one after another on all of
  // them.
  // Training, then scoring, a batch of side_by_side models at a time: each batch's cells are
  // recorded before the next batch trains, so a run cut short keeps the records of every model it
  // finished, and a resume from the records alone (on another machine, its models' folders gone)
  // trains only the models with cells left.
  // Methods whose rows run outside the regime they were made for (YaRN on a model trained short),
  // told once each: method and sentence.
  std::set<std::string> told_regime;
  for (size_t first = 0; first < mine.size(); first += side_by_side) {
    const size_t end = std::min(mine.size(), first + side_by_side);
    const std::vector<size_t> batch(mine.begin() + static_cast<std::ptrdiff_t>(first),
                                    mine.begin() + static_cast<std::ptrdiff_t>(end));
    std::vector<size_t> batch_train;
    size_t later = 0;  // models of the later batches still to train
    for (const size_t mi : to_train) {
      if (std::find(batch.begin(), batch.end(), mi) != batch.end()) {
        batch_train.push_back(mi);
      } else if (std::find(mine.begin() + static_cast<std::ptrdiff_t>(end), mine.end(), mi) !=
                 mine.end()) {
        later++;
      }
    }
    TrainModels(o, corpus, cb, batch, batch_train, per_model_seconds, progress, options_book,
                later);
    progress.train_seconds_left =
        per_model_seconds * static_cast<double>(later) / static_cast<double>(side_by_side);
    for (const size_t mi : batch) {
      const LabModel& lm = o.models[mi];
      const std::string label = fmt::format("model {} ({}/{})", lm.label, mi + 1, o.models.size());
      const std::string run_dir = RunOptionsOf(o, lm, corpus).out;  // the last stage's
      LoadedModel loaded = LoadModelFile(run_dir, ModelFileOptions{"", true});
      Transformer model(loaded.model);
      const int bos = loaded.tokenizer->bos();
      const std::vector<std::vector<int>> test = EncodeTest(*loaded.tokenizer, corpus);
      TokenSpans docs(test.begin(), test.end());
      const auto longest_doc =
          std::max_element(test.begin(), test.end(),
                           [](const auto& x, const auto& y) { return x.size() < y.size(); });
      std::string variant = fmt::format("{} | {} | {}", lm.block, lm.position, lm.attention);
      if (const std::string& first = lm.AttentionOfRun(0, o.stages.size()); first != lm.attention) {
        variant += fmt::format(" (stage 1: {})", first);
      }
      for (const auto& [stage, mix] : lm.stage_mix) variant += fmt::format(" ({}: {})", stage, mix);
      const TextTokenizer& tok = *loaded.tokenizer;
      const TextEncoder encode = [&tok](std::string_view text) {
        std::vector<int> ids = tok.EncodePrompt(text);
        if (!ids.empty() && ids.front() == tok.bos()) ids.erase(ids.begin());  // its BOS
        return ids;
      };

      const TextEncoder mid_text = MidTextEncoder(encode);
      BootstrapOptions boot;
      boot.seed = o.seed;
      const CellText text{docs, *longest_doc, longest, encode, mid_text, bos};
      // The copy gate: measured once per model, before any cell beyond L; read back on a resume.
      std::optional<LabGate> gate;
      if (o.gate && (o.copy_trials > 0 || o.passkey_trials > 0)) {
        for (const LabGate& g : read.gates) {
          if (g.corpus == corpus.label && g.model_id == model_ids[mi]) gate = g;
        }
        if (gate && LabCellRescored(configs.Of(mi), "direct", L, gate->scoring)) {
          Tell(cb.note, fmt::format("{}: copy gate measured again: the one read back ({}) was "
                                    "measured under scoring rules {}, which score this model "
                                    "otherwise (src/report/records.h, kLabScoringRevision)",
                                    label, gate->source, gate->scoring));
          gate.reset();
        }
        // A gate read back with fewer passkeys than this build reads at L (kGateMinPasskeyTrials
        // rose from 20 to 80 a depth on 2026-12-07) is measured again, as the model is loaded
        // anyway; a model with no cell left keeps the one it has, which says its count.
        const int64_t passkeys_at_L = o.passkey_trials > 0
                                          ? std::max(o.passkey_trials, kGateMinPasskeyTrials) *
                                                static_cast<int64_t>(o.passkey_depths.size())
                                          : 0;
        if (gate && gate->passkey_trials > 0 && gate->passkey_trials < passkeys_at_L) {
          Tell(cb.note, fmt::format("{}: copy gate measured again: the one read back ({}) read {} "
                                    "passkeys at L, this build reads {} (at least {} a depth)",
                                    label, gate->source, gate->passkey_trials, passkeys_at_L,
                                    kGateMinPasskeyTrials));
          gate.reset();
        }
        if (gate) {
          Tell(cb.note, fmt::format("{}: copy gate read back: {}", label,
                                    gate->passed ? "passed" : "failed: " + gate->reason));
        } else {
          if (cb.progress) cb.progress(progress.Line(fmt::format("{}: copy gate at L", label)));
          model.SetPlan(MakeAttentionPlan(ParseMethod("direct"), model.Geometry(), L));
          CopyGateOptions go;
          go.train_len = L;
          go.copy_trials = o.copy_trials;
          go.span = CopySpan(o);
          go.passkey_trials =
              o.passkey_trials > 0 ? std::max(o.passkey_trials, kGateMinPasskeyTrials) : 0;
          go.passkey_depths = o.passkey_depths;
          go.seed = o.seed;
          go.bootstrap = boot;
          const GateMeasurements gm =
              MeasureCopyGate(ModelSequenceScorer(model, "", false), docs, mid_text, bos, go);
          LabGate g = GateLineOf(DecideCopyGate(gm), gm);
          g.corpus = corpus.label;
          g.model = lm.label;
          g.model_id = model_ids[mi];
          g.train_len = L;
          g.scoring = kLabScoringRevision;
          g.build = o.build;
          writer.Append(g);
          std::vector<std::string> parts;
          for (const LabGatePart& p : g.parts) {
            parts.push_back(fmt::format("{} {:.1f}% (control {:.1f}%){}", p.name, 100 * p.accuracy,
                                        100 * p.control_accuracy, p.passed ? "" : " FAILED"));
          }
          Tell(cb.note, fmt::format("{}: copy gate at L = {}: {}; {}", label, L,
                                    g.passed ? "passed" : "failed", fmt::join(parts, ", ")));
          if (!g.passed) {
            Tell(cb.note, fmt::format("{}: its retrieval cells are marked not informative: {}",
                                      label, g.reason));
            int64_t held = 0;
            for (CellPlan& c : cells) {
              if (c.model != mi || done.count(c.key) || c.refusal || !GateHoldsBack(o, g, c)) {
                continue;
              }
              c.held_back = true;
              held++;
              result.cells_held_back++;
              progress.cells_done++;
              progress.eval_weight_total -= c.weight;
            }
            if (held > 0) {
              Tell(cb.note,
                   fmt::format("{}: {} of its far-copy and passkey cells beyond L are left "
                               "unscored, the parts they need having failed at L "
                               "(--score-not-informative scores them)",
                               label, held));
            }
          }
          gate = std::move(g);
        }
      }

      RefusalTally refused;  // told after the model's cells
      for (const CellPlan& c : cells) {
        if (c.model != mi || done.count(c.key) || c.refusal || c.held_back) continue;
        AttentionPlan plan;
        const SweepMethod method = ParseSweepMethod(c.method);
        try {  // decided from the architecture above; the loaded model has the final word
          // NBCE's rows run the method (direct) at most a chunk and the question long.
          plan = MakeAttentionPlan(method.method, model.Geometry(), method.nbce ? L : c.ctx);
          CheckMethodFitsLayout(model.config(), plan);
        } catch (const Error& e) {
          refused.Add(c.method, e.what());
          result.cells_refused++;
          progress.eval_weight_total -= c.weight;
          progress.cells_done++;
          continue;
        }
        const std::string caveat = YarnOutsideItsRegimeNote(model.Geometry(), plan);
        if (!caveat.empty() && told_regime.insert(c.method + "\n" + caveat).second) {
          Tell(cb.note, fmt::format("{}: {}: {}", label, c.method, caveat));
        }
        LabRecord r;
        r.caveat = caveat;
        r.corpus = corpus.label;
        r.model = lm.label;
        r.model_id = model_ids[mi];
        r.variant = variant;
        r.seed = static_cast<int64_t>(o.seed);
        r.train_len = L;
        r.method = c.method;
        r.resolved_method = method.nbce ? fmt::format("{} (rows {})", NbceSpecText(*method.nbce),
                                                      CanonicalSpec(plan.method))
                                        : CanonicalSpec(plan.method);
        r.protocol = c.protocol;
        r.ctx = c.ctx;
        r.tail = c.tail;
        r.stride = c.stride;
        r.depth = c.depth;
        r.scoring = kLabScoringRevision;
        r.build = o.build;
        r.logn_twice = !DoubleLogNNote(model.config(), plan).empty();
        model.SetPlan(std::move(plan));
        if (cb.progress) {
          cb.progress(progress.Line(
              fmt::format("{} / {} / {} @ {}", lm.label, c.method, c.protocol, c.ctx)));
        }
        if (const std::optional<std::string> why =
                ScoreLabCell(o, c, method, model, loaded.model, text, boot, r)) {
          refused.Add(c.method, *why);  // a length too short for the passkey layout
          result.cells_refused++;
          progress.eval_weight_total -= c.weight;
          progress.cells_done++;
          continue;
        }
        if (gate) {
          const std::string why = NotInformativeReason(*gate, r);
          if (!why.empty()) {
            r.informative = false;
            r.not_informative = why;
          }
        }
        r.key = LabRecordKey(r);
        writer.Append(r);
        result.cells_done++;
        progress.cells_done++;
        progress.eval_weight_done += c.weight;
        progress.eval_seconds += r.seconds;
        if (const int signal = StopSignal(); signal != 0) {  // Ctrl-C, SIGTERM: src/core/stop.h
          refused.Flush(cb.note, label);  // the model's refusals so far, told before the stop
          throw Stopped(signal,
                        fmt::format("stopped by {} after cell {}; {} of {} cells recorded "
                                    "in {}; the same `stretch lab` command continues the lab",
                                    StopSignalName(signal), r.key, progress.cells_done,
                                    progress.cells_total, writer.path()));
        }
      }
      refused.Flush(cb.note, label);
    }
  }
  progress.train_seconds_left = 0;
  result.seconds = total_timer.Seconds();
  return result;
}

std::optional<std::string> RepairLabRecords(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  const std::string text = ReadInputFile(path, "a lab results file (JSON lines, results*.jsonl)");
  std::string kept, torn;
  std::vector<int64_t> torn_at;
  int64_t line_no = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t nl = text.find('\n', begin);
    const bool whole = nl != std::string::npos;
    if (!whole) nl = text.size();
    const std::string_view line(text.data() + begin, nl - begin);
    begin = nl + 1;
    ++line_no;
    const bool json = whole && nlohmann::json::accept(line);
    if (json || line.find_first_not_of(" \t\r") == std::string_view::npos) {
      if (whole) kept.append(line).append("\n");
      continue;
    }
    torn.append(line).append("\n");
    torn_at.push_back(line_no);
  }
  if (torn_at.empty()) return std::nullopt;
  const std::string aside = path + ".torn";
  {  // kept whole: appended, so that repairs of several runs all stay there to read
    std::ofstream out(aside, std::ios::binary | std::ios::app);
    out << torn;
    out.flush();
    if (!out) Fail("{}: cannot keep its torn lines in {}: {}", path, aside, std::strerror(errno));
  }
  AtomicFile file(path);
  file.Write(kept);
  file.Commit();
  return fmt::format(
      "{}: moved {} torn line{} (line{} {}: not JSON, cut by a crash or by two writers at once) "
      "to {}; the cells they held are scored again",
      path, torn_at.size(), torn_at.size() == 1 ? "" : "s", torn_at.size() == 1 ? "" : "s",
      fmt::join(torn_at, ", "), aside);
}

std::vector<std::string> LabResultFiles(const std::string& out) {
  std::vector<std::string> files;
  std::error_code ec;
  if (!fs::is_directory(out, ec)) return files;
  for (const fs::directory_entry& e : fs::directory_iterator(out)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.rfind("results", 0) == 0 && e.path().extension() == ".jsonl") {
      files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

WrittenReport WriteLabReport(const std::vector<std::string>& inputs, const std::string& dir,
                             const std::string& models_dir) {
  std::vector<NamedPath> in;
  for (const std::string& path : inputs) in.push_back({"records file", path});
  CheckOutputPaths(in, std::vector<NamedPath>{{"--out", dir, OutputForm::kDirectory}});
  WrittenReport w;
  w.records = ReadLabRecords(inputs);
  w.report = BuildReport(w.records, inputs, ReadCurvesOfRecords(w.records, models_dir));
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    Fail("--out {}: exists and is not a directory", dir);
  }
  std::vector<NamedPath> outputs;
  for (const ReportFile& f : w.report.files) {
    outputs.push_back({"--out file", (fs::path(dir) / f.name).string()});
  }
  CheckOutputPaths(in, outputs);  // before the directory is made: a refusal leaves nothing
  fs::create_directories(dir, ec);
  if (ec) Fail("--out {}: cannot create the directory: {}", dir, ec.message());
  for (size_t i = 0; i < w.report.files.size(); ++i) {
    AtomicFile file(outputs[i].path);
    file.Write(w.report.files[i].content);
    file.Commit();
    w.paths.push_back(outputs[i].path);
  }
  return w;
}

}  // namespace stretch
