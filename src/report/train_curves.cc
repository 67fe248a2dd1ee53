#include "src/report/train_curves.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "src/core/input_file.h"
#include "src/core/train_log_keys.h"
#include "src/report/report_tables.h"

namespace stretch {
namespace {

namespace fs = std::filesystem;

// A stage folder's index and name: "<i>-<name>" with i a positive decimal (at most 6 digits,
// so that it fits an int whatever the folder holds) and a name that is not empty.
bool ParseStageFolder(const std::string& folder, int& index, std::string& name) {
  const size_t dash = folder.find('-');
  if (dash == 0 || dash == std::string::npos || dash > 6 || dash + 1 >= folder.size()) {
    return false;
  }
  index = 0;
  for (size_t i = 0; i < dash; ++i) {
    if (folder[i] < '0' || folder[i] > '9') return false;
    index = index * 10 + (folder[i] - '0');
  }
  name = folder.substr(dash + 1);
  return index > 0;
}

bool IsLog(const fs::path& p) { return InputKindOf(p.string()) == "a regular file"; }

// The share `key` of an evaluation line, with its count `key`_n and Wilson interval.
TrainShare ShareOf(const nlohmann::json& j, const char* key) {
  TrainShare s;
  const auto v = j.find(key);
  const auto n = j.find(std::string(key) + "_n");
  if (v == j.end() || !v->is_number() || n == j.end() || !n->is_number_integer()) return s;
  const double value = v->get<double>();
  const int64_t count = n->get<int64_t>();
  if (!std::isfinite(value) || value < 0 || value > 1 || count <= 0) return s;
  s.known = true;
  s.value = value;
  s.n = count;
  // The log holds the share; the hits are value * n, rounded back to the integer they were.
  s.ci = WilsonInterval(std::round(value * static_cast<double>(count)), count);
  // Logs that give the effective count (the readout's rows are correlated: Proportion::
  // EffectiveN in src/train/copy_data.h) get the interval at that count, wider.
  const auto eff = j.find(std::string(key) + "_n_eff");
  if (eff != j.end() && eff->is_number()) {
    const double n_eff = eff->get<double>();
    if (std::isfinite(n_eff) && n_eff >= 1 && n_eff <= static_cast<double>(count)) {
      s.ci = WilsonInterval(value * n_eff, n_eff);
    }
  }
  return s;
}

// The log's text, or a note why there is none.
bool ReadLog(const std::string& path, std::string& text, std::string& why) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    why = fmt::format("{}: cannot be opened", path);
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  text = ss.str();
  return true;
}

// Reads one stage's log into `c`, its steps shifted as the layout rules of the header say.
void ReadStage(ModelCurves& c, TrainStage stage) {
  std::string text, why;
  if (!ReadLog(stage.log, text, why)) {
    c.notes.push_back(why);
    return;
  }
  const int64_t done = c.steps.empty() ? 0 : c.steps.back().step;
  std::vector<TrainStep> steps;
  std::vector<TrainEval> evals;
  int64_t bad = 0;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = text.find('\n', begin);
    if (end == std::string::npos) {  // a last line without its newline: cut short
      ++c.partial_lines;
      break;
    }
    const std::string_view line(text.data() + begin, end - begin);
    begin = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const auto step = j.is_object() ? j.find("step") : j.end();
    const auto loss = j.is_object() ? j.find("loss") : j.end();
    if (!j.is_object() || step == j.end() || !step->is_number_integer() || loss == j.end() ||
        !loss->is_number()) {
      ++bad;
      continue;
    }
    const int64_t s = step->get<int64_t>();
    // A resumed run writes the steps after its checkpoint again: the later records win.
    while (!steps.empty() && steps.back().step >= s) steps.pop_back();
    while (!evals.empty() && evals.back().step >= s) evals.pop_back();
    steps.push_back({s, loss->get<double>()});
    TrainEval e;
    e.step = s;
    if (const auto v = j.find("val_loss"); v != j.end() && v->is_number()) {
      e.has_val_loss = true;
      e.val_loss = v->get<double>();
      const auto ci = j.find("val_loss_ci");
      if (ci != j.end() && ci->is_array() && ci->size() == 2 && (*ci)[0].is_number() &&
          (*ci)[1].is_number() && (*ci)[0].get<double>() <= e.val_loss &&
          e.val_loss <= (*ci)[1].get<double>()) {
        e.val_loss_ci = {true, (*ci)[0].get<double>(), (*ci)[1].get<double>()};
      }
    }
    e.copy = ShareOf(j, train_log::kCopy);
    e.copy_control = ShareOf(j, train_log::kCopyControl);
    e.textcopy = ShareOf(j, train_log::kTextcopy);
    e.textcopy_control = ShareOf(j, train_log::kTextcopyControl);
    e.randcopy = ShareOf(j, train_log::kRandcopy);
    e.randcopy_control = ShareOf(j, train_log::kRandcopyControl);
    e.passkey_digits = ShareOf(j, train_log::kPasskeyDigits);
    e.passkey_keys = ShareOf(j, train_log::kPasskeyKeys);
    if (e.has_val_loss || e.HasReadout()) evals.push_back(e);
  }
  c.bad_lines += bad;
  if (bad > 0) {
    c.notes.push_back(fmt::format("{}: {} line{} skipped (not JSON, or without a step and a loss)",
                                  stage.log, bad, bad == 1 ? "" : "s"));
  }
  if (steps.empty()) {
    c.notes.push_back(fmt::format("{}: no step logged", stage.log));
    return;
  }
  // Steps starting again at 1: shifted past the stages before; going on from them: as they are.
  stage.offset = steps.front().step <= done ? done : 0;
  stage.start_step = stage.offset + steps.front().step - 1;
  for (TrainStep& s : steps) s.step += stage.offset;
  for (TrainEval& e : evals) e.step += stage.offset;
  c.steps.insert(c.steps.end(), steps.begin(), steps.end());
  c.evals.insert(c.evals.end(), evals.begin(), evals.end());
  c.stages.push_back(std::move(stage));
}

}  // namespace

