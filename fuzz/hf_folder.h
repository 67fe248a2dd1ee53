// How the hf_model target lays a Hugging Face folder out in one input (fuzz/targets/hf_model.cc),
// shared with the seed writer that makes its seeds (fuzz/seed_writer.cc).
#pragma once

#include "src/io/hf_model.h"

namespace stretch::fuzz {

// The shards' names when the folder is sharded (the index says which tensor is where).
inline constexpr const char* kHfShardFiles[2] = {"model-00001-of-00002.safetensors",
                                                 "model-00002-of-00002.safetensors"};
// The input's parts, in order (split by SplitParts, fuzz/fuzz_target.h).
inline constexpr const char* kHfFolderParts[5] = {kHfConfigFile, kHfWeightsFile, kHfIndexFile,
                                                  kHfShardFiles[0], kHfShardFiles[1]};

}  // namespace stretch::fuzz
