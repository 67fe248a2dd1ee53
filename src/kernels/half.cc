#include "src/kernels/half.h"

#include <algorithm>
#include <cstring>

#include "src/kernels/attention_simd.h"  // Highway set-up (static target)

namespace stretch {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using DH = hn::Rebind<hwy::float16_t, DF>;
using DU32 = hn::RebindToUnsigned<DF>;
using DU16 = hn::Rebind<uint16_t, DF>;

// bfloat16: the upper half of the float, rounded to nearest even on the lower half (NaN kept a
// quiet NaN: its payload's top bit set, so rounding cannot carry it into inf).
hn::Vec<DU16> NarrowBf16(hn::Vec<DF> v) {
  const DU32 du;
  const auto x = hn::BitCast(du, v);
  const auto abs = hn::And(x, hn::Set(du, 0x7fffffffu));
  const auto nan = hn::Gt(abs, hn::Set(du, 0x7f800000u));
  const auto odd = hn::And(hn::ShiftRight<16>(x), hn::Set(du, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(x, hn::Add(hn::Set(du, 0x7fffu), odd)));
  const auto quiet = hn::Or(hn::ShiftRight<16>(x), hn::Set(du, 0x40u));
  // Each lane is below 2^16: the signed-to-unsigned narrowing (saturating) keeps it as it is.
  const hn::RebindToSigned<DF> di;
  return hn::DemoteTo(DU16(), hn::BitCast(di, hn::IfThenElse(nan, quiet, rounded)));
}

hn::Vec<DF> WidenBf16(hn::Vec<DU16> h) {
  return hn::BitCast(DF(), hn::ShiftLeft<16>(hn::PromoteTo(DU32(), h)));
}

// One vector of N values at `i` (or the last n - i < N through a padded copy).
template <class Body>
void ForEachVector(int64_t n, Body&& body) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  int64_t i = 0;
  for (; i + N <= n; i += N) body(i, N);
  if (i < n) body(i, n - i);
}

}  // namespace

void FloatsToHalves(const float* src, uint16_t* dst, int64_t n, HalfType type) {
  const DF df;
  const size_t N = hn::Lanes(df);
  HWY_ALIGN float in[hn::MaxLanes(df)] = {};
  HWY_ALIGN uint16_t out[hn::MaxLanes(df)] = {};
  ForEachVector(n, [&](int64_t i, int64_t count) {
    const bool full = count == static_cast<int64_t>(N);
    if (!full) std::copy_n(src + i, count, in);
    const auto v = full ? hn::LoadU(df, src + i) : hn::Load(df, in);
    hn::Vec<DU16> h =
        type == HalfType::kF16 ? hn::BitCast(DU16(), hn::DemoteTo(DH(), v)) : NarrowBf16(v);
    if (full) {
      hn::StoreU(h, DU16(), dst + i);
    } else {
      hn::Store(h, DU16(), out);
      std::copy_n(out, count, dst + i);
    }
  });
}

void HalvesToFloats(const uint16_t* src, float* dst, int64_t n, HalfType type) {
  const DF df;
  const size_t N = hn::Lanes(df);
  HWY_ALIGN uint16_t in[hn::MaxLanes(df)] = {};
  HWY_ALIGN float out[hn::MaxLanes(df)] = {};
  ForEachVector(n, [&](int64_t i, int64_t count) {
    const bool full = count == static_cast<int64_t>(N);
    if (!full) std::copy_n(src + i, count, in);
    const auto h = full ? hn::LoadU(DU16(), src + i) : hn::Load(DU16(), in);
    const auto v = type == HalfType::kF16 ? hn::PromoteTo(df, hn::BitCast(DH(), h)) : WidenBf16(h);
    if (full) {
      hn::StoreU(v, df, dst + i);
    } else {
      hn::Store(v, df, out);
      std::copy_n(out, count, dst + i);
    }
  });
}

void RoundThroughHalves(float* x, int64_t n, HalfType type) {
  constexpr int64_t kBlock = 1024;
  uint16_t h[kBlock];
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = std::min(kBlock, n - i);
    FloatsToHalves(x + i, h, m, type);
    HalvesToFloats(h, x + i, m, type);
  }
}

}  // namespace stretch
