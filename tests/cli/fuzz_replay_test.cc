// The fuzz targets (fuzz/targets/, libFuzzer programs in a -DSTRETCH_FUZZ=ON build) run in the
// ordinary builds on their committed seeds (fuzz/seeds/<target>/), on every input that once
// crashed one (fuzz/regressions/<target>/: how a finding becomes a regression test) and on the
// binary seeds the seed writer makes (fuzz/seed_writer.h). A target returns normally when its
// parser accepted the input or refused it with stretch::Error; a crash, a sanitizer report, a
// failed check or another exception fails this test (fuzz/fuzz_target.h).
//
// The targets' files are compiled into this test program by inclusion: the test programs are one
// per folder of tests/ (CMakeLists.txt), and the targets must not need a build of their own here.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "fuzz/seed_writer.cc"
#include "fuzz/targets/arch_spec.cc"
#include "fuzz/targets/arch_train.cc"
#include "fuzz/targets/gguf.cc"
#include "fuzz/targets/hf_model.cc"
#include "fuzz/targets/hf_tokenizer_json.cc"
#include "fuzz/targets/lab_corpus.cc"
#include "fuzz/targets/lab_records.cc"
#include "fuzz/targets/llama2c.cc"
#include "fuzz/targets/llama2c_tokenizer.cc"
#include "fuzz/targets/method.cc"
#include "fuzz/targets/model_file.cc"
#include "fuzz/targets/safetensors.cc"
#include "fuzz/targets/spm_model.cc"
#include "fuzz/targets/stretch_checkpoint.cc"
#include "fuzz/targets/text_encode.cc"
#include "fuzz/targets/token_cache.cc"
#include "fuzz/targets/tokenizer_file.cc"
#include "fuzz/targets/train_checkpoint.cc"
#include "fuzz/targets/train_config.cc"

