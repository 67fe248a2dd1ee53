#include "src/report/records.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

#include "src/core/error.h"
#include "src/core/input_file.h"

namespace stretch {
namespace {

template <typename T>
T Field(const nlohmann::json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end()) Fail("field \"{}\" is missing", name);
  // nlohmann converts 1024.5 to an integer silently: a count or a length must be written whole.
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) Fail("field \"{}\" is not true or false: {}", name, it->dump());
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) Fail("field \"{}\" is not an integer: {}", name, it->dump());
  }
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    Fail("field \"{}\" has the wrong type: {}", name, it->dump());
  }
}

// [lo, hi] with 0 <= lo <= hi (accuracies also <= 1: checked by the caller's range).
LabInterval IntervalField(const nlohmann::json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end()) return {};
  if (!it->is_array() || it->size() != 2 || !(*it)[0].is_number() || !(*it)[1].is_number()) {
    Fail("field \"{}\" is not an interval [lo, hi]: {}", name, it->dump());
  }
  LabInterval i{true, (*it)[0].get<double>(), (*it)[1].get<double>()};
  if (!(std::isfinite(i.lo) && std::isfinite(i.hi) && i.lo <= i.hi)) {
    Fail("field \"{}\" is not an interval [lo, hi] with lo <= hi: {}", name, it->dump());
  }
  return i;
}

template <typename T>
T OptionalField(const nlohmann::json& j, const char* name, T absent) {
  return j.contains(name) ? Field<T>(j, name) : absent;
}

bool KnownProtocol(std::string_view p) {
  return std::find(kProtocolNames.begin(), kProtocolNames.end(), p) != kProtocolNames.end();
}

}  // namespace

std::string LabRecordKey(const LabRecord& r) {
  const std::string model = r.model_id.empty() ? r.model : r.model + "@" + r.model_id;
  std::string key = fmt::format("{}/{}/{}/{}/{}", r.corpus, model, r.method, r.protocol, r.ctx);
  if (r.tail > 0) key += fmt::format("/tail={}", r.tail);
  if (r.stride > 0) key += fmt::format("/stride={}", r.stride);
  if (r.depth >= 0) key += fmt::format("/depth={}", r.depth);
  if (r.period > 0) key += fmt::format("/period={}", r.period);
  if (r.distance > 0) key += fmt::format("/distance={}", r.distance);
  if (!r.material.empty()) key += "/material=" + r.material;
  if (!r.layout.empty()) key += "/layout=" + r.layout;
  return key;
}

