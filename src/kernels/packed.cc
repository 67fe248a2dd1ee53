#include "src/kernels/packed.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "src/core/error.h"
#include "src/kernels/blocks.h"

namespace stretch {

const char* PackedTypeName(PackedType t) {
  switch (t) {
    case PackedType::kF16: return "F16";
    case PackedType::kBF16: return "BF16";
    case PackedType::kQ8_0: return "Q8_0";
    case PackedType::kQ4_0: return "Q4_0";
    case PackedType::kQ4_K: return "Q4_K";
    case PackedType::kQ5_K: return "Q5_K";
    case PackedType::kQ6_K: return "Q6_K";
  }
  return "?";
}

int64_t PackedBlockElems(PackedType t) {
  switch (t) {
    case PackedType::kF16:
    case PackedType::kBF16: return 1;
    case PackedType::kQ8_0: return kQ8_0Elems;
    case PackedType::kQ4_0: return kQ4_0Elems;
    case PackedType::kQ4_K: return kQ4_KElems;
    case PackedType::kQ5_K: return kQ5_KElems;
    case PackedType::kQ6_K: return kQ6_KElems;
  }
  return 1;
}

int64_t PackedBlockBytes(PackedType t) {
  switch (t) {
    case PackedType::kF16:
    case PackedType::kBF16: return 2;
    case PackedType::kQ8_0: return kQ8_0Bytes;
    case PackedType::kQ4_0: return kQ4_0Bytes;
    case PackedType::kQ4_K: return kQ4_KBytes;
    case PackedType::kQ5_K: return kQ5_KBytes;
    case PackedType::kQ6_K: return kQ6_KBytes;
  }
  return 2;
}

PackedMatrix PackedMatrix::RowRange(int64_t r0, int64_t n) const {
  PackedMatrix m = *this;
  m.data = data + r0 * RowBytes();
  m.rows = n;
  return m;
}

namespace {

// Where each block keeps its scales (F16), for the load-time check: offsets within the block.
struct ScaleSpots {
  int count = 0;
  int at[2] = {0, 0};
};
ScaleSpots ScalesOf(PackedType t) {
  switch (t) {
    case PackedType::kQ8_0: return {1, {0, 0}};
    case PackedType::kQ4_0: return {1, {0, 0}};
    case PackedType::kQ4_K:
    case PackedType::kQ5_K: return {2, {0, 2}};  // d, dmin
    case PackedType::kQ6_K: return {1, {208, 0}};
    default: return {};
  }
}

}  // namespace

int64_t FirstNonFiniteScale(PackedType type, const uint8_t* data, int64_t blocks) {
  const ScaleSpots spots = ScalesOf(type);
  const int64_t bb = PackedBlockBytes(type);
  for (int64_t b = 0; b < blocks && spots.count > 0; ++b) {
    for (int s = 0; s < spots.count; ++s) {
      if (!std::isfinite(HalfToFloat(LoadU16(data + b * bb + spots.at[s])))) return b;
    }
  }
  return -1;
}

PackedMatrix MakePackedMatrix(const std::string& name, PackedType type, const uint8_t* data,
                              int64_t bytes, int64_t rows, int64_t cols,
                              std::shared_ptr<const void> owner) {
  const int64_t be = PackedBlockElems(type), bb = PackedBlockBytes(type);
  if (rows < 1 || cols < 1 || cols % be != 0) {
    Fail("tensor {} ({}): shape ({}, {}); its rows must be whole blocks of {} values", name,
         PackedTypeName(type), rows, cols, be);
  }
  const int64_t want = rows * (cols / be) * bb;
  if (bytes != want) {
    Fail(
        "tensor {} ({}, shape ({}, {})): {} bytes, expected {} (a truncated or mislabelled tensor)",
        name, PackedTypeName(type), rows, cols, bytes, want);
  }
  if (const int64_t b = FirstNonFiniteScale(type, data, rows * (cols / be)); b >= 0) {
    Fail(
        "tensor {} ({}): block {} (row {}) has a scale that is NaN or infinite; a corrupt block "
        "is not computed",
        name, PackedTypeName(type), b, b / (cols / be));
  }
  PackedMatrix m;
  m.type = type;
  m.data = data;
  m.rows = rows;
  m.cols = cols;
  m.owner = std::move(owner);
  return m;
}

}  // namespace stretch
