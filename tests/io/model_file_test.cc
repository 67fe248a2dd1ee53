// The one model loader (src/io/model_file.h): llama2.c files and stretch checkpoints told apart
// by content, a run's directory resolved to its newest complete checkpoint, and the tokenizer
// rules (a llama2.c model takes a tokenizer file, a checkpoint carries its own).
#include "src/io/model_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "src/io/llama2c.h"
#include "src/io/safetensors.h"
#include "src/io/stretch_checkpoint.h"
#include "src/io/tokenizer/spm_model.h"
#include "src/model/model_arch.h"
#include "tests/cli/tiny_files.h"
#include "tests/testing/files.h"
#include "tests/testing/random_model.h"
#include "tests/testing/shared.h"

namespace stretch {
namespace {

using testing::ErrorOf;

class ModelFileTest : public testing::TempDirTest {
 protected:
  ModelFileTest() : TempDirTest("stretch_model_file_") {}

  // A stretch checkpoint written with the io layer alone: the format's metadata, the
  // architecture, the step and the weights (every tensor the architecture names, filled with
  // i * 0.001), optionally the bytes tokenizer. Returns the weights written.
  ModelWeights WriteCheckpoint(const std::string& path, const TrainArch& arch, int64_t step,
                               bool with_tokenizer) const {
    ModelWeights w = ZeroWeights<float>(arch.model);
    float next = 0.0f;
    w.ForEach([&](const std::string&, std::vector<float>& v, bool) {
      for (float& x : v) x = (next += 0.001f);
    });
    SafetensorsWriter out;
    w.ForEach([&](const std::string& name, std::vector<float>& v, bool) {
      out.Add<float>(name, WeightShape(arch.model, name), std::span<const float>(v));
    });
    out.AddOwned<uint64_t>(std::string(kCheckpointStepTensor), {},
                           std::vector<uint64_t>{static_cast<uint64_t>(step)});
    out.SetMetadata("stretch.format", std::string(kCheckpointFormat));
    out.SetMetadata("stretch.version", std::to_string(kCheckpointVersion));
    out.SetMetadata("stretch.config", ArchToJson(arch).dump());
    if (with_tokenizer) out.SetMetadata("stretch.tokenizer", R"({"kind":"bytes"})");
    out.Write(path);
    return w;
  }