nlohmann::json LabRecordJson(const LabRecord& r) {
  nlohmann::json buckets = nlohmann::json::array();
  for (const LabPositionBucket& b : r.by_position) {
    nlohmann::json o = {{"begin", b.begin},
                        {"end", b.end},
                        {"count", b.count},
                        {"loss", b.loss},
                        {"accuracy", b.accuracy}};
    if (b.loss_ci.known) o["loss_ci"] = {b.loss_ci.lo, b.loss_ci.hi};
    if (b.accuracy_ci.known) o["accuracy_ci"] = {b.accuracy_ci.lo, b.accuracy_ci.hi};
    buckets.push_back(std::move(o));
  }
  nlohmann::json j = nlohmann::json::object();
  j["record"] = "cell";
  j["version"] = kLabRecordVersion;
  j["key"] = r.key.empty() ? LabRecordKey(r) : r.key;
  j["corpus"] = r.corpus;
  j["model"] = r.model;
  if (!r.model_id.empty()) j["model_id"] = r.model_id;
  j["variant"] = r.variant;
  j["train_len"] = r.train_len;
  j["method"] = r.method;
  j["resolved_method"] = r.resolved_method;
  j["protocol"] = r.protocol;
  j["ctx"] = r.ctx;
  j["tail"] = r.tail;
  j["stride"] = r.stride;
  j["depth"] = r.depth;
  j["sequences"] = r.sequences;
  j["tokens"] = r.tokens;
  j["loss"] = r.loss;
  j["accuracy"] = r.accuracy;
  j["token_accuracy"] = r.token_accuracy;
  j["by_position"] = std::move(buckets);
  j["seconds"] = r.seconds;
  auto interval = [&](const char* name, const LabInterval& i) {
    if (i.known) j[name] = {i.lo, i.hi};
  };
  interval("accuracy_ci", r.accuracy_ci);
  interval("loss_ci", r.loss_ci);
  if (r.period > 0) j["period"] = r.period;
  if (r.seed > 0) j["seed"] = r.seed;
  if (r.distance > 0) j["distance"] = r.distance;
  if (!r.material.empty()) j["material"] = r.material;
  if (!r.layout.empty()) j["layout"] = r.layout;
  if (r.has_control) {
    j["control_accuracy"] = r.control_accuracy;
    j["control_loss"] = r.control_loss;
    interval("control_accuracy_ci", r.control_accuracy_ci);
  }
  if (!r.right_by_place.empty()) j["right_by_place"] = r.right_by_place;
  if (!r.control_right_by_place.empty()) j["control_right_by_place"] = r.control_right_by_place;
  if (r.scoring > 1) j["scoring"] = r.scoring;
  if (r.logn_twice) j["logn_twice"] = *r.logn_twice;
  if (!r.build.empty()) j["build"] = r.build;
  if (!r.caveat.empty()) j["caveat"] = r.caveat;
  if (!r.informative) {
    j["informative"] = false;
    j["not_informative"] = r.not_informative;
  }
  return j;
}

nlohmann::json LabGateJson(const LabGate& g) {
  nlohmann::json j = nlohmann::json::object();
  j["record"] = "gate";
  j["version"] = kLabRecordVersion;
  j["corpus"] = g.corpus;
  j["model"] = g.model;
  j["model_id"] = g.model_id;
  j["train_len"] = g.train_len;
  j["copy_accuracy"] = g.copy_accuracy;
  j["copy_ci"] = {g.copy_ci.lo, g.copy_ci.hi};
  j["control_accuracy"] = g.control_accuracy;
  j["control_ci"] = {g.control_ci.lo, g.control_ci.hi};
  j["copy_trials"] = g.copy_trials;
  j["passkey_accuracy"] = g.passkey_accuracy;
  j["passkey_ci"] = {g.passkey_ci.lo, g.passkey_ci.hi};
  j["passkey_trials"] = g.passkey_trials;
  j["passed"] = g.passed;
  j["reason"] = g.reason;
  if (g.scoring > 1) j["scoring"] = g.scoring;
  if (!g.build.empty()) j["build"] = g.build;
  if (!g.parts.empty()) {
    nlohmann::json parts = nlohmann::json::array();
    for (const LabGatePart& p : g.parts) {
      parts.push_back({{"name", p.name},
                       {"passed", p.passed},
                       {"reason", p.reason},
                       {"accuracy", p.accuracy},
                       {"accuracy_ci", {p.accuracy_ci.lo, p.accuracy_ci.hi}},
                       {"control_accuracy", p.control_accuracy},
                       {"control_ci", {p.control_ci.lo, p.control_ci.hi}},
                       {"difference_ci", {p.difference_ci.lo, p.difference_ci.hi}},
                       {"trials", p.trials}});
    }
    j["parts"] = std::move(parts);
  }
  return j;
}

bool LabGate::PartPassed(std::string_view name) const {
  if (parts.empty()) return passed;
  for (const LabGatePart& p : parts) {
    if (p.name == name) return p.passed;
  }
  return true;
}

std::string LabGate::PartReason(std::string_view name) const {
  if (parts.empty()) return passed ? "" : reason;
  for (const LabGatePart& p : parts) {
    if (p.name == name) return p.passed ? "" : p.reason;
  }
  return "";
}

