// A `stretch train` checkpoint (written by src/train/checkpoint.h) read as a model: its header,
// its weights as the Model that src/model's Transformer runs, and its tokenizer, for `stretch
// score`, `generate` and `inspect`, and for the trainer's --resume and --init.
//
// The conversion is exact: the trainer's ModelConfig and weights are the model's, so that the Transformer runs the function
// TrainTransformer<float, KernelAttention>::Forward computes (tests/train/inference_model_test.cc).
//
// What is refused, with the file, the field, what was found and what was expected:
//   - a file that is not safetensors, or safetensors without stretch.format = "stretch-checkpoint",
//     or of another checkpoint version;
//   - a tensor that is neither a parameter of the architecture nor training state (optim.*,
//     rng.*, train.*) nor the tokenizer (tokenizer.model): a checkpoint of a model this code does
//     not know is never read as one it knows;
//   - a missing parameter, or one of the wrong dtype or shape; non-finite KERPLE or SSMax
//     parameters;
//   - a tokenizer whose vocabulary differs from the model's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/io/safetensors.h"
#include "src/io/text.h"
#include "src/io/tokenizer/text_tokenizer.h"
#include "src/io/tokenizer/training_tokenizer.h"
#include "src/model/config.h"
#include "src/model/model_arch.h"

namespace stretch {

// The format's marks (metadata stretch.format and stretch.version) and the tensors a checkpoint
// holds besides the weights (src/train/checkpoint.h writes them).
inline constexpr std::string_view kCheckpointFormat = "stretch-checkpoint";
inline constexpr int kCheckpointVersion = 1;
inline constexpr std::string_view kCheckpointStepTensor = "train.step";
inline constexpr std::string_view kCheckpointTokenizerTensor = "tokenizer.model";
// Metadata stretch.checksum: 16 hex digits, SafetensorsFile::ContentDigest of everything else in
// the file (metadata and tensors), so that any damaged byte is told on reading.
inline constexpr std::string_view kCheckpointChecksumKey = "stretch.checksum";

// Sets the checksum of what `w` holds: call it last, after every tensor and metadata.
void SealCheckpoint(SafetensorsWriter& w);
// Throws stretch::Error naming the file when its checksum does not match its content (a flipped
// bit, a torn or edited file). Files written before checkpoints carried one pass unchecked.
// Reads the whole file.
void VerifyCheckpoint(const SafetensorsFile& f);

// The inference Model of trained weights (the trainer's own struct, taken as it is, less the
// KERPLE parameters of layers without position). `source` names it in reports and errors.
Model InferenceModel(const TrainArch& arch, ModelWeights weights, std::string source);

// True when the file at `path` begins like a safetensors file: an 8-byte little-endian header
// length N with 2 <= N <= the bytes that follow (and the 100 MB cap), then '{'. Reads 9 bytes;
// false for a missing or unreadable path or a directory. llama2.c files never match: their first
// 8 bytes (dim and hidden_dim, or the "ak42" magic and version) read as a length far beyond
// their size.
bool LooksLikeSafetensors(const std::string& path);

// What a checkpoint says about itself, from its header alone (no tensor is read but train.step).
struct CheckpointHeader {
  std::string path;
  TrainArch arch;
  ModelConfig config;  // arch.model
  int64_t step = 0;
  std::string tokenizer_kind;  // "bytes", "sentencepiece", or "" when the file has none
};
// Throws stretch::Error for a file that is not a stretch checkpoint of this version, or of
// another block (see the top of this file).
CheckpointHeader ReadCheckpointHeader(const std::string& path);
CheckpointHeader ReadCheckpointHeader(const SafetensorsFile& file);

// The tokenizer the checkpoint carries (metadata stretch.tokenizer and, for SentencePiece, the
// tensor tokenizer.model), checked against the model's vocabulary size; nullopt when the file has
// none. Throws stretch::Error naming the file for a tokenizer that does not load or does not fit.
// (--init tokenizes its new data with it: a vocabulary trained anew would map ids wrongly.)
std::optional<TrainingTokenizer> ReadCheckpointTokenizer(const SafetensorsFile& file,
                                                         int vocab_size);

struct CheckpointModel {
  CheckpointHeader header;
  Model model;
  // The checkpoint's tokenizer (metadata stretch.tokenizer and, for SentencePiece, the tensor
  // tokenizer.model); nullopt when the file carries none (checkpoints written without one).
  std::optional<TrainingTokenizer> tokenizer;
};
// Loads a checkpoint file: header, every parameter (exact coverage checked), the tokenizer.
CheckpointModel LoadCheckpointModel(const std::string& path);

// Text for scoring, as src/io/text.h's EncodeTextPath with a checkpoint's tokenizer: a file, or a
// directory's *.txt files in name order, each encoded whole on its own (no BOS or EOS inside the
// stream) and concatenated. Throws stretch::Error for a missing path, an empty file, a directory
// without *.txt files.
TextStream EncodeTextPath(const std::string& path, const TrainingTokenizer& tokenizer);
std::string CheckpointTextProtocolText();

// Checkpoints in a training run's directory are named step-NNNNNNNN.safetensors (eight digits).
// "step-00000040.safetensors"
std::string StepFileName(int64_t step);
// The step a file name says: N for "step-NNNNNNNN.safetensors" (eight digits, as StepFileName
// writes), -1 for any other name.
int64_t StepOfFileName(std::string_view name);

// The files named like checkpoints in `dir`, newest (highest step) first; none when `dir` does not
// exist. Their contents are not read.
std::vector<std::pair<int64_t, std::string>> StepFiles(const std::string& dir);

// A run's directory -> its newest complete checkpoint: the step-NNNNNNNN.safetensors with the
// highest step whose safetensors header validates against the file (sizes, offsets) and says
// stretch.format = "stretch-checkpoint" (a half-written file never has the final name: the
// trainer renames it into place). Its content is the loader's to judge: a checkpoint of a block
// this code cannot run is picked, then refused, never skipped for an older one. `skipped`
// (optional) receives a line for each newer file passed over, with the reason. Throws
// stretch::Error when there is none.
std::string NewestCheckpointIn(const std::string& dir, std::vector<std::string>* skipped = nullptr);

// A checkpoint's tokenizer behind the one text interface (src/io/tokenizer/text_tokenizer.h): BOS and EOS
// are the tokenizer's; generated text is decoded with its neighbours (SentencePiece pieces need
// them: a leading space, a multi-byte character split into byte tokens), holding back a trailing
// U+FFFD until the bytes after it arrive.
std::unique_ptr<TextTokenizer> MakeCheckpointTextTokenizer(TrainingTokenizer tokenizer);

}  // namespace stretch
