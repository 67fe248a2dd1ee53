// `stretch score --protocol ...`: the retrieval protocols (src/eval/retrieval.h) and the plain
// non-repeat baseline, each with its control and 95% intervals, on any model `score` loads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/eval/retrieval.h"
#include "tools/cli/common.h"

namespace stretch::cli {

// One --protocol value, parsed.
struct ProtocolSpec {
  enum class Kind { kNonRepeat, kFarCopy, kRepeat, kPasskey };
  Kind kind = Kind::kNonRepeat;
  std::string spec;            // as given
  FarCopyOptions copy;         // far-copy: source, span
  int64_t period = 0;          // repeat: tokens, or 0 when given as a multiple of L
  int64_t period_times_l = 0;  // repeat: period=kL
  bool llama_layout = false;   // passkey: layout=llama
  int digits = 5;              // passkey
};

// far-copy[:source=text|random,span=N], repeat:period=N|kL, passkey[:layout=stretch|llama,
// digits=N], nonrepeat. Throws stretch::Error naming the spec and what was expected.
ProtocolSpec ParseProtocolSpec(std::string_view spec);

// Every flag of the protocol run.
struct ProtocolArgs {
  std::vector<std::string> specs;  // --protocol (repeatable)
  int64_t trials = 20;             // --trials
  std::vector<int64_t> distances;  // --distances (far copy; empty: DefaultCopyDistances)
  std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};  // --depths (passkey)
  uint64_t seed = 1;                                         // --seed
  int64_t bootstrap = 2000;                                  // --bootstrap (resamples)
};

// The --help text of --protocol: what each protocol does, in plain words.
std::string ProtocolHelpText();

// Registers --protocol, --trials, --distances, --depths, --seed, --bootstrap on `score`.
void AddProtocolOptions(CLI::App* sub, ProtocolArgs& args);

struct ProtocolRunArgs {
  ModelArgs model;
  MethodArgs method;
  std::string data;
  std::vector<int64_t> contexts;
  ProtocolArgs protocols;
  bool json = false;
  std::string json_out;
  bool progress = true;
  KvCacheTypes kv_types;  // --cache-type
};

// Runs every protocol at every (method, ctx) cell and prints the report (text, or JSON).
void RunScoreProtocols(const ProtocolRunArgs& args);

}  // namespace stretch::cli