namespace {

// The optional "scoring" field of a cell or gate line (absent: 1).
int ScoringField(const nlohmann::json& j) {
  const int scoring = OptionalField<int>(j, "scoring", 1);
  if (scoring < 1 || scoring > kLabScoringRevision) {
    Fail(
        "field \"scoring\" is {}: expected 1 to {} (the scoring rules this build knows; a record "
        "of later rules needs a later build)",
        scoring, kLabScoringRevision);
  }
  return scoring;
}

}  // namespace

LabRecord LabRecordFromJson(const nlohmann::json& j) {
  if (!j.is_object()) Fail("a record is a JSON object, found {}", j.type_name());
  const int version = Field<int>(j, "version");
  if (version != kLabRecordVersion) {
    Fail("record version {} is not the version this build reads ({})", version, kLabRecordVersion);
  }
  LabRecord r;
  r.key = Field<std::string>(j, "key");
  r.corpus = Field<std::string>(j, "corpus");
  r.model = Field<std::string>(j, "model");
  if (j.contains("model_id")) r.model_id = Field<std::string>(j, "model_id");
  r.variant = Field<std::string>(j, "variant");
  r.train_len = Field<int64_t>(j, "train_len");
  r.method = Field<std::string>(j, "method");
  r.resolved_method = Field<std::string>(j, "resolved_method");
  r.protocol = Field<std::string>(j, "protocol");
  if (!KnownProtocol(r.protocol)) Fail("protocol \"{}\" is not one stretch writes", r.protocol);
  r.ctx = Field<int64_t>(j, "ctx");
  r.tail = Field<int64_t>(j, "tail");
  r.stride = Field<int64_t>(j, "stride");
  r.depth = Field<double>(j, "depth");
  r.sequences = Field<int64_t>(j, "sequences");
  r.tokens = Field<int64_t>(j, "tokens");
  r.loss = Field<double>(j, "loss");
  r.accuracy = Field<double>(j, "accuracy");
  r.token_accuracy = Field<double>(j, "token_accuracy");
  r.seconds = Field<double>(j, "seconds");
  const auto buckets = Field<nlohmann::json>(j, "by_position");
  if (!buckets.is_array()) Fail("field \"by_position\" is not an array");
  for (const nlohmann::json& b : buckets) {
    r.by_position.push_back({Field<int64_t>(b, "begin"), Field<int64_t>(b, "end"),
                             Field<int64_t>(b, "count"), Field<double>(b, "loss"),
                             Field<double>(b, "accuracy"), IntervalField(b, "loss_ci"),
                             IntervalField(b, "accuracy_ci")});
  }
  r.accuracy_ci = IntervalField(j, "accuracy_ci");
  r.loss_ci = IntervalField(j, "loss_ci");
  r.period = OptionalField<int64_t>(j, "period", 0);
  r.seed = OptionalField<int64_t>(j, "seed", 0);
  if (r.seed < 0) Fail("seed is {}, expected a whole number >= 1 (absent: not known)", r.seed);
  r.distance = OptionalField<int64_t>(j, "distance", 0);
  if (r.period < 0 || r.distance < 0) Fail("\"period\" and \"distance\" are lengths, >= 0");
  r.material = OptionalField<std::string>(j, "material", "");
  if (!r.material.empty() && r.material != "text" && r.material != "random") {
    Fail("field \"material\" is \"{}\": expected \"text\" or \"random\"", r.material);
  }
  r.layout = OptionalField<std::string>(j, "layout", "");
  r.has_control = j.contains("control_accuracy");
  if (r.has_control) {
    r.control_accuracy = Field<double>(j, "control_accuracy");
    r.control_loss = Field<double>(j, "control_loss");
    r.control_accuracy_ci = IntervalField(j, "control_accuracy_ci");
  }
  // Counts of trials right at each digit place, in the test and in the control.
  const auto read_places = [&](const char* name, std::vector<int64_t>& out) {
    const auto it = j.find(name);
    if (it == j.end()) return;
    if (!it->is_array()) Fail("field \"{}\" is not an array: {}", name, it->dump());
    for (const nlohmann::json& n : *it) {
      if (!n.is_number_integer()) {
        Fail("field \"{}\" holds {}: expected whole numbers", name, n.dump());
      }
      out.push_back(n.get<int64_t>());
      if (out.back() < 0 || out.back() > r.sequences) {
        Fail("field \"{}\" holds {}: expected counts of trials in [0, {}] (\"sequences\")", name,
             out.back(), r.sequences);
      }
    }
  };
  read_places("right_by_place", r.right_by_place);
  read_places("control_right_by_place", r.control_right_by_place);
  r.scoring = ScoringField(j);
  if (const auto it = j.find("logn_twice"); it != j.end()) {
    if (!it->is_boolean()) Fail("field \"logn_twice\" is {}: expected true or false", it->dump());
    r.logn_twice = it->get<bool>();
  }
  r.build = OptionalField<std::string>(j, "build", "");
  r.caveat = OptionalField<std::string>(j, "caveat", "");
  r.informative = OptionalField<bool>(j, "informative", true);
  if (!r.informative) r.not_informative = Field<std::string>(j, "not_informative");
  if (r.key != LabRecordKey(r)) {
    Fail("key \"{}\" does not match the record's fields (\"{}\")", r.key, LabRecordKey(r));
  }
  return r;
}

