// stretch score --protocol: retrieval protocols with controls and 95% intervals.
#include "tools/cli/score_protocol.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdio>
#include <memory>

#include "src/core/error.h"
#include "src/core/timer.h"
#include "src/io/output_file.h"

namespace stretch::cli {
namespace {

// `suffix`: a unit after the number in the spec ("L" of period=kL), said back in the message.
int64_t ParseWhole(std::string_view spec, std::string_view key, std::string_view value, int64_t lo,
                   int64_t hi, std::string_view suffix = {}) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || v < lo || v > hi) {
    if (!suffix.empty()) {
      Fail("--protocol {}: {}={}{}: expected k{} with k a whole number in [{}, {}]", spec, key,
           value, suffix, suffix, lo, hi);
    }
    Fail("--protocol {}: {}={}: expected a whole number in [{}, {}]", spec, key, value, lo, hi);
  }
  return v;
}

std::string PeriodText(int64_t period, int64_t train_len) {
  if (train_len > 0 && period % train_len == 0) {
    return fmt::format("{} ({}L)", period, period / train_len);
  }
  return fmt::format("{}", period);
}

// A test and its control are told apart when the interval of their difference excludes 0. The
// difference's own interval (paired where the arms share their sequences) is the right test
// here: two overlapping marginal intervals can still differ clearly when paired.
bool Tie(const Interval& difference) { return difference.low <= 0 && 0 <= difference.high; }
std::string TieMark(const Interval& difference) { return Tie(difference) ? "  tie" : ""; }

nlohmann::json IntervalJson(const Interval& i) {
  return {{"estimate", i.estimate}, {"low", i.low}, {"high", i.high}};
}

nlohmann::json ArmJson(const ArmScore& a) {
  return {{"sequences", a.sequences},
          {"tokens_scored", a.tokens},
          {"accuracy", IntervalJson(a.accuracy)},
          {"loss", IntervalJson(a.loss)}};
}

nlohmann::json ProbeJson(const ProbeResult& r, const char* test_name) {
  return {{test_name, ArmJson(r.test)},
          {"control", ArmJson(r.control)},
          {"accuracy_difference", IntervalJson(r.accuracy_difference)},
          {"loss_difference", IntervalJson(r.loss_difference)},
          {"tie", Tie(r.accuracy_difference)}};
}

nlohmann::json PasskeyArmJson(const PasskeyArm& a) {
  return {{"trials", a.trials},
          {"retrieved", a.retrieved},
          {"exact", IntervalJson(a.exact)},
          {"digits_scored", a.digits},
          {"digit_accuracy", IntervalJson(a.digit_accuracy)},
          {"digit_loss", IntervalJson(a.digit_loss)},
          {"right_by_place", a.right_by_place}};
}

// "10 10 9 10 10": trials with each digit place right, first to last.
std::string ByPlace(const PasskeyArm& a) {
  return fmt::format("{}", fmt::join(a.right_by_place, " "));
}

// "0.812 [0.770, 0.851]"
std::string Iv(const Interval& i) {
  return fmt::format("{:.3f} [{:.3f}, {:.3f}]", i.estimate, i.low, i.high);
}
// "+0.410 [+0.350, +0.470]"
std::string SignedIv(const Interval& i) {
  return fmt::format("{:+.3f} [{:+.3f}, {:+.3f}]", i.estimate, i.low, i.high);
}

// The distances far copy measures at ctx: the ones given that fit (others noted), else the
// defaults.
std::vector<int64_t> DistancesAt(const ProtocolArgs& args, const ProtocolSpec& p, int64_t ctx,
                                 int64_t train_len, bool note) {
  const int64_t span = p.copy.span;
  if (args.distances.empty()) {
    std::vector<int64_t> d = DefaultCopyDistances(train_len, ctx, span);
    if (d.empty()) {  // a span longer than half the window: it cannot appear twice
      Fail(
          "far copy: ctx {} is too short for a span of {} tokens and its copy: expected ctx >= {} "
          "(far-copy:span=N sets the span)",
          ctx, span, 2 * span);
    }
    return d;
  }
  std::vector<int64_t> out;
  for (const int64_t d : args.distances) {
    if (d < span) {
      Fail(
          "--distances: {} is shorter than the span of {} tokens (the source would overlap the "
          "copy): expected >= {}",
          d, span, span);
    }
    if (d <= ctx - span) {
      out.push_back(d);
    } else if (note) {
      fmt::print(stderr, "note: far copy at ctx {}: distance {} skipped (at most {} fits)\n", ctx,
                 d, ctx - span);
    }
  }
  if (out.empty()) {
    Fail("--distances: none fits ctx {} with a span of {} (expected {}..{})", ctx, span, span,
         ctx - span);
  }
  return out;
}