namespace stretch::fuzz {
namespace {

namespace fs = std::filesystem;
using Target = int (*)(const uint8_t*, size_t);

// Every target, by its file's name (the folder name of its seeds and regressions).
const std::map<std::string, Target>& Targets() {
  static const std::map<std::string, Target> targets = {
      {"arch_spec", FuzzArchSpec},
      {"arch_train", FuzzArchTrain},
      {"gguf", FuzzGguf},
      {"hf_model", FuzzHfModel},
      {"hf_tokenizer_json", FuzzHfTokenizerJson},
      {"lab_corpus", FuzzLabCorpus},
      {"lab_records", FuzzLabRecords},
      {"llama2c", FuzzLlama2c},
      {"llama2c_tokenizer", FuzzLlama2cTokenizer},
      {"method", FuzzMethod},
      {"model_file", FuzzModelFile},
      {"safetensors", FuzzSafetensors},
      {"spm_model", FuzzSpmModel},
      {"stretch_checkpoint", FuzzStretchCheckpoint},
      {"text_encode", FuzzTextEncode},
      {"token_cache", FuzzTokenCache},
      {"tokenizer_file", FuzzTokenizerFile},
      {"train_checkpoint", FuzzTrainCheckpoint},
      {"train_config", FuzzTrainConfig},
  };
  return targets;
}

std::string ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs every file under root/<target>/ through its target; returns the number of files.
int Replay(const fs::path& root) {
  int files = 0;
  if (!fs::is_directory(root)) return 0;
  for (const fs::directory_entry& dir : fs::directory_iterator(root)) {
    if (!dir.is_directory() || dir.path().filename().string().starts_with(".")) continue;
    const std::string name = dir.path().filename().string();
    const auto target = Targets().find(name);
    if (target == Targets().end()) {
      ADD_FAILURE() << dir.path() << " names no fuzz target (fuzz/targets/" << name << ".cc)";
      continue;
    }
    for (const fs::directory_entry& f : fs::directory_iterator(dir.path())) {
      if (!f.is_regular_file()) continue;
      SCOPED_TRACE(f.path().string());
      const std::string bytes = ReadBytes(f.path());
      EXPECT_EQ(target->second(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
      ++files;
    }
  }
  return files;
}

const fs::path kFuzzDir = fs::path(STRETCH_SOURCE_DIR) / "fuzz";

TEST(FuzzReplay, EveryTargetFileIsListed) {
  for (const fs::directory_entry& f : fs::directory_iterator(kFuzzDir / "targets")) {
    EXPECT_TRUE(Targets().count(f.path().stem().string()) == 1)
        << f.path() << " is not in this test's list of targets (nor included above)";
  }
}

TEST(FuzzReplay, CommittedSeeds) { EXPECT_GT(Replay(kFuzzDir / "seeds"), 0); }

TEST(FuzzReplay, Regressions) { Replay(kFuzzDir / "regressions"); }

TEST(FuzzReplay, WrittenSeeds) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("stretch_fuzz_seeds_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const int written = WriteFuzzSeeds(dir.string());
  EXPECT_EQ(Replay(dir), written);
  fs::remove_all(dir);
}

// The seeds the writer makes are valid files, accepted by their readers: a seed refused at its
// first check would leave the fuzzer nothing but that check to explore.
TEST(FuzzReplay, WrittenSeedsAreAccepted) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("stretch_fuzz_valid_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  WriteFuzzSeeds(dir.string());
  auto each = [&](const char* target, const std::function<void(const std::string&)>& read) {
    int n = 0;
    for (const fs::directory_entry& f : fs::directory_iterator(dir / target)) {
      SCOPED_TRACE(f.path().string());
      try {
        read(f.path().string());
      } catch (const Error& e) {
        ADD_FAILURE() << e.what();
      }
      ++n;
    }
    EXPECT_GT(n, 0) << target;
  };
  each("llama2c", [](const std::string& p) { LoadLlama2c(p); });
  each("llama2c_tokenizer", [](const std::string& p) { Tokenizer::LoadLlama2c(p); });
  each("spm_model", [](const std::string& p) { LoadSentencePieceModel(p); });
  each("hf_tokenizer_json", [](const std::string& p) {
    if (LooksLikeSentencePieceTokenizerJson(p)) {
      ReadHfSentencePieceJson(p);
    } else {
      BpeTokenizer::FromTokenizerJson(p);
    }
  });
  each("safetensors", [](const std::string& p) { (void)SafetensorsFile(p); });
  each("stretch_checkpoint", [](const std::string& p) { LoadCheckpointModel(p); });
  each("train_checkpoint", [](const std::string& p) { ReadCheckpointInfo(SafetensorsFile(p)); });
  each("gguf", [](const std::string& p) {
    const GgufFile g = GgufFile::Open(p);
    if (g.tensors().empty() && g.StringOr("tokenizer.ggml.model", "") == "llama") {
      ReadGgufTokenizer(g);  // a vocabulary-only seed of the SentencePiece kind
    } else if (g.tensors().empty()) {
      BpeTokenizer::FromGguf(g);  // a vocabulary-only seed of the byte-level kind
    } else {
      LoadGgufModel(g);
    }
  });
  each("model_file", [](const std::string& p) { LoadModelFile(p, {}); });
  each("hf_model", [&](const std::string& p) {
    const std::string bytes = ReadBytes(p);
    const auto parts = SplitParts<std::size(kHfFolderParts)>(bytes);
    const fs::path folder = dir / "hf_folder";
    fs::remove_all(folder);
    fs::create_directories(folder);
    for (size_t i = 0; i < parts.size(); ++i) {
      if (!parts[i].empty()) std::ofstream(folder / kHfFolderParts[i]) << parts[i];
    }
    LoadHfModel(folder.string());
  });
  each("token_cache", [](const std::string& p) { ReadTokenCache(p); });
  each("lab_records", [](const std::string& p) {
    EXPECT_EQ(ReadLabRecords({p}).records.size(), kProtocolNames.size());
  });
  fs::remove_all(dir);
}

// The empty input, and each target's seeds cut short at every length up to 64 bytes and in
// halves: the truncations every parser must refuse by name.
TEST(FuzzReplay, EmptyAndTruncatedInputs) {
  for (const auto& [name, target] : Targets()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(target(nullptr, 0), 0);
  }
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("stretch_fuzz_cut_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  WriteFuzzSeeds(dir.string());
  for (const fs::directory_entry& d : fs::directory_iterator(dir)) {
    const Target target = Targets().at(d.path().filename().string());
    for (const fs::directory_entry& f : fs::directory_iterator(d.path())) {
      SCOPED_TRACE(f.path().string());
      const std::string bytes = ReadBytes(f.path());
      std::vector<size_t> cuts;
      for (size_t n = 1; n < 64 && n < bytes.size(); ++n) cuts.push_back(n);
      cuts.push_back(bytes.size() / 2);
      for (size_t n : cuts) target(reinterpret_cast<const uint8_t*>(bytes.data()), n);
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace stretch::fuzz
