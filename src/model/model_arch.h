// The architecture of a model stretch trains (TrainArch, src/model/config.h) as values from
// outside: its checks (sizes, layer list, windows, position variants and the combinations that
// are refused, with the field, the value and what is allowed), what depends on the sizes (the
// GAU's kernel heads, NTK's base), and its JSON form (a checkpoint's stretch.config).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "src/core/error.h"
#include "src/model/config.h"

namespace stretch {

// Checks the architecture (sizes, layer list, windows); throws stretch::Error naming the field.
void ValidateArch(const TrainArch& arch);
// What is wrong with the layer list's entries (windows, chunks, a layer's own RoPE base and pi,
// the temperature tuning), "layer 3: ...", or "" when nothing.
std::string LayerLayoutProblem(const AttentionLayout& layout);

// Fills what depends on the sizes: the GAU's kernel heads (E / S) and NTK's base
// (model.rope_base from rope_ntk_base and rope_ntk at D = head_dim()). Idempotent; call it after
// the specs and before ValidateArch. Throws stretch::Error when NTK cannot apply (D < 4: the
// exponent D / (D - 2)).
void FinalizeArch(TrainArch& arch);
// NTK-aware base: base * F^(D / (D - 2)) (HF _compute_ntk_parameters), rounded to float as
// ModelConfig::rope_base holds it.
float NtkRopeBase(double base, double factor, int rotary_dim);

// The JSON form, as checkpoints store it in stretch.config. ArchFromJson throws stretch::Error
// naming `what` (e.g. the file) and the field when a value is missing, of the wrong type or out
// of range (ValidateArch).
nlohmann::json ArchToJson(const TrainArch& arch);
TrainArch ArchFromJson(const nlohmann::json& j, const std::string& what);

// Checks a model's attention layout against its sizes and weights (one entry per layer, windows
// >= 0, KERPLE layers and SSMax with position_heads() finite parameters each and others without,
// a positive finite scale, a rope fraction in (0, 1], XPOS's and Sandwich's settings, the GAU's
// sizes).
// Throws stretch::Error naming the model's source, the layer and the field.
void ValidateAttentionLayout(const Model& model);

// The config's names: "llama", "gau"; "rope", "nope", "alibi", "kerple-log", "kerple-power",
// "sandwich", "xpos" (RoPE with XPOS's decay).
const char* ArchBlockName(ModelBlock block);
const char* ArchPositionName(const AttentionLayout& layout);

// j[key] as a T; throws stretch::Error naming `what` and the field when it is missing or of the
// wrong type, or, for an integer T, not an integer in T's range (nlohmann::json converts a
// number of another kind or size with a cast: 2.5 would become 2, 2^32 + 1 an int's 1, and
// 1e30 is undefined behaviour).
template <typename T>
T JsonField(const nlohmann::json& j, const char* key, const std::string& what) {
  if (!j.is_object() || !j.contains(key)) Fail("{}: missing field \"{}\"", what, key);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const nlohmann::json& v = j.at(key);
    const bool fits =
        v.is_number_unsigned()
            ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
        : v.is_number_integer() ? std::in_range<T>(v.get<int64_t>())
                                : false;
    if (!fits) {
      Fail("{}: field \"{}\" = {}, expected an integer in [{}, {}]", what, key, v.dump(),
           std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
    }
  }
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    Fail("{}: field \"{}\" = {} has the wrong type ({})", what, key, j.at(key).dump(), e.what());
  }
}

}  // namespace stretch
