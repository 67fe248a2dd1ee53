// stretch generate: write text with a model, streaming tokens as they come.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "src/core/error.h"
#include "src/core/timer.h"
#include "src/eval/nbce.h"
#include "src/model/sampler.h"
#include "src/model/transformer.h"
#include "tools/cli/common.h"

namespace stretch::cli {
namespace {

struct GenerateArgs {
  ModelArgs model;
  MethodArgs method;
  std::string prompt;
  int steps = 200;
  SamplerOptions sampler;
  bool ignore_eos = false;
  bool no_parse_special = false;
  CacheTypeArgs cache_type;
  bool quiet_stats = false;
  std::string context;  // --context: NBCE's long context
  // Sampling flags, to tell whether they were given (they do nothing at temperature 0).
  CLI::Option* top_p_option = nullptr;
  CLI::Option* seed_option = nullptr;
};

// The prompt's tokens: special tokens spelled in it are those tokens (llama-completion's reading)
// unless --no-parse-special.
std::vector<int> PromptTokens(const TextTokenizer& tok, const GenerateArgs& args) {
  return args.no_parse_special ? tok.EncodePrompt(args.prompt)
                               : tok.EncodePromptParsingSpecial(args.prompt);
}

// --ignore-eos as llama.cpp means it: no token that ends generation (EOS, and llama.cpp's other
// end-of-generation tokens such as <|eot_id|> or <|im_end|>: EndOfGenerationTokens) is ever
// chosen, so greedy decoding takes the next best where one would win and both engines go on
// alike (choosing EOS and going on past it parted from llama.cpp wherever EOS was most likely).
// A vocabulary without EOS turns --ignore-eos off, as llama.cpp does ("vocab does not have an EOS
// token, ignoring --ignore-eos", common/common.cpp); RunGenerate warns.
bool IgnoresEos(const GenerateArgs& args, const TextTokenizer& tok) {
  return args.ignore_eos && tok.eos() >= 0;
}

SamplerOptions GenerateSampler(const GenerateArgs& args, const TextTokenizer& tok) {
  SamplerOptions o = args.sampler;
  if (IgnoresEos(args, tok)) o.banned = EndOfGenerationTokens(tok);
  return o;
}

// Without --ignore-eos generation stops at an end-of-generation token, as llama-completion does,
// and at BOS, as llama2.c's run.c does (its stories are separated by BOS); sorted.
std::vector<int> StopTokens(const GenerateArgs& args, const TextTokenizer& tok) {
  if (IgnoresEos(args, tok)) return {};
  std::vector<int> stops = EndOfGenerationTokens(tok);
  if (tok.bos() >= 0) stops.push_back(tok.bos());
  std::sort(stops.begin(), stops.end());
  return stops;
}

bool Stops(const std::vector<int>& stops, int token) {
  return std::binary_search(stops.begin(), stops.end(), token);
}

// NBCE: the context file read as chunks (one row each, BOS + chunk + prompt), their next-token
// distributions pooled and combined with the prompt's own (src/eval/nbce.h); every sampled token
// is fed to every row.
void RunNbceGenerate(const GenerateArgs& args, const Loaded& loaded, const SweepMethod& method) {
  const TextTokenizer& tok = *loaded.tokenizer;
  const ModelConfig& config = loaded.model.config;
  const std::vector<int> context = tok.EncodeText(args.context).tokens;
  std::vector<int> question = PromptTokens(tok, args);
  if (!question.empty() && question.front() == tok.bos()) question.erase(question.begin());
  NbceGenerator gen(loaded.model, tok.bos(), *method.nbce, args.steps, method.method);
  Timer prefill_timer;
  gen.Start(context, question);
  const double prefill_s = prefill_timer.Seconds();
  Sampler sampler(GenerateSampler(args, tok));
  const std::vector<int> stops = StopTokens(args, tok);
  fmt::print("{}", args.prompt);
  std::fflush(stdout);
  std::vector<int> shown = {tok.bos()};
  shown.insert(shown.end(), question.begin(), question.end());
  const std::unique_ptr<TokenTextDecoder> text = tok.Decoder(shown);
  Timer decode_timer;
  int generated = 0;
  for (int step = 0; step < args.steps; ++step) {
    std::vector<float> log_probs = gen.NextLogProbs();
    const int next = sampler.Sample(log_probs.data(), config.vocab_size);
    if (Stops(stops, next)) break;
    fmt::print("{}", text->Next(next));
    std::fflush(stdout);
    ++generated;
    if (step + 1 == args.steps) break;
    gen.Append(next);
  }
  const double decode_s = decode_timer.Seconds();
  fmt::print("{}\n", text->Finish());
  std::fflush(stdout);
  if (!args.quiet_stats) {
    fmt::print(stderr,
               "NBCE: {} context tokens in {} chunks of up to {} (+ the prompt's {} tokens each, "
               "and the prompt alone), {}\n"
               "prefill: {:.3f} s; decode: {} tokens in {:.3f} s ({:.0f} tokens/s, every row "
               "each)\n",
               context.size(), gen.chunks(), gen.chunk_len(), question.size(),
               NbceSpecText(*method.nbce), prefill_s, generated, decode_s,
               generated / std::max(decode_s, 1e-9));
  }
}

void RunGenerate(const GenerateArgs& args) {
  if (args.steps < 1) Fail("-n: found {}, expected at least 1 token to generate", args.steps);
  if (!(args.sampler.temperature >= 0) || !std::isfinite(args.sampler.temperature)) {
    Fail("--temperature: found {}, expected >= 0 (0 means greedy)", args.sampler.temperature);
  }
  if (!(args.sampler.top_p > 0 && args.sampler.top_p <= 1)) {
    Fail("--top-p: found {}, expected a value in (0, 1]", args.sampler.top_p);
  }
  if (args.sampler.temperature == 0) {
    if (args.top_p_option->count() > 0) {
      Warn(fmt::format(
          "--top-p {} has no effect at --temperature 0 (greedy: the most likely token every "
          "time); give --temperature above 0 to sample",
          args.sampler.top_p));
    }
    if (args.seed_option->count() > 0) {
      Warn(
          fmt::format("--seed {} has no effect at --temperature 0 (greedy decoding draws no random "
                      "number); give --temperature above 0 to sample",
                      args.sampler.seed));
    }
  }
  Loaded loaded = LoadModel(args.model, /*tokenizer_needed=*/true);
  if (args.ignore_eos && loaded.tokenizer->eos() < 0) {
    Warn(
        "--ignore-eos: the vocabulary has no end-of-text token (EOS), so the option does nothing, "
        "as in llama.cpp: generation still stops at the tokens that end it");
  }
  const SweepMethod method = OneMethodFromArgs(args.method, "generate", &loaded.header);
  if (method.nbce) {
    if (args.context.empty()) {
      Fail(
          "--method {}: NBCE reads a long context as chunks: give it with --context FILE (the "
          "prompt is the question that follows it)",
          method.spec);
    }
    if (!(ResolveCacheTypes(args.cache_type) == KvCacheTypes{})) {
      Fail("--cache-type with --method nbce: NBCE keeps its chunks' keys and values in float32");
    }
    RunNbceGenerate(args, loaded, method);
    return;
  }
  if (!args.context.empty()) {
    Fail("--context {}: only NBCE reads a separate context (allowed: --method nbce[:...])",
         args.context);
  }
  const TextTokenizer& tok = *loaded.tokenizer;
  const ModelConfig& config = loaded.model.config;
  std::vector<int> prompt = PromptTokens(tok, args);
  const int64_t capacity = static_cast<int64_t>(prompt.size()) + args.steps;

  Transformer model(loaded.model);
  // The call's length L' = prompt (with BOS) + new tokens: a method given no factor scales to
  // s = L' / L for the whole call (the "locally static" choice), so that no key is re-rotated
  // as the text grows. Checked here, before anything is printed or run.
  try {
    model.SetMethod(method.method, capacity);
  } catch (const Error& e) {
    Fail("--method {} for {} tokens (prompt {} + -n {}): {}", method.spec, capacity, prompt.size(),
         args.steps, e.what());
  }
  // The streaming cache holds its sinks and two windows at most, however many tokens come.
  const int64_t streaming_capacity = model.StreamingCacheCapacity();
  KvCache cache(config, streaming_capacity > 0 ? std::min(capacity, streaming_capacity) : capacity,
                ResolveCacheTypes(args.cache_type));
  Sampler sampler(GenerateSampler(args, tok));
  const std::vector<int> stops = StopTokens(args, tok);
  std::vector<float> hidden, logits(static_cast<size_t>(config.vocab_size));

  fmt::print("{}", args.prompt);
  std::fflush(stdout);
  Timer prefill_timer;
  model.Forward(prompt, cache, hidden, Transformer::Rows::kLast);
  model.Logits(hidden.data(), 1, logits.data());
  const double prefill_s = prefill_timer.Seconds();

  Timer decode_timer;
  const std::unique_ptr<TokenTextDecoder> text = tok.Decoder(prompt);
  int generated = 0;
  int decode_forwards = 0;  // forward passes of single generated tokens
  std::vector<int> one(1);
  // Long generations print a line every kEvery tokens: the speed since the last line, resident
  // memory and the cache's fill (flat once a streaming cache is full).
  constexpr int kEvery = 10000;
  Timer every_timer;
  for (int step = 0; step < args.steps; ++step) {
    if (!args.quiet_stats && generated > 0 && generated % kEvery == 0) {
      fmt::print(stderr,
                 "\n[{} tokens: {:.3f} ms/token over the last {}, resident {:.1f} MiB, KV cache "
                 "{} of {} positions ({:.1f} MiB)]\n",
                 generated, every_timer.Seconds() * 1e3 / kEvery, kEvery,
                 CurrentRssBytes() / 1048576.0, cache.length(), cache.capacity(),
                 cache.Bytes() / 1048576.0);
      every_timer.Reset();
    }
    const int next = sampler.Sample(logits.data(), config.vocab_size);
    if (Stops(stops, next)) break;
    fmt::print("{}", text->Next(next));
    std::fflush(stdout);
    ++generated;
    if (step + 1 == args.steps) break;
    one[0] = next;
    model.Forward(one, cache, hidden);
    model.Logits(hidden.data(), 1, logits.data());
    ++decode_forwards;
  }
  const double decode_s = decode_timer.Seconds();
  fmt::print("{}\n", text->Finish());
  std::fflush(stdout);
  if (!args.quiet_stats) {
    // The decode rate counts forward passes of single tokens (the last token printed needs none).
    // The context is every token read; a streaming cache holds only some of them: said apart, so
    // that its buffer's fill does not read as the context.
    const int64_t read = static_cast<int64_t>(prompt.size()) + decode_forwards;
    fmt::print(stderr,
               "prefill: {} tokens in {:.3f} s ({:.0f} tokens/s)\n"
               "decode: {} tokens generated, {} forward passes in {:.3f} s ({} tokens/s); "
               "context reached {} tokens (the model was trained on {}){}\n"
               "method: {} (resolved for {} tokens)\n",
               prompt.size(), prefill_s, prompt.size() / std::max(prefill_s, 1e-9), generated,
               decode_forwards, decode_s,
               decode_forwards > 0
                   ? fmt::format("{:.0f}", decode_forwards / std::max(decode_s, 1e-9))
                   : std::string("n/a"),
               read, config.seq_len,
               streaming_capacity > 0
                   ? fmt::format("; the streaming cache holds {} of them in its {} slots (each "
                                 "token attends to the sinks and the last window)",
                                 cache.length(), cache.capacity())
                   : std::string(),
               CanonicalSpec(model.plan().method), capacity);
  }
}

}  // namespace

void RegisterGenerate(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand(
      "generate",
      "Write text with a model. The prompt is encoded with the tokenizer after a BOS token (an "
      "empty prompt starts from BOS alone; special tokens it spells, such as <|im_start|> or "
      "<start_of_turn>, are those tokens, as llama.cpp's llama-completion reads a prompt), "
      "processed in one pass (prefill), then new tokens are "
      "produced one at a time (decode) and printed as they come. Stops after -n tokens, or "
      "earlier when the model emits BOS, EOS (the end of a story for llama2.c models) or another "
      "token at which llama.cpp ends generation (<|eot_id|>, <|im_end|>, <end_of_turn>, ...) "
      "unless --ignore-eos. Prefill and decode speeds go to stderr.\n"
      "A position method (--method, llama.cpp's --rope-*/--yarn-*/--grp-attn-* flags, or "
      "--rope-scaling-json) is resolved for the whole call: L' = prompt tokens (with BOS) + -n, "
      "so a method without a factor uses s = L' / trained length.\n"
      "Endless generation: --stream-cache sinks=S,window=W keeps the first S tokens and the last "
      "W in the cache (StreamingLLM), so memory and time per token stay flat however long -n "
      "is; a line on stderr every 10,000 tokens shows both.\n"
      "A stretch checkpoint (--model OUT/step-NNNNNNNN.safetensors, or the run's directory "
      "OUT) brings its own tokenizer (no --tokenizer) and its attention layout; its BOS and EOS "
      "are the tokenizer's. " +
          std::string(kTrainedLayoutMethodRule) +
          "\n"
          "Example: stretch generate -m stories260K.bin -t tok512.bin --prompt \"Once upon\" -n "
          "100\n"
          "Example: stretch generate -m runs/rope --prompt \"The \" -n 200 --method yarn\n"
          "Example: stretch generate -m stories260K.bin -t tok512.bin -n 200000 --ignore-eos "
          "--stream-cache sinks=4,window=252\n"
          "Example: stretch generate -m stories260K.bin -t tok512.bin --method nbce --context "
          "long.txt --prompt \"Lily\" -n 50");
  AddModelOptions(sub, args->model, /*tokenizer_needed=*/true);
  AddWeightStorageOption(sub, args->model.weights);
  AddMethodOptions(sub, args->method, /*several=*/false);
  sub->add_option("--prompt,-p", args->prompt, "Text to continue (default: empty, start from BOS)");
  CLI::Option* n_predict =
      sub->add_option("-n,--n-predict", args->steps,
                      "Maximum number of tokens to generate (llama.cpp's name; formerly --steps, "
                      "which in train and lab counts optimizer steps)")
          ->capture_default_str()
          ->check(Whole(0, kMaxContext));
  AddOldName(sub, n_predict, "--steps");
  sub->add_option("--temperature,--temp", args->sampler.temperature,
                  "Sampling temperature: 0 picks the most likely token every time (greedy, "
                  "deterministic); 1 samples from the model's distribution; higher is more random "
                  "(--temp is llama.cpp's spelling)")
      ->capture_default_str();
  args->top_p_option =
      sub->add_option("--top-p", args->sampler.top_p,
                      "Nucleus sampling: sample only among the most likely tokens whose "
                      "probabilities add up to this (1 = all tokens); used when temperature > 0 "
                      "(a warning otherwise)")
          ->capture_default_str();
  args->seed_option = sub->add_option("--seed", args->sampler.seed,
                                      "Random seed for sampling; used when temperature > 0 (a "
                                      "warning otherwise)")
                          ->capture_default_str();
  sub->add_flag(
      "--ignore-eos", args->ignore_eos,
      "Generate all -n tokens: no token that ends generation (EOS, <|eot_id|>, <|im_end|>, "
      "<end_of_turn>, ... as llama.cpp decides them) is ever chosen (their logits set to -inf, "
      "as llama.cpp's --ignore-eos does) and BOS does not stop generation. Without it, "
      "generation stops at BOS or at one of those tokens");
  AddCacheTypeOptions(sub, args->cache_type);
  sub->add_flag("--no-parse-special", args->no_parse_special,
                "Encode the prompt as plain text: a special token's spelling in it (\"<s>\", "
                "\"<|im_start|>\") is then its characters, not the token (llama-tokenize's "
                "flag of that name)");
  sub->add_flag("--no-stats", args->quiet_stats, "Do not print the speed lines on stderr");
  sub->add_option("--context", args->context,
                  "With --method nbce: a text file (or a folder of .txt files) read as the long "
                  "context, cut into chunks that each fit the trained length; the prompt is the "
                  "question after it");
  sub->callback([args] { RunGenerate(*args); });
}

}  // namespace stretch::cli