LabGate LabGateFromJson(const nlohmann::json& j) {
  if (!j.is_object()) Fail("a record is a JSON object, found {}", j.type_name());
  const int version = Field<int>(j, "version");
  if (version != kLabRecordVersion) {
    Fail("record version {} is not the version this build reads ({})", version, kLabRecordVersion);
  }
  LabGate g;
  g.corpus = Field<std::string>(j, "corpus");
  g.model = Field<std::string>(j, "model");
  g.model_id = Field<std::string>(j, "model_id");
  g.train_len = Field<int64_t>(j, "train_len");
  g.copy_accuracy = Field<double>(j, "copy_accuracy");
  g.copy_ci = IntervalField(j, "copy_ci");
  g.control_accuracy = Field<double>(j, "control_accuracy");
  g.control_ci = IntervalField(j, "control_ci");
  g.copy_trials = Field<int64_t>(j, "copy_trials");
  g.passkey_accuracy = Field<double>(j, "passkey_accuracy");
  g.passkey_ci = IntervalField(j, "passkey_ci");
  g.passkey_trials = Field<int64_t>(j, "passkey_trials");
  g.passed = Field<bool>(j, "passed");
  g.reason = Field<std::string>(j, "reason");
  g.scoring = ScoringField(j);
  g.build = OptionalField<std::string>(j, "build", "");
  if (j.contains("parts")) {
    const nlohmann::json& parts = j.at("parts");
    if (!parts.is_array()) Fail("field \"parts\" is not an array: {}", parts.dump());
    for (const nlohmann::json& pj : parts) {
      if (!pj.is_object()) Fail("field \"parts\" holds {}, expected objects", pj.dump());
      LabGatePart p;
      p.name = Field<std::string>(pj, "name");
      if (p.name != "text" && p.name != "random" && p.name != "passkey") {
        Fail("field \"parts\": name \"{}\": expected text, random or passkey", p.name);
      }
      p.passed = Field<bool>(pj, "passed");
      p.reason = Field<std::string>(pj, "reason");
      p.accuracy = Field<double>(pj, "accuracy");
      p.accuracy_ci = IntervalField(pj, "accuracy_ci");
      p.control_accuracy = Field<double>(pj, "control_accuracy");
      p.control_ci = IntervalField(pj, "control_ci");
      p.difference_ci = IntervalField(pj, "difference_ci");
      p.trials = Field<int64_t>(pj, "trials");
      g.parts.push_back(std::move(p));
    }
  }
  return g;
}