ModelCurves ReadModelCurves(const std::string& folder, const std::string& model) {
  ModelCurves c;
  c.model = model;
  c.folder = folder;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    c.notes.push_back(fmt::format("{}: no training log ({} not found)", model, folder));
    return c;
  }
  std::vector<TrainStage> stages;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    int index = 0;
    std::string name;
    if (!it->is_directory(ec) || !ParseStageFolder(it->path().filename().string(), index, name)) {
      continue;
    }
    const fs::path log = it->path() / kTrainCurvesLogName;
    if (IsLog(log)) stages.push_back({index, name, log.string(), 0, 0});
  }
  std::sort(stages.begin(), stages.end(),
            [](const TrainStage& a, const TrainStage& b) { return a.index < b.index; });
  const fs::path own = fs::path(folder) / kTrainCurvesLogName;
  if (stages.empty()) {
    if (!IsLog(own)) {
      c.notes.push_back(fmt::format("{}: no training log in {} (neither {} nor <i>-<name>/{})",
                                    model, folder, kTrainCurvesLogName, kTrainCurvesLogName));
      return c;
    }
    stages.push_back({0, "", own.string(), 0, 0});
  } else if (IsLog(own)) {
    c.notes.push_back(
        fmt::format("{}: not read ({} holds stage folders, read instead)", own.string(), folder));
  }
  for (size_t i = 1; i < stages.size(); ++i) {
    if (stages[i].index == stages[i - 1].index) {
      c.notes.push_back(fmt::format("{}: two stage folders numbered {}; read in name order", folder,
                                    stages[i].index));
    }
  }
  for (TrainStage& s : stages) ReadStage(c, std::move(s));
  if (c.partial_lines > 0) {
    c.notes.push_back(fmt::format("{}: {} last line{} cut short skipped", model, c.partial_lines,
                                  c.partial_lines == 1 ? "" : "s"));
  }
  return c;
}

std::vector<ModelCurves> ReadCurvesOfRecords(const LabRecordFile& records,
                                             const std::string& models_dir) {
  std::vector<ModelCurves> out;
  for (const LabRecord& r : records.records) {
    const fs::path dir =
        !models_dir.empty() ? fs::path(models_dir) : fs::path(r.source).parent_path() / "models";
    // A label that is not one folder name (the lab refuses those) is not looked for: reading
    // ../x or a/b would leave the models folder.
    const bool one_name = !r.model.empty() && r.model != "." && r.model != ".." &&
                          r.model.find_first_of("/\\") == std::string::npos;
    const std::string folder = one_name ? (dir / r.model).string() : std::string();
    auto it = std::find_if(out.begin(), out.end(), [&](const ModelCurves& c) {
      return one_name ? c.folder == folder : c.folder.empty() && c.model == r.model;
    });
    if (it == out.end() && !one_name) {
      ModelCurves c;
      c.model = r.model;
      c.notes.push_back(
          fmt::format("{}: the label cannot name a folder; no training log read", r.model));
      out.push_back(std::move(c));
      it = out.end() - 1;
    } else if (it == out.end()) {
      out.push_back(ReadModelCurves(folder, r.model));
      it = out.end() - 1;
    }
    if (!r.source.empty() &&
        std::find(it->sources.begin(), it->sources.end(), r.source) == it->sources.end()) {
      it->sources.push_back(r.source);
    }
  }
  return out;
}

}  // namespace stretch
