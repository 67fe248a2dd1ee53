// Weight matrices kept in their file's type (DESIGN.md, "Weights keep their type"; issue 43): a
// GGUF file's F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K and Q6_K matrices are used where the file's
// mapping holds them, never expanded whole into float32, and the products read them as they are:
//
//   - one row (decode): each output row's blocks are decoded in registers and multiplied into the
//     float32 input as they stream from memory (PackedDotRows), so a token reads the file's bytes
//     once;
//   - many rows (prefill): panels of the matrix are decoded into a float32 buffer that stays in
//     the cache, and the float products of src/kernels/gemm.h multiply them (src/kernels/ops.cc).
//
// The decoded values are exactly ggml's (src/kernels/blocks.h), so a product on a packed matrix
// equals the float32 product on the dequantized matrix within float32 rounding of the sums; the
// float32 path stays the exact one that the double references check.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

namespace stretch {

// (Q4_0 and Q5_K came last: the tests seed their random blocks by the enum's values.)
enum class PackedType : uint8_t { kF16, kBF16, kQ8_0, kQ4_K, kQ6_K, kQ4_0, kQ5_K };

// "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K" (ggml's names).
const char* PackedTypeName(PackedType t);
// Values per block (1 for the 16-bit floats) and bytes per block.
int64_t PackedBlockElems(PackedType t);
int64_t PackedBlockBytes(PackedType t);

// A row-major (rows, cols) matrix, y = W x as everywhere in stretch, each row cols /
// PackedBlockElems blocks, row r at data + r * RowBytes(). It does not own its bytes: `owner`
// keeps them alive (a file's mapping, or a copy when the rows had to be reordered).
struct PackedMatrix {
  PackedType type = PackedType::kF16;
  const uint8_t* data = nullptr;
  int64_t rows = 0, cols = 0;
  std::shared_ptr<const void> owner;

  bool empty() const { return data == nullptr; }
  int64_t RowBytes() const { return cols / PackedBlockElems(type) * PackedBlockBytes(type); }
  int64_t Bytes() const { return rows * RowBytes(); }
  const uint8_t* Row(int64_t r) const { return data + r * RowBytes(); }
  // Rows r0 .. r0 + n - 1, sharing the bytes.
  PackedMatrix RowRange(int64_t r0, int64_t n) const;
};

// A matrix over `bytes` bytes at `data`. Throws stretch::Error naming `name` when cols is not a
// multiple of the type's block, when the bytes are not rows * cols of the type (a truncated
// tensor), or when a block's scale (d, or Q4_K's and Q5_K's dmin) is NaN or infinite: a corrupt
// block is refused when the model loads, never computed.
PackedMatrix MakePackedMatrix(const std::string& name, PackedType type, const uint8_t* data,
                              int64_t bytes, int64_t rows, int64_t cols,
                              std::shared_ptr<const void> owner);

// The first of `blocks` blocks at `data` whose scale (d, or Q4_K's and Q5_K's dmin) is NaN or
// infinite, or -1 when there is none (always -1 for the 16-bit floats, which have no scales).
int64_t FirstNonFiniteScale(PackedType type, const uint8_t* data, int64_t blocks);

// dst (n, cols) = rows r0 .. r0 + n - 1 as float32, the values of src/kernels/blocks.h.
void DequantizeRows(const PackedMatrix& m, int64_t r0, int64_t n, float* dst);

// One thread: y[r - r0] = W[r] . x + beta * y[r - r0] for r0 <= r < r1 (beta 0: y is not read).
// x has W.cols floats.
void PackedDotRows(const PackedMatrix& W, const float* x, float beta, float* y, int64_t r0,
                   int64_t r1);

// The weight matrix W (N, K) of a linear map (src/kernels/ops.h): Real values, or (float
// inference only) a packed matrix. A plain pointer converts to it.
template <typename Real>
struct WeightRef {
  WeightRef(const Real* values) : data(values) {}  // NOLINT: a plain matrix is a WeightRef
  explicit WeightRef(const PackedMatrix* m) : packed(m) {}
  const Real* data = nullptr;
  const PackedMatrix* packed = nullptr;  // when set, `data` is unused
};
// In a parameter list: a WeightRef that does not take part in deducing Real (the pointer
// arguments convert to it).
template <typename Real>
using WeightArg = std::type_identity_t<WeightRef<Real>>;

// "F16 rows, Highway AVX3 (512-bit)": what runs the one-row products, for `stretch bench`.
std::string PackedKernelsText();

}  // namespace stretch