LabRecordFile ReadLabRecords(const std::vector<std::string>& paths) {
  LabRecordFile out;
  std::unordered_map<std::string, size_t> seen;  // key -> its record in out.records
  std::unordered_map<std::string, int> voids;    // key -> the rules before which it is void
  for (const std::string& path : paths) {
    // A FIFO or /dev/zero is refused before any read (src/core/input_file.h): neither ends.
    const std::string text = ReadInputFile(path, "a lab results file (JSON lines, results*.jsonl)");
    if (text.size() >= 2 && text[0] == '\x1f' && text[1] == '\x8b') {
      // The records stored under docs/results are gzip files: say what to do, not "not JSON".
      // Its own name without .gz, so that several files uncompressed stay apart; quoted for a
      // shell where a name holds more than letters, digits and ./_-.
      const std::string plain =
          path.ends_with(".gz") ? path.substr(0, path.size() - 3) : path + ".jsonl";
      auto quoted = [](const std::string& name) {
        const bool plain_name = std::all_of(name.begin(), name.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '/' || c == '_' ||
                 c == '-';
        });
        if (plain_name) return name;
        std::string q = "'";
        for (const char c : name) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
        return q + "'";
      };
      Fail(
          "{}: a gzip-compressed file, and results files are read uncompressed; found the gzip "
          "magic bytes 1f 8b, expected JSON lines. Uncompress it first: zcat {} > {}",
          path, quoted(path), quoted(plain));
    }
    size_t begin = 0;
    int64_t line_no = 0;
    // A file in which no line is a record (a `stretch score --json` report, a text file) is no
    // results file at all: said as such, not read as torn lines and then "no cell records".
    // A file whose every line is torn but some torn line held a record is a damaged results file:
    // read as one (its torn lines listed), never refused.
    const size_t torn_before = out.torn_lines.size();
    int64_t records_here = 0;
    bool torn_record_here = false;
    const std::string_view kExpected =
        "expected the JSON lines `stretch lab` writes to OUT/results.jsonl, one record a line";
    while (begin < text.size()) {
      const size_t nl = text.find('\n', begin);
      ++line_no;
      if (nl == std::string::npos) {  // the last line, cut short by a kill
        out.partial_lines++;
        break;
      }
      const std::string_view line(text.data() + begin, nl - begin);
      begin = nl + 1;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception&) {
        out.torn_lines.push_back(fmt::format("{}:{}", path, line_no));
        torn_record_here = torn_record_here || line.find("\"record\"") != std::string_view::npos;
        continue;
      }
      if (!j.is_object() || !j.contains("record")) {
        if (records_here == 0) {
          Fail("{}:{}: not a lab record (no \"record\" field), nor is any line before it: {}", path,
               line_no, kExpected);
        }
        Fail("{}:{}: not a lab record (no \"record\" field)", path, line_no);
      }
      ++records_here;
      if (j["record"] == "gate") {
        LabGate g;
        try {
          g = LabGateFromJson(j);
        } catch (const Error& e) {
          Fail("{}:{}: {}", path, line_no, e.what());
        }
        g.source = path;
        const auto earlier = std::find_if(
            out.gates.begin(), out.gates.end(),
            [&](const LabGate& x) { return x.corpus == g.corpus && x.model_id == g.model_id; });
        if (earlier == out.gates.end()) {
          out.gates.push_back(std::move(g));
        } else if (g.scoring > earlier->scoring ||  // measured again under later rules
                   (g.scoring == earlier->scoring && g.passkey_trials > earlier->passkey_trials)) {
          *earlier = std::move(g);  // or with more passkeys at L (kGateMinPasskeyTrials rose)
        }
        continue;
      }
      if (j["record"] == "void") {
        try {
          if (Field<int>(j, "version") != kLabRecordVersion) {
            Fail("record version {} is not the version this build reads ({})",
                 Field<int>(j, "version"), kLabRecordVersion);
          }
          const std::string key = Field<std::string>(j, "key");
          const int scoring = ScoringField(j);
          int& voided = voids[key];
          voided = std::max(voided, scoring);
        } catch (const Error& e) {
          Fail("{}:{}: {}", path, line_no, e.what());
        }
        continue;
      }
      if (j["record"] != "cell") continue;
      LabRecord r;
      try {
        r = LabRecordFromJson(j);
      } catch (const Error& e) {
        Fail("{}:{}: {}", path, line_no, e.what());
      }
      r.source = path;
      const auto [at, first] = seen.emplace(r.key, out.records.size());
      if (!first) {
        LabRecord& earlier = out.records[at->second];
        if (r.scoring == earlier.scoring) {
          out.duplicates++;
        } else {  // one of the two scored under later rules: it is read, the other superseded
          if (r.scoring > earlier.scoring) earlier = std::move(r);
          out.superseded++;
        }
        continue;
      }
      out.records.push_back(std::move(r));
    }
    if (records_here == 0 && out.torn_lines.size() > torn_before && !torn_record_here) {
      Fail("{}: not a lab results file: none of its lines is a lab record ({} is not JSON); {}",
           path, out.torn_lines[torn_before], kExpected);
    }
  }
  if (!voids.empty()) {
    const size_t before = out.records.size();
    std::erase_if(out.records, [&](const LabRecord& r) {
      const auto it = voids.find(r.key);
      return it != voids.end() && r.scoring < it->second;
    });
    out.superseded += static_cast<int64_t>(before - out.records.size());
  }
  return out;
}

