// Position method specs (src/position/method.h): `--method` / `--methods` (ParseMethod,
// ParseSweepMethod of src/eval/sweep.h) and a Hugging Face rope_scaling object
// (MethodFromHfRopeScaling). What parses must print as a canonical spec that parses back to the
// same method, and resolve for a small model and call (ResolveMethod) or be refused by name.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_target.h"
#include "src/eval/sweep.h"
#include "src/position/method.h"

namespace stretch::fuzz {
namespace {

void CheckMethod(const Method& m) {
  const std::string spec = CanonicalSpec(m);
  Method again;
  try {
    again = ParseMethod(spec);
  } catch (const Error& e) {
    Finding("canonical spec '" + spec + "' does not parse: " + e.what());
  }
  if (!(again == m)) Finding("canonical spec '" + spec + "' parses to another method");
  if (CanonicalSpec(again) != spec) Finding("canonical spec '" + spec + "' is not stable");
  (void)MethodName(m);
  RopeGeometry geo;
  geo.train_len = 64;
  geo.rotary_dim = 8;
  for (const int64_t fed : {int64_t{16}, int64_t{64}, int64_t{512}}) {
    ExpectErrorOrSuccess([&] {
      const Method r = ResolveMethod(m, geo, fed);
      (void)ComputeFrequencies(r.rope, geo, CallScale(r.rope, geo, fed), fed);
    });
  }
}

}  // namespace

int FuzzMethod(const uint8_t* data, size_t size) {
  const std::string text(AsText(data, size));
  ExpectErrorOrSuccess([&] { CheckMethod(ParseMethod(text)); });
  ExpectErrorOrSuccess([&] { CheckMethod(ParseSweepMethod(text).method); });
  ExpectErrorOrSuccess([&] { CheckMethod(MethodFromHfRopeScaling(text)); });
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzMethod)
