// Prefill and decode speed of a real checkpoint (stories260K from ../shared by default; set
// STRETCH_BENCH_MODEL to use another llama2.c file). `stretch bench` prints the same figures as a
// table with peak memory; this program is for Google Benchmark's tooling (repetitions, JSON).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "src/core/rng.h"
#include "src/io/llama2c.h"
#include "src/model/transformer.h"

namespace stretch {
namespace {

const Model* BenchModel() {
  static std::unique_ptr<Model> model = [] {
    const char* env = std::getenv("STRETCH_BENCH_MODEL");
    const std::string path =
        env ? env
            : std::string(STRETCH_SOURCE_DIR) + "/../shared/models/stories260K/stories260K.bin";
    if (!std::filesystem::exists(path)) return std::unique_ptr<Model>();
    return std::make_unique<Model>(LoadLlama2c(path));
  }();
  return model.get();
}

std::vector<int> Tokens(int64_t n, int vocab) {
  Rng rng(7);
  std::vector<int> t(static_cast<size_t>(n));
  for (int& x : t) x = 3 + static_cast<int>(rng.NextU64() % static_cast<uint64_t>(vocab - 3));
  t[0] = 1;
  return t;
}

void BM_Prefill(benchmark::State& state) {
  const Model* m = BenchModel();
  if (!m) {
    state.SkipWithError("model not found: ../shared missing and STRETCH_BENCH_MODEL unset");
    return;
  }
  const int64_t L = state.range(0);
  Transformer model(*m);
  KvCache cache(m->config, L);
  const std::vector<int> tokens = Tokens(L, m->config.vocab_size);
  std::vector<float> hidden;
  for (auto _ : state) {
    cache.Clear();
    model.Forward(tokens, cache, hidden);
    benchmark::DoNotOptimize(hidden.data());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(L), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Prefill)
    ->Arg(512)
    ->Arg(2048)
    ->Arg(8192)
    ->Arg(16384)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// One decode step at a given depth: the cache holds `depth` tokens; each iteration appends one
// token and then rolls the cache back, so every step runs at the same depth.
void BM_Decode(benchmark::State& state) {
  const Model* m = BenchModel();
  if (!m) {
    state.SkipWithError("model not found: ../shared missing and STRETCH_BENCH_MODEL unset");
    return;
  }
  const int64_t depth = state.range(0);
  Transformer model(*m);
  KvCache cache(m->config, depth + 1);
  const std::vector<int> tokens = Tokens(depth + 1, m->config.vocab_size);
  std::vector<float> hidden, logits(static_cast<size_t>(m->config.vocab_size));
  model.Forward(std::span<const int>(tokens).first(static_cast<size_t>(depth)), cache, hidden);
  for (auto _ : state) {
    model.Forward(std::span<const int>(tokens).subspan(static_cast<size_t>(depth), 1), cache,
                  hidden);
    model.Logits(hidden.data(), 1, logits.data());
    benchmark::DoNotOptimize(logits.data());
    state.PauseTiming();
    cache.Truncate(depth);
    state.ResumeTiming();
  }
  state.counters["tokens/s"] =
      benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Decode)
    ->Arg(512)
    ->Arg(2048)
    ->Arg(8192)
    ->Arg(16384)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace stretch

BENCHMARK_MAIN();