int64_t PeriodOf(const ProtocolSpec& p, int64_t train_len) {
  return p.period > 0 ? p.period : p.period_times_l * train_len;
}

PasskeyFormat FormatOf(const ProtocolSpec& p) {
  PasskeyFormat f = p.llama_layout ? LlamaCppPasskeyFormat() : PasskeyFormat{};
  f.digits = p.digits;
  return f;
}

// The seed of a passkey point: a function of (seed, ctx, depth), so that every method meets the
// same keys (as the lab's passkey cells).
uint64_t PasskeySeed(uint64_t seed, int64_t ctx, double depth) {
  return seed * 1000003u + static_cast<uint64_t>(ctx) * 101u +
         static_cast<uint64_t>(std::llround(depth * 1000));
}

std::string ProtocolTitle(const ProtocolSpec& p, int64_t train_len) {
  switch (p.kind) {
    case ProtocolSpec::Kind::kNonRepeat:
      return "non-repeat: windows of held-out text, every position scored (no control: this is "
             "the baseline)";
    case ProtocolSpec::Kind::kFarCopy:
      return fmt::format(
          "far copy: a span of {} tokens ({}) placed earlier and copied at the end of the window; "
          "control: the earlier span replaced by another one",
          p.copy.span, p.copy.source == CopySource::kText ? "held-out text" : "random characters");
    case ProtocolSpec::Kind::kRepeat: {
      const int64_t period = PeriodOf(p, train_len);
      return fmt::format(
          "repeat, period {}: a sample of {} tokens repeated to fill the window, scored from the "
          "second copy on; control: fresh text at the same positions{}",
          PeriodText(period, train_len), period,
          period <= train_len
              ? ". Period <= L: a within-window control (a method that sees only the last L "
                "tokens can still copy it)"
              : "");
    }
    case ProtocolSpec::Kind::kPasskey:
      return fmt::format(
          "passkey ({} layout, {}-digit keys): a key hidden at a depth of the window and asked "
          "for at the end; control: the same question with no key in the text",
          p.llama_layout ? "llama.cpp's llama-passkey" : "stretch's", p.digits);
  }
  return "";
}

}  // namespace

