// The JSON form of an architecture (src/model/model_arch.h), as a checkpoint's stretch.config holds
// it: numbers out of a field's range are refused by name, never cast.
#include "src/model/model_arch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "src/core/error.h"
#include "src/model/config.h"

namespace stretch {
namespace {

TrainArch SmallArch() {
  TrainArch a;
  a.model.dim = 32;
  a.model.hidden_dim = 48;
  a.model.n_layers = 2;
  a.model.n_heads = 4;
  a.model.n_kv_heads = 2;
  a.model.vocab_size = 24;
  a.model.seq_len = 16;
  a.model.attention.layers = {LayerLayout{true, 0}, LayerLayout{true, 0}};
  return a;
}

std::string ErrorOf(const nlohmann::json& j) {
  try {
    ArchFromJson(j, "ckpt.safetensors stretch.config");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Found by fuzz/targets/train_config.cc (fuzz/regressions/train_config/): "vocab_size": 3e32 was
// converted to int by nlohmann::json's cast, undefined behaviour (UBSan stopped on it); 2^32 + 24
// became 24 and 2.5 became 2 without a word.
TEST(ModelArchJson, RefusesNumbersThatAreNotIntegersOfTheField) {
  const nlohmann::json valid = ArchToJson(SmallArch());
  ASSERT_EQ(ArchToJson(ArchFromJson(valid, "t")), valid);
  nlohmann::json j = valid;
  j["vocab_size"] = 3e32;
  EXPECT_EQ(ErrorOf(j),
            "ckpt.safetensors stretch.config: field \"vocab_size\" = 3e+32, expected an integer "
            "in [-2147483648, 2147483647]");
  j = valid;
  j["vocab_size"] = (int64_t{1} << 32) + 24;
  EXPECT_EQ(ErrorOf(j),
            "ckpt.safetensors stretch.config: field \"vocab_size\" = 4294967320, expected an "
            "integer in [-2147483648, 2147483647]");
  j = valid;
  j["layers"] = 2.5;
  EXPECT_EQ(ErrorOf(j),
            "ckpt.safetensors stretch.config: field \"layers\" = 2.5, expected an integer in "
            "[-2147483648, 2147483647]");
  j = valid;
  j["dim"] = -32;  // in range: ValidateArch refuses it with its own message
  EXPECT_NE(ErrorOf(j).find("dim"), std::string::npos);
}

TEST(ModelArchJson, UnsignedFieldsRefuseNegativeNumbers) {
  const nlohmann::json j = {{"seed", -1}, {"big", 18446744073709551615ull}};
  EXPECT_EQ(JsonField<uint64_t>(j, "big", "t"), 18446744073709551615ull);
  try {
    JsonField<uint64_t>(j, "seed", "t");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "t: field \"seed\" = -1, expected an integer in [0, 18446744073709551615]");
  }
  EXPECT_THROW(JsonField<int64_t>(j, "big", "t"), Error);
}

}  // namespace
}  // namespace stretch
