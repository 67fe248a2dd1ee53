// safetensors files (src/io/safetensors.h): the header's JSON, every tensor's fields and
// offsets, then every tensor's bytes read as the loaders read them.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_target.h"
#include "src/io/safetensors.h"

namespace stretch::fuzz {

int FuzzSafetensors(const uint8_t* data, size_t size) {
  const std::string path = WriteScratch("fuzz.safetensors", data, size);
  ExpectErrorOrSuccess([&] {
    const SafetensorsFile file(path);
    for (const auto& [key, value] : file.metadata()) (void)file.GetMetadata(key);
    for (const SafetensorsTensor& t : file.tensors()) {
      // Bounded: the header was checked against the file's size before this is reached.
      std::vector<std::byte> bytes(static_cast<size_t>(t.bytes()));
      file.ReadBytesInto(t.name, bytes);
      if (t.dtype == SafetensorsDtype::kF32) (void)file.Read<float>(t.name, t.shape);
      (void)FormatShape(t.shape);
    }
  });
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzSafetensors)