ProtocolSpec ParseProtocolSpec(std::string_view spec) {
  ProtocolSpec p;
  p.spec = std::string(spec);
  const size_t colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  std::vector<std::pair<std::string_view, std::string_view>> params;
  if (colon != std::string_view::npos) {
    std::string_view rest = spec.substr(colon + 1);
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string_view kv = rest.substr(0, comma);
      const size_t eq = kv.find('=');
      if (eq == std::string_view::npos || eq == 0 || eq + 1 == kv.size()) {
        Fail("--protocol {}: \"{}\": expected key=value", spec, kv);
      }
      params.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  auto unknown = [&](std::string_view key, const char* expected) {
    Fail("--protocol {}: unknown parameter \"{}\" (expected {})", spec, key, expected);
  };
  if (name == "nonrepeat" || name == "non-repeat") {
    p.kind = ProtocolSpec::Kind::kNonRepeat;
    if (!params.empty()) unknown(params[0].first, "none");
  } else if (name == "far-copy") {
    p.kind = ProtocolSpec::Kind::kFarCopy;
    for (const auto& [k, v] : params) {
      if (k == "source") {
        if (v == "text") {
          p.copy.source = CopySource::kText;
        } else if (v == "random") {
          p.copy.source = CopySource::kRandom;
        } else {
          Fail("--protocol {}: source={}: expected text or random", spec, v);
        }
      } else if (k == "span") {
        p.copy.span = ParseWhole(spec, k, v, p.copy.ngram + 1, 65536);
      } else {
        unknown(k, "source, span");
      }
    }
  } else if (name == "repeat") {
    p.kind = ProtocolSpec::Kind::kRepeat;
    for (const auto& [k, v] : params) {
      if (k != "period") unknown(k, "period");
      if (!v.empty() && (v.back() == 'L' || v.back() == 'l')) {
        const std::string_view times = v.substr(0, v.size() - 1);
        p.period_times_l =
            times.empty() ? 1 : ParseWhole(spec, k, times, 1, 1 << 20, v.substr(v.size() - 1));
      } else {
        p.period = ParseWhole(spec, k, v, 1, kMaxContext);
      }
    }
    if (p.period == 0 && p.period_times_l == 0) {
      Fail(
          "--protocol {}: expected repeat:period=N (tokens) or repeat:period=kL (k times the "
          "trained length), e.g. repeat:period=2L",
          spec);
    }
  } else if (name == "passkey") {
    p.kind = ProtocolSpec::Kind::kPasskey;
    for (const auto& [k, v] : params) {
      if (k == "layout") {
        if (v == "llama") {
          p.llama_layout = true;
        } else if (v == "stretch") {
          p.llama_layout = false;
        } else {
          Fail("--protocol {}: layout={}: expected stretch or llama", spec, v);
        }
      } else if (k == "digits") {
        p.digits = static_cast<int>(ParseWhole(spec, k, v, 1, 18));
      } else {
        unknown(k, "layout, digits");
      }
    }
  } else {
    Fail("--protocol {}: unknown protocol \"{}\" (expected far-copy, repeat, passkey or nonrepeat)",
         spec, name);
  }
  return p;
}

std::string ProtocolHelpText() {
  return "Retrieval protocols (--protocol, repeatable): does the model still use distant tokens, "
         "or only avoid blowing up? Each scores a test and a control that has nothing to "
         "retrieve, at the very same positions, and prints both accuracies with 95% intervals "
         "and their difference; \"tie\" marks a difference whose interval holds 0 (inside the "
         "noise).\n"
         "  far-copy[:source=text|random,span=32]  a span of text (or of random letters) appears "
         "once early in the window and again at its very end; the model should recognise the "
         "second copy and predict it. Scored: the copy's tokens but its first, and but those "
         "whose 4-token run ending there occurs earlier in the control's window (which the "
         "control could copy too): the tokens column counts what is left. Measured at "
         "distances (--distances; default L/4, L/2, L, 2L, ... and the whole window) between the "
         "two copies. Control: the early span is replaced by a different one, so nothing can "
         "be copied. Also prints \"sees "
         "back N tokens\": from the distance closest to the trained length L from below, the "
         "farthest distance up to which copy - control stays above 0 (its interval) and copy "
         "accuracy no more than 10 points below its value there; \"not informative\" where "
         "copy - control reaches 0.20 at no distance.\n"
         "  repeat:period=N|kL  a sample of N tokens (or k times L) repeated until the window is "
         "full; from the second copy on every token has been seen N tokens back. Control: "
         "ordinary text at the same positions. A period of L or less is labelled a "
         "within-window control: even a method that only sees the last L tokens can copy it.\n"
         "  passkey[:layout=stretch|llama,digits=5]  a random number hidden in filler text at a "
         "depth (--depths, 0 = start, 1 = just before the question) and asked for at the end; "
         "layout=llama is llama.cpp's llama-passkey prompt (a task sentence, \"The grass is "
         "green...\" repeated, \"The pass key is N. Remember it. N is the pass key.\"). Reports "
         "keys read back exactly (Wilson interval), digits right, the loss per digit, and how many "
         "trials had each digit place right (\"0 10 10 10 10\": every key but its first digit). "
         "Control: the same question with no key in the text (chance), with its own count by place "
         "(\"ctrl by place\": its first digit a guess, right about 1 time in 10 when the model "
         "answers with a number at all).\n"
         "  nonrepeat  ordinary text windows, every position scored: the baseline.\n"
         "Each point uses --trials sequences (keys, windows); intervals are a bootstrap over "
         "sequences (--bootstrap resamples, --seed) or Wilson's for keys read back.\n"
         "Example: stretch score -m stories260K.bin -t tok512.bin --data "
         "../shared/data/tinystories --ctx 2048,4096 --methods direct,yarn --protocol far-copy "
         "--protocol repeat:period=2L --protocol passkey:layout=llama";
}

void AddProtocolOptions(CLI::App* sub, ProtocolArgs& args) {
  sub->add_option("--protocol", args.specs,
                  "A retrieval protocol, with its control (repeatable): far-copy[:source=text|"
                  "random,span=N], repeat:period=N|kL, passkey[:layout=stretch|llama,digits=N], "
                  "nonrepeat (see above)")
      ->allow_extra_args(false);
  sub->add_option("--trials", args.trials,
                  "With --protocol: sequences per point (far-copy distance, passkey depth, repeat "
                  "or non-repeat cell)")
      ->capture_default_str()
      ->check(Whole(1, 1000000));
  sub->add_option("--distances", args.distances,
                  "With --protocol far-copy: distances in tokens between the span and its copy, a "
                  "comma list (default: L/4, L/2, L, 2L, ... and the whole window)")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->check(Whole(1, kMaxContext));
  sub->add_option("--depths", args.depths,
                  "With --protocol passkey: depths of the key in the window, a comma list in "
                  "[0, 1]")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->capture_default_str()
      ->check(Real(0.0, 1.0));
  sub->add_option("--seed", args.seed,
                  "With --protocol: seed of the keys, random strings and bootstrap")
      ->capture_default_str();
  sub->add_option("--bootstrap", args.bootstrap,
                  "With --protocol: bootstrap resamples per interval")
      ->capture_default_str()
      ->check(Whole(100, 1000000));
}

void RunScoreProtocols(const ProtocolRunArgs& args) {
  const ProtocolArgs& pa = args.protocols;
  std::vector<ProtocolSpec> protocols;
  for (const std::string& s : pa.specs) protocols.push_back(ParseProtocolSpec(s));
  bool needs_text = false;
  for (const ProtocolSpec& p : protocols) {
    needs_text = needs_text || !(p.kind == ProtocolSpec::Kind::kPasskey && p.llama_layout);
  }

  const ModelHeader header = ReadModelHeader(args.model.model);
  const std::vector<SweepMethod> methods = MethodsFromArgs(args.method, &header);
  for (const SweepMethod& m : methods) {
    if (m.nbce) Fail("--protocol: method \"{}\": NBCE scores a fixed tail only", m.spec);
  }
  std::vector<NamedPath> inputs = {
      {"--model", header.path}, {"--tokenizer", args.model.tokenizer}, {"--data", args.data}};
  const std::vector<NamedPath> outputs = {{"--json-out", args.json_out}};
  CheckOutputPaths(inputs, outputs);
  if (needs_text && args.data.empty()) {
    Fail("--protocol {}: needs --data, the held-out text to cut windows, spans and filler from",
         pa.specs[0]);
  }
  if (args.model.tokenizer.empty() && !header.own_tokenizer) {
    Fail(
        "--protocol needs --tokenizer to encode text, keys and questions (a llama2.c model, or "
        "a GGUF file without a vocabulary)");
  }
  const int64_t L = header.config.seq_len;
  ScoreOptions plan_options;
  plan_options.progress = false;
  std::vector<SweepCell> cells =
      PlanSweep(header.config, methods, args.contexts, plan_options, /*sequences=*/false);
  NoteMethodCaveats(header.config, cells);
  for (const ProtocolSpec& p : protocols) {
    for (const int64_t ctx : args.contexts) {
      if (p.kind == ProtocolSpec::Kind::kRepeat) {
        if (p.period_times_l > 0 && L < 1) {
          Fail("--protocol {}: the model's trained length is unknown: give period=N in tokens",
               p.spec);
        }
        if (PeriodOf(p, L) >= ctx) {
          Fail(
              "--protocol {}: period {} at ctx {}: expected a period below the window, so that "
              "a second copy begins inside it",
              p.spec, PeriodOf(p, L), ctx);
        }
      }
      if (p.kind == ProtocolSpec::Kind::kFarCopy) DistancesAt(pa, p, ctx, L, /*note=*/false);
    }
  }

  ModelArgs model_args = args.model;
  model_args.model = header.path;
  Loaded loaded = LoadModel(model_args, /*tokenizer_needed=*/true);
  Transformer model(loaded.model);
  model.set_kv_types(args.kv_types);
  const TextTokenizer& tok = *loaded.tokenizer;
  const int bos = tok.bos();
  const TextEncoder encode = MidTextEncoder([&tok](std::string_view text) {
    std::vector<int> ids = tok.EncodePrompt(text);
    if (!ids.empty() && ids.front() == tok.bos()) ids.erase(ids.begin());  // its BOS
    return ids;
  });
  TextStream stream;
  nlohmann::json input = nullptr;
  if (!args.data.empty()) {
    Timer t;
    stream = tok.EncodeText(args.data);
    fmt::print(stderr, "encoded {} bytes of text into {} tokens in {:.2f} s\n", stream.bytes,
               stream.tokens.size(), t.Seconds());
    input = {{"data", args.data}, {"bytes", stream.bytes}, {"stream_tokens", stream.tokens.size()}};
    for (const std::string& file : stream.files) inputs.push_back({"--data", file});
    CheckOutputPaths(inputs, outputs);
  }
  const TokenSpans documents = {std::span<const int>(stream.tokens)};

  // Every sequence of every point is built once before the first is scored: too little text, a
  // ctx too short for a passkey, fail now rather than after an hour.
  for (const ProtocolSpec& p : protocols) {
    for (const int64_t ctx : args.contexts) {
      switch (p.kind) {
        case ProtocolSpec::Kind::kNonRepeat:
          NonRepeatSequences(documents, ctx, pa.trials, bos);
          break;
        case ProtocolSpec::Kind::kFarCopy:
          for (const int64_t d : DistancesAt(pa, p, ctx, L, /*note=*/true)) {
            FarCopyOptions o = p.copy;
            o.seed = pa.seed;
            MakeFarCopyTrials(documents, encode, bos, ctx, d, pa.trials, o);
          }
          break;
        case ProtocolSpec::Kind::kRepeat:
          MakeRepeatProbe(documents, bos, ctx, PeriodOf(p, L), pa.trials);
          break;
        case ProtocolSpec::Kind::kPasskey:
          for (const double depth : pa.depths) {
            MakePasskeyProbe(documents, encode, bos, ctx, depth, pa.trials,
                             PasskeySeed(pa.seed, ctx, depth), FormatOf(p));
          }
          break;
      }
    }
  }

  std::unique_ptr<AtomicFile> json_out;
  if (!args.json_out.empty()) json_out = std::make_unique<AtomicFile>(args.json_out);
  BootstrapOptions boot;
  boot.resamples = pa.bootstrap;
  boot.seed = pa.seed;

  std::string text;  // the report, printed at the end (progress lines go to stderr meanwhile)
  auto out = [&text](const std::string& s) { text += s; };
  out(fmt::format("model: {}\n", loaded.model.source));
  if (!args.data.empty()) out(fmt::format("data: {}\n", args.data));
  out(fmt::format(
      "trained length L = {}; {} trials per point; 95% intervals: a bootstrap over sequences "
      "({} resamples, seed {}), Wilson's for keys read back\n",
      L, pa.trials, pa.bootstrap, pa.seed));

  nlohmann::json results = nlohmann::json::array();
  Timer timer;
  for (const SweepCell& cell : cells) {
    model.SetPlan(cell.plan);
    const std::string& spec = methods[cell.method].spec;
    out(fmt::format("\n== {} @ ctx {} (resolved: {}) ==\n", spec, cell.ctx, cell.resolved));
    for (const ProtocolSpec& p : protocols) {
      const std::string label = fmt::format("score {} @ {} {}", spec, cell.ctx, p.spec);
      const SequenceScorer scorer = ModelSequenceScorer(model, label, args.progress);
      nlohmann::json j = {{"method", spec},
                          {"resolved_method", cell.resolved},
                          {"ctx", cell.ctx},
                          {"protocol", p.spec},
                          {"description", ProtocolTitle(p, L)}};
      out(fmt::format("\n{}\n", ProtocolTitle(p, L)));
      switch (p.kind) {
        case ProtocolSpec::Kind::kNonRepeat: {
          const ArmScore a = RunNonRepeat(scorer, documents, bos, cell.ctx, pa.trials, boot);
          out(fmt::format("  accuracy {}   loss {}   ({} windows, {} tokens)\n", Iv(a.accuracy),
                          Iv(a.loss), a.sequences, a.tokens));
          j["result"] = ArmJson(a);
          break;
        }
        case ProtocolSpec::Kind::kFarCopy: {
          FarCopyOptions o = p.copy;
          o.seed = pa.seed;
          const std::vector<int64_t> ds = DistancesAt(pa, p, cell.ctx, L, false);
          const FarCopyResult r =
              RunFarCopy(scorer, documents, encode, bos, cell.ctx, L, ds, pa.trials, o, boot);
          out(fmt::format("  {:>8}  {:<22}  {:<22}  {:<27}  {:>9}  {:>9}  {:>6}\n", "distance",
                          "copy accuracy", "control accuracy", "copy - control", "copy loss",
                          "ctrl loss", "tokens"));
          nlohmann::json points = nlohmann::json::array();
          for (const FarCopyPoint& pt : r.points) {
            const ProbeResult& x = pt.result;
            out(fmt::format("  {:>8}  {:<22}  {:<22}  {:<27}  {:>9.3f}  {:>9.3f}  {:>6}{}\n",
                            pt.distance, Iv(x.test.accuracy), Iv(x.control.accuracy),
                            SignedIv(x.accuracy_difference), x.test.loss.estimate,
                            x.control.loss.estimate, x.test.tokens,
                            TieMark(x.accuracy_difference)));
            nlohmann::json pj = ProbeJson(x, "copy");
            pj["distance"] = pt.distance;
            points.push_back(std::move(pj));
          }
          j["source"] = CopySourceName(o.source);
          j["span"] = o.span;
          j["points"] = std::move(points);
          j["reference_distance"] = r.reference_distance;
          j["reference_gain"] = r.reference_gain;
          j["max_gain"] = r.max_gain;
          // A number only where it means something (SeesBackInformative): a model or method
          // that never copies stays "within 10 points" of its chance level at every distance.
          const bool informative = SeesBackInformative(r);
          j["sees_back"] = informative ? nlohmann::json(*r.sees_back) : nlohmann::json(nullptr);
          j["sees_back_informative"] = informative;
          if (!r.sees_back) {
            out(fmt::format("  sees back: unknown (no distance <= L = {} measured)\n", L));
          } else if (!informative) {
            out(fmt::format(
                "  sees back: not informative: copy - control is below {:.2f} at every distance "
                "(at most {:+.3f}, at {}), too weak a copy to follow\n",
                kSeesBackMinGain, r.max_gain, r.max_gain_distance));
          } else if (*r.sees_back == 0) {
            out(fmt::format(
                "  sees back: none: copy - control at distance {} has its interval at 0\n",
                r.reference_distance));
          } else {
            out(fmt::format(
                "  sees back {} tokens: the farthest distance up to which copy - control stays "
                "above 0 and copy accuracy no more than 10 points below its value at distance "
                "{}{}\n",
                *r.sees_back, r.reference_distance, r.reference_distance == L ? " (= L)" : ""));
          }
          break;
        }
        case ProtocolSpec::Kind::kRepeat: {
          const int64_t period = PeriodOf(p, L);
          const ProbeResult r =
              RunRepeat(scorer, documents, bos, cell.ctx, period, pa.trials, boot);
          out(fmt::format("  {:<16} {:<22}  loss {:.3f}  ({} windows, {} tokens)\n", "repeat",
                          Iv(r.test.accuracy), r.test.loss.estimate, r.test.sequences,
                          r.test.tokens));
          out(fmt::format("  {:<16} {:<22}  loss {:.3f}\n", "control", Iv(r.control.accuracy),
                          r.control.loss.estimate));
          out(fmt::format("  {:<16} {}{}\n", "repeat - control", SignedIv(r.accuracy_difference),
                          TieMark(r.accuracy_difference)));
          j.update(ProbeJson(r, "repeat"));
          j["period"] = period;
          j["within_window_control"] = period <= L;
          break;
        }
        case ProtocolSpec::Kind::kPasskey: {
          out(fmt::format(
              "  {:>5}  {:>8}  {:<28}  {:<28}  {:<27}  {:<22}  {:<22}  {:>9}  {:>9}  {:<16}  {}\n",
              "depth", "distance", "keys read back", "control (no key)", "keys - control",
              "digits right", "control digits", "digit loss", "ctrl loss", "right by place",
              "ctrl by place"));
          nlohmann::json points = nlohmann::json::array();
          for (const double depth : pa.depths) {
            const std::vector<PasskeyProbeTrial> trials =
                MakePasskeyProbe(documents, encode, bos, cell.ctx, depth, pa.trials,
                                 PasskeySeed(pa.seed, cell.ctx, depth), FormatOf(p));
            const PasskeyProbeResult r = ScorePasskeyProbe(scorer, trials, boot);
            // From the needle's first token to the answer's first token, averaged over trials.
            double distance = 0;
            for (const PasskeyProbeTrial& t : trials) {
              distance +=
                  static_cast<double>(t.trial.key_positions.front() + 1 - t.trial.needle_start);
            }
            distance /= static_cast<double>(trials.size());
            out(fmt::format(
                "  {:>5.2f}  {:>8.0f}  {:<28}  {:<28}  {:<27}  {:<22}  {:<22}  {:>9.3f}  "
                "{:>9.3f}  {:<16}  {:<{}}{}\n",
                depth, distance,
                fmt::format("{:>3}/{:<3} {}", r.test.retrieved, r.test.trials, Iv(r.test.exact)),
                fmt::format("{:>3}/{:<3} {}", r.control.retrieved, r.control.trials,
                            Iv(r.control.exact)),
                SignedIv(r.exact_difference), Iv(r.test.digit_accuracy),
                Iv(r.control.digit_accuracy), r.test.digit_loss.estimate,
                r.control.digit_loss.estimate, ByPlace(r.test), ByPlace(r.control),
                Tie(r.exact_difference) ? 16 : 0,  // no trailing blanks
                TieMark(r.exact_difference)));
            points.push_back(
                {{"depth", depth},
                 {"needle_to_answer", distance},
                 {"passkey", PasskeyArmJson(r.test)},
                 {"control", PasskeyArmJson(r.control)},
                 {"exact_difference", IntervalJson(r.exact_difference)},
                 {"digit_accuracy_difference", IntervalJson(r.digit_accuracy_difference)},
                 {"tie", Tie(r.exact_difference)}});
          }
          j["layout"] = p.llama_layout ? "llama" : "stretch";
          j["digits"] = p.digits;
          j["points"] = std::move(points);
          break;
        }
      }
      results.push_back(std::move(j));
    }
  }
  out(fmt::format("\nscored in {:.1f} s\n", timer.Seconds()));

  nlohmann::json method_list = nlohmann::json::array();
  for (const SweepMethod& m : methods) {
    method_list.push_back({{"spec", m.spec}, {"canonical", CanonicalSpecWithLayers(m)}});
  }
  const nlohmann::json report = {{"build", BuildId()},        {"model", loaded.model.source},
                                 {"tokenizer", tok.Name()},   {"input", input},
                                 {"trained_len", L},          {"methods", method_list},
                                 {"contexts", args.contexts}, {"trials", pa.trials},
                                 {"seed", pa.seed},           {"bootstrap_resamples", pa.bootstrap},
                                 {"interval_level", 0.95},    {"protocol_results", results}};
  const std::string json_text =
      report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  if (args.json) {
    fmt::print("{}\n", json_text);
  } else {
    fmt::print("{}", text);
  }
  if (json_out) {
    json_out->Write(json_text + "\n");
    json_out->Commit();
  }
}

}  // namespace stretch::cli