  static TrainArch SmallArch() {
    TrainArch a;
    a.model = testing::TinyConfig();
    a.model.vocab_size = 258;  // the bytes tokenizer's
    a.model.attention.layers.assign(static_cast<size_t>(a.model.n_layers), LayerLayout{});
    return a;
  }
};

TEST_F(ModelFileTest, Llama2cFileWithAndWithoutItsTokenizerFile) {
  const std::string model = Path("tiny.bin"), tok = Path("tok.bin");
  SaveLlama2cVersion1(testing::RandomModel(testing::TinyConfig(), 5), model);
  testing::WriteTokenizer(tok);

  const ModelFileHeader h = ReadModelFileHeader(model);
  EXPECT_EQ(h.format, "llama2.c version 1");
  EXPECT_FALSE(h.checkpoint);
  EXPECT_EQ(h.config.dim, 32);

  LoadedModel bare = LoadModelFile(model, {});
  EXPECT_EQ(bare.tokenizer, nullptr);
  EXPECT_EQ(bare.model.weights.layers.size(), 2u);
  EXPECT_NE(ErrorOf([&] {
              LoadModelFile(model, {"", true});
            }).find("ModelFileOptions::tokenizer_path is required with a llama2.c model"),
            std::string::npos);

  const LoadedModel with = LoadModelFile(model, {tok, true});
  ASSERT_NE(with.tokenizer, nullptr);
  EXPECT_EQ(with.tokenizer->vocab_size(), 40);
}

// --tokenizer takes any of the three kinds of file, told by content: a SentencePiece
// tokenizer.model encodes as its llama2.c export does, and a written tokenizer.model reads back.
TEST_F(ModelFileTest, TokenizerFilesOfEveryKindAreToldByContent) {
  const std::string tok512 = testing::SharedPath("models/stories260K/tok512.bin");
  STRETCH_SKIP_IF_MISSING(tok512);
  ModelConfig c = testing::TinyConfig();
  c.vocab_size = 512;
  const std::string model = Path("m.bin"), spm = Path("tokenizer.model");
  SaveLlama2cVersion1(testing::RandomModel(c, 5), model);
  SaveSentencePieceModel(Tokenizer::LoadLlama2c(tok512), spm);
  const LoadedModel a = LoadModelFile(model, {tok512, true});
  const LoadedModel b = LoadModelFile(model, {spm, true});
  const std::string text = "Once upon a time, there was a little girl named Lily.";
  EXPECT_EQ(a.tokenizer->EncodePrompt(text), b.tokenizer->EncodePrompt(text));
  // A vocabulary of another size is refused naming both files.
  c.vocab_size = 300;
  const std::string other = Path("other.bin");
  SaveLlama2cVersion1(testing::RandomModel(c, 5), other);
  const std::string message = ErrorOf([&] { LoadModelFile(other, {spm, true}); });
  EXPECT_NE(message.find("512 tokens"), std::string::npos) << message;
  EXPECT_NE(message.find(other), std::string::npos) << message;
}

TEST_F(ModelFileTest, CheckpointIsToldByContentAndCarriesItsTokenizer) {
  const TrainArch arch = SmallArch();
  const std::string path = Path("no-extension");  // the name says nothing
  const ModelWeights written = WriteCheckpoint(path, arch, 7, true);

  const ModelFileHeader h = ReadModelFileHeader(path);
  EXPECT_EQ(h.format, "stretch checkpoint");
  EXPECT_TRUE(h.checkpoint);
  EXPECT_EQ(h.step, 7);
  EXPECT_EQ(h.tokenizer_kind, "bytes");

  const LoadedModel m = LoadModelFile(path, {"", true});
  ASSERT_NE(m.tokenizer, nullptr);
  EXPECT_EQ(m.tokenizer->vocab_size(), 258);
  EXPECT_EQ(m.model.config.dim, arch.model.dim);
  EXPECT_EQ(m.model.weights.layers[1].w2, written.layers[1].w2);
  EXPECT_EQ(m.model.weights.classifier, written.classifier);

  // A checkpoint has its own tokenizer: a tokenizer file beside it is refused, naming the field.
  const std::string e = ErrorOf([&] { LoadModelFile(path, {Path("tok.bin"), false}); });
  EXPECT_NE(e.find("ModelFileOptions::tokenizer_path"), std::string::npos) << e;
  EXPECT_NE(e.find("carries its own"), std::string::npos) << e;

  // One without a tokenizer loads, unless text must be tokenized.
  const std::string bare = Path("bare.safetensors");
  WriteCheckpoint(bare, arch, 3, false);
  EXPECT_EQ(LoadModelFile(bare, {}).tokenizer, nullptr);
  EXPECT_NE(ErrorOf([&] {
              LoadModelFile(bare, {"", true});
            }).find("carries no tokenizer"),
            std::string::npos);
}

TEST_F(ModelFileTest, DirectoryMeansItsNewestCompleteCheckpoint) {
  const TrainArch arch = SmallArch();
  std::filesystem::create_directories(Path("run"));
  WriteCheckpoint(Path("run/" + StepFileName(2)), arch, 2, true);
  WriteCheckpoint(Path("run/" + StepFileName(4)), arch, 4, true);
  // A newer file named like a checkpoint but cut short: passed over, with a note saying why.
  testing::WriteBytes(Path("run/" + StepFileName(6)), std::string("\x10\0\0\0\0\0\0\0{", 9));
  std::vector<std::string> notes;
  const LoadedModel m = LoadModelFile(Path("run"), {}, &notes);
  EXPECT_EQ(m.header.path, Path("run/" + StepFileName(4)));
  EXPECT_EQ(m.header.step, 4);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find(StepFileName(6)), std::string::npos) << notes[0];
  EXPECT_NE(ErrorOf([&] { LoadModelFile(Path("missing"), {}); }), "");
}

}  // namespace
}  // namespace stretch
