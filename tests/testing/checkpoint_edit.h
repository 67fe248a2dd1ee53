// Rewriting a stretch checkpoint in a test: its metadata and tensors changed by a callback, then
// sealed with a fresh checksum (src/io/stretch_checkpoint.h), as a program that knows the format
// would write it. What the test then checks is the loaders' own checks of the content (a block
// that does not match the tensors, a NaN weight, a step that disagrees), not the checksum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "src/io/safetensors.h"
#include "src/io/stretch_checkpoint.h"

namespace stretch::testing {

struct TensorBytes {
  std::string name;
  SafetensorsDtype dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};

using CheckpointEdit =
    std::function<void(std::map<std::string, std::string>& metadata, std::vector<TensorBytes>&)>;

// `from` and `to` may be the same file.
inline void EditCheckpoint(const std::string& from, const std::string& to,
                           const CheckpointEdit& edit) {
  std::vector<TensorBytes> tensors;
  std::map<std::string, std::string> metadata;
  {
    const SafetensorsFile f(from);
    metadata = f.metadata();
    for (const SafetensorsTensor& t : f.tensors()) {
      TensorBytes c{t.name, t.dtype, t.shape,
                    std::vector<std::byte>(static_cast<size_t>(t.bytes()))};
      f.ReadBytesInto(t.name, c.bytes);
      tensors.push_back(std::move(c));
    }
  }
  edit(metadata, tensors);
  SafetensorsWriter w;
  for (const TensorBytes& t : tensors) w.AddRaw(t.name, t.dtype, t.shape, t.bytes);
  for (const auto& [k, v] : metadata) w.SetMetadata(k, v);
  SealCheckpoint(w);
  std::filesystem::create_directories(std::filesystem::path(to).parent_path());
  w.Write(to);
}

}  // namespace stretch::testing
