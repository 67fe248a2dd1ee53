// stretch: run language models far beyond the context they were trained on, and measure how well
// they do. See README.md; every subcommand has --help.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "src/core/stop.h"
#include "tools/cli/common.h"

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) would otherwise kill the process with SIGXFSZ mid-write, with
  // no message: ignored, the write fails with EFBIG and is reported like a full disk (the file
  // being written is removed, the previous one left as it was).
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{
      "stretch: an engine and laboratory for Transformer length extrapolation (\"train short, "
      "test long\").\n"
      "A language model trained on short texts (say 512 tokens) usually breaks down on longer "
      "ones. stretch runs such models on long inputs and measures where and how they break.\n"
      "Subcommands:\n"
      "  generate  write text with a model, streaming it, and report its speed\n"
      "  score     measure a model's next-token loss and accuracy on text, by position\n"
      "  inspect   show a model's configuration, size and memory needed at a context length\n"
      "  bench     measure this machine's speed: attention kernel, prefill, decode, memory\n"
      "  train     train a small model on your text with a position scheme of your choice\n"
      "  lab       train short, test long: models x methods x lengths x protocols, in one command\n"
      "  report    tables, plots and an HTML page from the lab's results files\n"
      "  tune      which method and parameters suit a model at a target length, by measurement\n"
      "  convert   write a model as a GGUF file (llama.cpp), a Hugging Face folder, a llama2.c\n"
      "            checkpoint or a stretch checkpoint\n"
      "  tokenize  the token ids a model's tokenizer gives for a text (as llama-tokenize)\n"
      "  conformance  tiny models of every family and their log-probabilities, for other engines\n"
      "Run `stretch SUBCOMMAND --help` for the options of each."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show the help of every subcommand");
  app.set_version_flag("--version", fmt::format("stretch {}", stretch::cli::BuildId()),
                       "Print the commit this stretch was built from and exit");
  stretch::cli::RegisterGenerate(app);
  stretch::cli::RegisterScore(app);
  stretch::cli::RegisterInspect(app);
  stretch::cli::RegisterBench(app);
  stretch::cli::RegisterTrain(app);
  stretch::cli::RegisterLab(app);
  stretch::cli::RegisterReport(app);
  stretch::cli::RegisterTune(app);
  stretch::cli::RegisterConvert(app);
  stretch::cli::RegisterTokenize(app);
  stretch::cli::RegisterConformance(app);
  stretch::cli::AddNumberChecks(app);
  // llama.cpp's two-letter short flags, which CLI11 cannot name: -ctk / -ctv are the
  // --cache-type-k / --cache-type-v of generate and score.
  std::vector<std::string> words(argv, argv + argc);
  for (std::string& w : words) {
    if (w == "-ctk") w = "--cache-type-k";
    if (w == "-ctv") w = "--cache-type-v";
  }
  std::vector<char*> args;
  for (std::string& w : words) args.push_back(w.data());
  // A first word that is no subcommand: CLI11 would say only "A subcommand is required".
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  if (argc == 1) {
    fmt::print(stderr,
               "stretch: error: no subcommand given (expected one of: {}); `stretch --help` says "
               "what each does\n",
               fmt::join(names, ", "));
    return 2;
  }
  if (words[1] == "help" || words[1] == "version") {
    fmt::print(stderr, "stretch: error: unknown subcommand \"{}\" (did you mean --{}?)\n", words[1],
               words[1]);
    return 2;
  }
  if (!words[1].empty() && words[1][0] != '-' &&
      std::find(names.begin(), names.end(), words[1]) == names.end()) {
    fmt::print(stderr, "stretch: error: unknown subcommand \"{}\"{} (expected one of: {})\n",
               words[1], stretch::cli::DidYouMean(words[1], names), fmt::join(names, ", "));
    return 2;
  }
  try {
    app.parse(argc, args.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // A flag's value or a word CLI11 refused: said as every other error is, with where to look.
    const CLI::App* sub = nullptr;
    for (CLI::App* s : app.get_subcommands()) sub = s;
    fmt::print(stderr, "stretch: error: {}\nRun `stretch {}--help` for the options.\n", e.what(),
               sub != nullptr ? sub->get_name() + " " : "");
    return 2;
  } catch (const stretch::Stopped& e) {  // Ctrl-C or SIGTERM, the work so far saved
    std::fflush(stdout);
    fmt::print(stderr, "stretch: {}\n", stretch::cli::WithFlagNames(e.what()));
    return 128 + e.signal();
  } catch (const stretch::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "stretch: error: {}\n", stretch::cli::WithFlagNames(e.what()));
    return 1;
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    fmt::print(stderr, "stretch: error: out of memory\n");
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // The path and the system's reason first ("ro/run: Read-only file system"), then what was
    // being done, where the library let such an error through unworded.
    std::fflush(stdout);
    if (e.path1().empty()) {
      fmt::print(stderr, "stretch: error: {}\n", e.what());
    } else {
      fmt::print(stderr, "stretch: error: {}: {} ({})\n", e.path1().string(), e.code().message(),
                 e.what());
    }
    return 1;
  } catch (const std::exception& e) {  // e.g. a file system error from the OS
    std::fflush(stdout);
    fmt::print(stderr, "stretch: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
