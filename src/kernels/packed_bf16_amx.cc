// Products of many rows on BF16 matrices through oneDNN's bfloat16 matmul, where oneDNN runs it
// on AMX tiles (src/kernels/packed_bf16.h says when it is used and what it computes).
//
// The operands as oneDNN's plain memory descriptors (dims and strides, row-major C):
//   src      x rounded to bfloat16, dims {T, K}, strides {K, 1};
//   weights  rows r0 .. r1 - 1 of W (N rows of K values), read in place as the (K, n) matrix W^T:
//            dims {K, n}, strides {1, K} (oneDNN packs them into its tiles' layout per execution);
//   dst      y, float32, dims {T, n}, strides {ldy, 1}; beta != 0 as a "sum" post-op of scale beta.
// Each product of two bfloat16 values is exact in float32 and the tiles add them in float32
// (TDPBF16PS), the same sums as VDPBF16PS in another order.
//
// Measured on one core of this session's Intel Xeon (AMX, AVX512_BF16), 512 rows of x times an
// 8192 x 2048 and a 2048 x 8192 BF16 matrix, 5 alternations in one process: oneDNN's matmul
// (brg:avx512_core_amx_bf16) 370-490 GFLOP/s, this project's VDPBF16PS kernel 69-78, oneDNN's
// f32 sgemm on the same values 115-141. Prefill of 512 tokens of the Llama-3.2-1B shape's BF16
// file on 2 threads there, `stretch bench --case prefill`, 3 rounds in alternation with
// STRETCH_BF16_MATMUL=own: 209-218 tokens/s against 45-58.
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <tuple>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/kernels/packed_bf16.h"

namespace stretch {

namespace {

using dnnl::memory;

const dnnl::engine& Engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

memory::desc Plain(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
                   memory::data_type type) {
  return memory::desc(memory::dims{rows, cols}, type, memory::dims{row_stride, col_stride});
}

dnnl::matmul::primitive_desc Describe(int64_t T, int64_t n, int64_t K, int64_t ldy, float beta) {
  dnnl::primitive_attr attr;
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::desc d(Plain(T, K, K, 1, memory::data_type::bf16),
                             Plain(K, n, 1, K, memory::data_type::bf16),
                             Plain(T, n, ldy, 1, memory::data_type::f32));
  return dnnl::matmul::primitive_desc(d, attr, Engine());
}

// oneDNN's matmul where it chooses AMX tiles for a product of prefill's kind, unless the
// environment says otherwise.
bool Choose() {
  const char* env = std::getenv("STRETCH_BF16_MATMUL");
  if (env != nullptr && *env != '\0') {
    const std::string_view v(env);
    if (v == "own") return false;
    if (v == "onednn") return true;
    Fail(
        "STRETCH_BF16_MATMUL: found '{}', expected onednn or own (or unset: oneDNN where it runs "
        "on AMX tiles)",
        v);
  }
  try {
    const std::string impl = Describe(64, 256, 256, 256, 0.0f).impl_info_str();
    return impl.find("amx") != std::string::npos;
  } catch (const dnnl::error&) {
    return false;  // no bfloat16 matmul here: this project's kernel
  }
}

}  // namespace

bool Bf16MatmulForManyRows() {
  static const bool chosen = Choose();
  return chosen;
}

void Bf16MatmulRows(const PackedMatrix& W, const uint16_t* xb, int64_t T, float beta, float* y,
                    int64_t ldy, int64_t r0, int64_t r1) {
  STRETCH_CHECK(W.type == PackedType::kBF16 && 0 <= r0 && r0 <= r1 && r1 <= W.rows && T >= 0,
                "bf16 matmul: {} matrix ({}, {}), rows {}..{}, {} rows of x",
                PackedTypeName(W.type), W.rows, W.cols, r0, r1, T);
  const int64_t n = r1 - r0, K = W.cols;
  if (n == 0 || T == 0) return;
  // A primitive per shape, per thread (each calling thread executes its own; oneDNN caches the
  // generated kernels across them).
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, float>;
  thread_local std::map<Key, dnnl::matmul> made;
  const Key key{T, n, K, ldy, beta};
  auto it = made.find(key);
  try {
    if (it == made.end()) {
      if (made.size() >= 64) made.clear();  // prompts of many lengths: keep a bounded few
      it = made.emplace(key, dnnl::matmul(Describe(T, n, K, ldy, beta))).first;
    }
    const dnnl::engine& engine = Engine();
    thread_local dnnl::stream stream(engine);
    // oneDNN takes non-const handles; it only reads src and weights.
    memory src(Plain(T, K, K, 1, memory::data_type::bf16), engine, const_cast<uint16_t*>(xb));
    memory weights(Plain(K, n, 1, K, memory::data_type::bf16), engine,
                   const_cast<uint8_t*>(W.Row(r0)));
    memory dst(Plain(T, n, ldy, 1, memory::data_type::f32), engine, y);
    it->second.execute(stream,
                       {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    stream.wait();
  } catch (const dnnl::error& e) {
    Fail("oneDNN's bfloat16 matmul of {} rows by rows {}..{} of a {} x {} BF16 matrix: {}", T, r0,
         r1, W.rows, W.cols, e.what());
  }
}

}  // namespace stretch
