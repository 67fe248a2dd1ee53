// The lab's results: one JSON object per line (JSON lines), one line per cell of a sweep, read
// back by `stretch report` and by a resumed sweep.
//
// A cell is one (model, method, protocol, context length) and, for the passkey protocol, one
// depth. Its `key` names exactly those, so a sweep that finds a key already written skips the
// cell, and records merged from several files (several processes, several machines) keep one
// record per key: the one read first.
//
// Line format (every field written; readers ignore fields they do not know, so later versions can
// add some):
//   {"record": "cell", "version": 1, "key": "...",
//    "corpus": "sotu",                 label of the text the cell was scored on
//    "model": "rope",                  label of the trained model (unique within a sweep)
//    "model_id": "0123456789abcdef",   what the model is: a hash of its training options and
//                                      corpus (LabModelId); labels repeat across labs, ids do not.
//                                      Absent in records of older versions: then the model is told
//                                      apart by its variant and train_len.
//    "variant": "rope | full",         what the model was trained with: position | attention
//    "train_len": 128,                 L: the model's training length, tokens
//    "method": "yarn",                 the training-free method's spec, as given
//    "resolved_method": "yarn:...",    that spec resolved for ctx (CanonicalSpec)
//    "protocol": "nonrepeat",          one of kProtocolNames below
//    "ctx": 1024,                      tokens fed per sequence (the fixed tail: context C)
//    "tail": 0,                        fixed tail: targets scored per sample; otherwise 0
//    "stride": 0,                      sliding: tokens between window starts; otherwise 0
//    "depth": -1,                      passkey: where the key sits, 0 (start) .. 1 (end); else -1
//    "sequences": 8,                   sequences (windows, samples, passkey trials) scored
//    "tokens": 8192,                   targets scored
//    "loss": 1.93,                     mean next-token loss over the targets, nats
//    "accuracy": 0.47,                 share of targets whose most likely token was right;
//                                      passkey: share of trials with every key token right
//    "token_accuracy": 0.47,           share of targets right (equal to accuracy but for passkey)
//    "by_position": [{"begin": 0, "end": 128, "count": 64, "loss": 2.1, "accuracy": 0.4,
//                     "loss_ci": [2.0, 2.2], "accuracy_ci": [0.37, 0.43]}, ...],
//                                      (the buckets' intervals since 2026-12-07)
//    "seconds": 1.25}                  time the cell took
//
// Optional fields (written when known; absent in records of older builds, which read as "not
// known", never as zero):
//    "accuracy_ci": [0.41, 0.53],      95% interval of accuracy (a Wilson interval over trials for
//                                      passkey, a bootstrap over sequences otherwise)
//    "loss_ci": [1.88, 1.99],          95% interval of loss (bootstrap over sequences)
//    "period": 256,                    repeat: the repeated sample's length; 0 or absent: train_len
//    "distance": 512,                  far-copy: tokens from the span's first token to its copy's
//    "material": "text",               far-copy: what the copied span is, "text" or "random"
//    "layout": "llama",                passkey: the document's layout, absent for stretch's own
//    "control_accuracy": 0.03,         retrieval protocols (repeat with a period, far-copy,
//    "control_accuracy_ci": [0, 0.08], passkey): the same positions scored in a control that has
//    "control_loss": 4.2,              nothing to copy (fresh text, a fresh span, no needle)
//    "seed": 2,                        the lab's --seed: what trained the model (its weights and
//                                      rows) and drew the cell's trials; two labs that differ only
//                                      in it are two draws of one recipe
//    "right_by_place": [2, 20, 19, 20, 20], passkey: trials whose digit at each place (the first
//                                      the answer asks for first) was right; a model that reads
//                                      every digit but the first shows a low first count
//    "control_right_by_place": [6, 2, passkey: the same count in the control (no key in the
//        3, 2, 2],                     text): a model that expects a number after the question
//                                      guesses about 1 in 10 of its first digits; one that no
//                                      longer reads the question so guesses none
//    "scoring": 2,                     the scoring rules the cell was scored by
//                                      (kLabScoringRevision); absent: 1, the rules before
//                                      it. A lab resumed from records of older rules scores
//                                      again the cells those rules scored otherwise
//                                      (src/lab/lab.h), and where two records share a key the
//                                      one of the later rules is read (ReadLabRecords).
//    "logn_twice": true,               the method's +logn multiplied logits that the model's own
//                                      trained log-n already scales beyond L (the factor squared:
//                                      DoubleLogNNote, src/model/transformer.h); false: it did not
//    "build": "33d992a1e485",          the stretch build that scored the cell (`stretch
//                                      --version`: git describe of the commit it was built from,
//                                      "-dirty" when its sources differed from it; "unknown (not
//                                      built from a git checkout)" for a build from a tarball)
//    "caveat": "no RoPE pair turns ...", where the method ran outside the regime it was made
//                                      for (YaRN on a model trained too short for its ramp)
//    "informative": false,             false when the model failed the lab's copy gate at its
//    "not_informative": "copy - control training length: its retrieval columns cannot tell
//        = 3 points < 20 at L",        keeping distant information from forgetting it (the reason)
//
// A second kind of line, one per model, holds the copy gate (records "gate"): see LabGate.
// A third, {"record": "void", "version": 1, "key": K, "scoring": R}, says that the records of
// cell K scored under rules before R no longer stand: a lab resumed under rules R found that they
// score the cell otherwise (LabCellRescored, src/lab/lab.h), and scores it again where it can. The
// lines stay; ReadLabRecords leaves those records out (counted as superseded).
//
// Protocols (src/eval/protocols.h says how each is built):
//   nonrepeat  genuine text cut into windows of ctx tokens; all positions scored
//   repeat     a sample of train_len tokens repeated until it fills ctx tokens
//   tail       a fixed tail of `tail` tokens scored after ctx - tail tokens of context
//   sliding    sliding-window perplexity: windows of ctx tokens every `stride` tokens, each
//              token scored once, with at least ctx - stride tokens of context
//   passkey    a number hidden at `depth` in filler text, asked for at the end; only the key's
//              tokens are scored
//   far-copy   a span early in the context and the same span again at the end, `distance` tokens
//              later; only the copy's tokens (but its first) are scored, against a control whose
//              final span appears nowhere before it
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stretch {

inline constexpr int kLabRecordVersion = 1;
// The rules a cell is scored by, raised when a change of the engine moves some cells' figures
// (not the record's format: that is kLabRecordVersion). Each revision names the cells it moved,
// so that a lab resumed from older records scores those again and keeps the rest
// (LabCellRescored, src/lab/lab.h):
//   1  every record written before the field was (absent reads as 1)
//   2  trained log-n, SSMax and cosine attention's per-position lambda take n = the keys a query
//      sees (AttentionPlan::VisibleKeys) rather than i + 1: moved every cell of a model that has
//      one of those scales under a mask (a window or chunk layer, or a masked method such as
//      `window` or `lambda` beyond its width)
//   3  Self-Extend's defaults follow its authors' empirical rule (neighbour window L/4, the
//      farthest grouped keys below 2L/3, no group within L; src/position/maps/self_extend.cc):
//      moved every cell of a `self-extend` that does not give both its group and its window
inline constexpr int kLabScoringRevision = 3;
inline constexpr std::array<std::string_view, 6> kProtocolNames = {
    "nonrepeat", "repeat", "tail", "sliding", "passkey", "far-copy"};

// A 95% interval; `known` false when the record does not carry one (older builds).
struct LabInterval {
  bool known = false;
  double lo = 0.0, hi = 0.0;
  // Two intervals that overlap are a tie: neither cell is ranked above the other.
  bool Overlaps(const LabInterval& o) const { return known && o.known && lo <= o.hi && o.lo <= hi; }
};

struct LabPositionBucket {
  int64_t begin = 0, end = 0;  // positions [begin, end) in the sequence
  int64_t count = 0;           // targets scored in it
  double loss = 0.0;           // mean loss, nats
  double accuracy = 0.0;
  // 95% intervals, a bootstrap over the sequences as the record's own ("loss_ci",
  // "accuracy_ci" in the bucket's JSON; records before 2026-12-07 have none).
  LabInterval loss_ci, accuracy_ci;
};

struct LabRecord {
  std::string key;  // LabRecordKey of the fields below; filled by MakeKey
  std::string corpus;
  std::string model;
  std::string model_id;  // "" in records written before ids were
  std::string variant;
  int64_t seed = 0;  // the lab's --seed; 0: not known (records of older builds)
  int64_t train_len = 0;
  std::string method;
  std::string resolved_method;
  std::string protocol;
  int64_t ctx = 0;
  int64_t tail = 0;
  int64_t stride = 0;
  double depth = -1.0;
  int64_t sequences = 0;
  int64_t tokens = 0;
  double loss = 0.0;
  double accuracy = 0.0;
  double token_accuracy = 0.0;
  std::vector<LabPositionBucket> by_position;
  double seconds = 0.0;
  // Optional fields (the format's comment above).
  LabInterval accuracy_ci, loss_ci;
  int64_t period = 0;    // repeat; 0: train_len
  int64_t distance = 0;  // far-copy
  std::string material;  // far-copy: "text" or "random"
  std::string layout;    // passkey: "" (stretch's own) or "llama"
  bool has_control = false;
  double control_accuracy = 0.0, control_loss = 0.0;
  LabInterval control_accuracy_ci;
  bool informative = true;
  std::string not_informative;          // the reason, when !informative
  std::vector<int64_t> right_by_place;  // passkey: trials right at each digit place; empty: unknown
  std::vector<int64_t> control_right_by_place;  // the same in the control; empty: unknown
  int scoring = 1;  // the scoring rules (kLabScoringRevision) the cell was scored by
  // Whether the method's +logn multiplied logits the model's own trained log-n already scales
  // beyond L (DoubleLogNNote, src/model/transformer.h); nullopt: not known (older records).
  std::optional<bool> logn_twice;
  // The stretch build that scored the cell (`stretch --version`'s id, LabOptions::build); "": not
  // known (records of older builds, or a lab run without an id). Optional "build" of the line.
  std::string build;
  // Where the method ran outside the regime it was made for, in a sentence (YaRN on a model
  // trained too short for its ramp: YarnOutsideItsRegimeNote, src/eval/rotation.h); "": nothing to
  // say, or not known (records of older builds). Optional "caveat" of the line.
  std::string caveat;
  // Not written: the records file this record was read from (ReadLabRecords), so that a report can
  // say where each row came from.
  std::string source;
};

// "corpus/model[@model_id]/method/protocol/ctx[/tail=K][/stride=S][/depth=D][/period=P]
// [/distance=D][/material=M][/layout=X]": what identifies a
// cell. The model id is part of the key (when the record has one), so the cells of two models with
// one label (two labs on the same corpus, merged) never pass for duplicates of each other.
std::string LabRecordKey(const LabRecord& r);

nlohmann::json LabRecordJson(const LabRecord& r);
// Throws stretch::Error naming the field when a line is not a cell record of a known version.
LabRecord LabRecordFromJson(const nlohmann::json& j);

// The lab's copy gate for one model (a line {"record": "gate", ...}): before any cell beyond the
// training length is read, the model is measured at L on far copy within L and on passkey, each
// against its control. A model that fails it cannot show whether a method keeps distant
// information (it does not retrieve even at L), so its retrieval cells are marked not informative.
// One part of the gate (optional "parts" of the line; absent in lines of older builds): far copy
// of one material ("text" or "random") or "passkey", each with its own verdict, so that a model
// that copies random strings but not text loses only the columns that need text.
struct LabGatePart {
  std::string name;  // "text", "random" (far copy) or "passkey"
  bool passed = false;
  std::string reason;                   // why it failed, or ""
  double accuracy = 0.0;                // far copy: copy accuracy; passkey: keys read back
  double control_accuracy = 0.0;        // the same positions with nothing to retrieve
  LabInterval accuracy_ci, control_ci;  // 95%
  LabInterval difference_ci;            // accuracy - control, 95% (paired bootstrap / Newcombe)
  int64_t trials = 0;
};

struct LabGate {
  std::string corpus, model, model_id;
  int64_t train_len = 0;
  double copy_accuracy = 0.0, control_accuracy = 0.0, passkey_accuracy = 0.0;
  LabInterval copy_ci, control_ci, passkey_ci;
  int64_t copy_trials = 0, passkey_trials = 0;
  bool passed = false;
  std::string reason;              // why it failed, or "" when it passed
  std::vector<LabGatePart> parts;  // optional (above); empty in lines of older builds
  int scoring = 1;                 // the scoring rules it was measured by (optional "scoring")
  std::string build;               // the build that measured it, as LabRecord::build
  std::string source;              // not written: the file it was read from
  // Whether the part `name` passed: its own verdict when the line has parts, else the whole
  // gate's; a part that was not measured (absent from a line with parts) does not fail anything.
  bool PartPassed(std::string_view name) const;
  // The reason part `name` failed ("" when it passed).
  std::string PartReason(std::string_view name) const;
};
nlohmann::json LabGateJson(const LabGate& g);
LabGate LabGateFromJson(const nlohmann::json& j);  // throws stretch::Error naming the field

struct LabRecordFile {
  // In file order, one of each key: the first of the latest scoring rules (LabRecord::scoring).
  std::vector<LabRecord> records;
  // In file order, one of each model (corpus, id): the first of the latest scoring rules.
  std::vector<LabGate> gates;
  int64_t duplicates = 0;  // records whose key was already read under the same rules, skipped
  // Records replaced by a later one of the same key scored under later rules, or voided by a
  // "void" line (a lab resumed from records of older rules scores their cells again); kept in
  // their file, not read.
  int64_t superseded = 0;
  int64_t partial_lines = 0;  // a last line without its '\n' (a write cut short): skipped
  // Lines that are not JSON at all ("path:line"): torn by a crash or by two writers at once (the
  // lab's lock keeps out a second writer now; files from before it may hold such lines). Skipped,
  // so that a damaged file never stops a lab or a report for good; the lab moves them out of its
  // own file (RepairLabRecords, src/lab/lab.h) and the report warns.
  std::vector<std::string> torn_lines;
};
// Reads records from JSON-lines files, in order, keeping the first record of each key (of the
// latest scoring rules, where a key was scored again under later ones: it takes the place of the
// first). A last
// line without a newline (the process was killed while writing it) is skipped and counted; a line
// that is not JSON is skipped and listed (torn_lines); a JSON line that is not a valid record is an
// error naming the file and line number. Lines whose "record" is not "cell" are skipped (room for
// other kinds later). A file in which no line is a record, none of its torn lines holds a
// "record" field and some line is not JSON (a text file, `stretch score --json`'s indented report)
// is an error: it is no results file, damaged or not.
LabRecordFile ReadLabRecords(const std::vector<std::string>& paths);

// Models are told apart by what they are, not by their label alone: by model_id, or, in records
// written before ids were, by variant and train_len. Where one label (of one corpus) names several
// models, as when two labs trained on the same corpus are merged, each model's records get a label
// of their own, "rope [L=64]" (or "[<variant>]", or "[seed 2]" for labs run with other --seed,
// or "[<first 8 digits of the id>]": the first of these that tells them apart), so that no table row takes columns from two models. Returns one
// line per label split so, naming the new labels and the files each came from.
std::vector<std::string> SeparateModels(std::vector<LabRecord>& records);

// For each model (corpus and label, in the order first read), the records files its records came
// from, in the order first read.
struct ModelSources {
  std::string corpus, model;
  std::vector<std::string> files;
};
std::vector<ModelSources> SourcesOfModels(const std::vector<LabRecord>& records);

// Appends records to a JSON-lines file, each line written whole and flushed to the disk before
// Append returns, so a kill loses at most the line being written (which ReadLabRecords then
// skips). A file whose last line was cut short is first truncated back to its last newline.
class LabRecordWriter {
 public:
  explicit LabRecordWriter(std::string path);
  ~LabRecordWriter();
  LabRecordWriter(const LabRecordWriter&) = delete;
  LabRecordWriter& operator=(const LabRecordWriter&) = delete;
  void Append(const LabRecord& r);
  void Append(const LabGate& g);
  // A "void" line: the records of `key` scored under rules before `scoring` no longer stand.
  void AppendVoid(const std::string& key, int scoring);
  const std::string& path() const { return path_; }

 private:
  void AppendLine(const std::string& line);
  std::string path_;
  int fd_ = -1;
};

}  // namespace stretch
