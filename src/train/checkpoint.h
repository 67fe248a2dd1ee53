// stretch checkpoints: one safetensors file (src/io/safetensors.h) holding
//   tensors   every parameter by its ModelWeightsOf::ForEach name (F32, (out, in) for matrices), AdamW's
//             step and moments (optim.adamw.*), the batch stream's RNG state (rng.data, U64[4]),
//             and the tokenizer's serialized model when it has one (tokenizer.model, U8);
//   metadata  stretch.format = "stretch-checkpoint", stretch.version = "1",
//             stretch.config = the architecture as JSON (sizes, position scheme, logits, layer
//             layout), stretch.train = the trainer's options as JSON, stretch.tokenizer = the
//             tokenizer's description as JSON, stretch.build = the build that wrote it
//             (`stretch --version`; absent in checkpoints of older builds) (written by the
//             caller, src/train/train_run.cc).
// Written atomically (SafetensorsWriter::Write: temporary file, fsync, rename), so a crash leaves
// either the previous checkpoint or the new one, never a broken file.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>

#include "src/io/safetensors.h"
#include "src/io/stretch_checkpoint.h"
#include "src/model/model_arch.h"
#include "src/train/data.h"
#include "src/train/trainer.h"

namespace stretch {

nlohmann::json TrainerOptionsToJson(const TrainerOptions& o);
TrainerOptions TrainerOptionsFromJson(const nlohmann::json& j, const std::string& what);

// Extra content a caller stores with the trainer's state (the tokenizer).
struct CheckpointExtras {
  std::map<std::string, std::string> metadata;  // e.g. stretch.tokenizer
  std::string tokenizer_model;                  // bytes; empty: none
};

void SaveCheckpoint(Trainer& trainer, const std::string& path, const CheckpointExtras& extras = {});

// The file's architecture and options, checked for format and version.
struct CheckpointInfo {
  TrainArch arch;
  TrainerOptions options;
  int64_t step = 0;
};
CheckpointInfo ReadCheckpointInfo(const SafetensorsFile& file);

// Restores parameters, optimizer state and the batch stream's RNG into a trainer built with the
// file's architecture; throws stretch::Error when the architecture differs or a tensor is missing.
void LoadCheckpointInto(Trainer& trainer, const SafetensorsFile& file);

// Parameters only (fine-tuning from a checkpoint with another position scheme, --init): every
// tensor of `trainer` must exist in the file with the same shape; KERPLE parameters that the file
// lacks keep their initialization.
void LoadParamsInto(Trainer& trainer, const SafetensorsFile& file);

}  // namespace stretch