namespace {

// What a record's model is, for SeparateModels.
std::string Identity(const LabRecord& r) {
  return r.model_id.empty() ? fmt::format("variant {}, L={}", r.variant, r.train_len)
                            : "id " + r.model_id;
}

template <typename T>
void AddOnce(std::vector<T>& v, const T& x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

}  // namespace

std::vector<std::string> SeparateModels(std::vector<LabRecord>& records) {
  struct Model {
    std::string identity, variant, model_id, suffix;
    int64_t train_len = 0, seed = 0;
    std::vector<std::string> files;
  };
  // (corpus, label) -> the models under it, in the order first read.
  std::vector<std::pair<std::pair<std::string, std::string>, std::vector<Model>>> labels;
  auto find_label = [&](const LabRecord& r) -> std::vector<Model>& {
    for (auto& [key, models] : labels) {
      if (key.first == r.corpus && key.second == r.model) return models;
    }
    labels.push_back({{r.corpus, r.model}, {}});
    return labels.back().second;
  };
  for (const LabRecord& r : records) {
    std::vector<Model>& models = find_label(r);
    const std::string id = Identity(r);
    auto it = std::find_if(models.begin(), models.end(),
                           [&](const Model& m) { return m.identity == id; });
    if (it == models.end()) {
      models.push_back({id, r.variant, r.model_id, "", r.train_len, r.seed, {}});
      it = models.end() - 1;
    }
    it->seed = std::max(it->seed, r.seed);  // cells scored before a resume may have none
    if (!r.source.empty()) AddOnce(it->files, r.source);
  }
  std::vector<std::string> notes;
  std::unordered_set<std::string> taken;
  for (const auto& [key, models] : labels) taken.insert(key.first + "\n" + key.second);
  for (auto& label : labels) {
    // Named, not a structured binding: clang 14 cannot capture those in the lambdas below.
    const std::pair<std::string, std::string>& key = label.first;
    std::vector<Model>& models = label.second;
    if (models.size() < 2) continue;
    auto distinct = [&](auto field) {
      std::unordered_set<std::string> seen;
      for (const Model& m : models) {
        if (!seen.insert(field(m)).second) return false;
      }
      return true;
    };
    auto len = [](const Model& m) { return fmt::format("L={}", m.train_len); };
    auto variant = [](const Model& m) { return m.variant; };
    // Records of older builds have no seed: with one of them among the models, the ids tell.
    const bool all_seeded =
        std::all_of(models.begin(), models.end(), [](const Model& m) { return m.seed > 0; });
    auto seed = [](const Model& m) { return fmt::format("seed {}", m.seed); };
    auto id = [](const Model& m) {
      return m.model_id.empty() ? std::string("no id") : m.model_id.substr(0, 8);
    };
    std::string line = fmt::format("{} (corpus {}): {} different models carry this label; shown as",
                                   key.second, key.first, models.size());
    for (size_t i = 0; i < models.size(); ++i) {
      Model& m = models[i];
      const std::string tag = distinct(len)                  ? len(m)
                              : distinct(variant)            ? variant(m)
                              : all_seeded && distinct(seed) ? seed(m)
                                                             : id(m);
      std::string label = fmt::format("{} [{}]", key.second, tag);
      for (int n = 2; !taken.insert(key.first + "\n" + label).second; ++n) {
        label = fmt::format("{} [{}] #{}", key.second, tag, n);
      }
      m.suffix = label;
      std::string files;
      for (const std::string& f : m.files) files += (files.empty() ? "" : ", ") + f;
      line += fmt::format("{} '{}' ({}{}{})",
                          i == 0                   ? ""
                          : i + 1 == models.size() ? " and"
                                                   : ",",
                          label, m.identity, files.empty() ? "" : ", from ", files);
    }
    notes.push_back(line);
  }
  for (LabRecord& r : records) {
    const std::vector<Model>& models = find_label(r);
    if (models.size() < 2) continue;
    const std::string id = Identity(r);
    for (const Model& m : models) {
      if (m.identity == id) r.model = m.suffix;
    }
  }
  return notes;
}

std::vector<ModelSources> SourcesOfModels(const std::vector<LabRecord>& records) {
  std::vector<ModelSources> out;
  for (const LabRecord& r : records) {
    auto it = std::find_if(out.begin(), out.end(), [&](const ModelSources& m) {
      return m.corpus == r.corpus && m.model == r.model;
    });
    if (it == out.end()) {
      out.push_back({r.corpus, r.model, {}});
      it = out.end() - 1;
    }
    if (!r.source.empty()) AddOnce(it->files, r.source);
  }
  return out;
}

LabRecordWriter::LabRecordWriter(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    Fail("{}: cannot open the records file for writing: {}", path_, std::strerror(errno));
  // Cut a last line that a kill left without its newline: everything after the last '\n'.
  const off_t size = ::lseek(fd_, 0, SEEK_END);
  off_t keep = size;
  char c = 0;
  while (keep > 0 && ::pread(fd_, &c, 1, keep - 1) == 1 && c != '\n') --keep;
  if (keep != size && ::ftruncate(fd_, keep) != 0) {
    const int err = errno;
    ::close(fd_);
    Fail("{}: cannot cut the unfinished last line: {}", path_, std::strerror(err));
  }
  ::lseek(fd_, keep, SEEK_SET);
}

LabRecordWriter::~LabRecordWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void LabRecordWriter::Append(const LabRecord& r) { AppendLine(LabRecordJson(r).dump() + "\n"); }

void LabRecordWriter::Append(const LabGate& g) { AppendLine(LabGateJson(g).dump() + "\n"); }

void LabRecordWriter::AppendVoid(const std::string& key, int scoring) {
  nlohmann::json j = nlohmann::json::object();
  j["record"] = "void";
  j["version"] = kLabRecordVersion;
  j["key"] = key;
  j["scoring"] = scoring;
  AppendLine(j.dump() + "\n");
}

void LabRecordWriter::AppendLine(const std::string& line) {
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) Fail("{}: cannot append a record: {}", path_, std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  if (::fdatasync(fd_) != 0) Fail("{}: cannot sync a record: {}", path_, std::strerror(errno));
}

}  // namespace stretch
