#include "src/report/records.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <type_traits>
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
  if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) Fail("field \"{}\" is not an integer: {}", name, it->dump());
  }
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    Fail("field \"{}\" has the wrong type: {}", name, it->dump());
  }
}

bool KnownProtocol(std::string_view p) {
  return std::find(kProtocolNames.begin(), kProtocolNames.end(), p) != kProtocolNames.end();
}

}  // namespace

std::string LabRecordKey(const LabRecord& r) {
  std::string key = fmt::format("{}/{}/{}/{}/{}", r.corpus, r.model, r.method, r.protocol, r.ctx);
  if (r.tail > 0) key += fmt::format("/tail={}", r.tail);
  if (r.stride > 0) key += fmt::format("/stride={}", r.stride);
  if (r.depth >= 0) key += fmt::format("/depth={}", r.depth);
  return key;
}

nlohmann::json LabRecordJson(const LabRecord& r) {
  nlohmann::json buckets = nlohmann::json::array();
  for (const LabPositionBucket& b : r.by_position) {
    buckets.push_back({{"begin", b.begin},
                       {"end", b.end},
                       {"count", b.count},
                       {"loss", b.loss},
                       {"accuracy", b.accuracy}});
  }
  nlohmann::json j = nlohmann::json::object();
  j["record"] = "cell";
  j["version"] = kLabRecordVersion;
  j["key"] = r.key.empty() ? LabRecordKey(r) : r.key;
  j["corpus"] = r.corpus;
  j["model"] = r.model;
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
  return j;
}

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
                             Field<double>(b, "accuracy")});
  }
  if (r.key != LabRecordKey(r)) {
    Fail("key \"{}\" does not match the record's fields (\"{}\")", r.key, LabRecordKey(r));
  }
  return r;
}

LabRecordFile ReadLabRecords(const std::vector<std::string>& paths) {
  LabRecordFile out;
  std::unordered_set<std::string> seen;
  for (const std::string& path : paths) {
    // A FIFO or /dev/zero is refused before any read (src/core/input_file.h): neither ends.
    const std::string text = ReadInputFile(path, "a lab results file (JSON lines, results*.jsonl)");
    size_t begin = 0;
    int64_t line_no = 0;
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
      } catch (const nlohmann::json::exception& e) {
        Fail("{}:{}: not a JSON line: {}", path, line_no, e.what());
      }
      if (!j.is_object() || !j.contains("record")) {
        Fail("{}:{}: not a lab record (no \"record\" field)", path, line_no);
      }
      if (j["record"] != "cell") continue;
      LabRecord r;
      try {
        r = LabRecordFromJson(j);
      } catch (const Error& e) {
        Fail("{}:{}: {}", path, line_no, e.what());
      }
      if (!seen.insert(r.key).second) {
        out.duplicates++;
        continue;
      }
      out.records.push_back(std::move(r));
    }
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

void LabRecordWriter::Append(const LabRecord& r) {
  const std::string line = LabRecordJson(r).dump() + "\n";
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
