// Field-by-field equality of two model configs, for tests of loaders and writers.
#pragma once

#include <gtest/gtest.h>

#include "src/model/config.h"

namespace stretch::testing {

// The sizes and RoPE settings every file format carries.
inline void ExpectSameConfig(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.hidden_dim, b.hidden_dim);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.seq_len, b.seq_len);
  EXPECT_EQ(a.shared_classifier, b.shared_classifier);
  EXPECT_EQ(a.rope_base, b.rope_base);
  EXPECT_EQ(a.rope_interpolation, b.rope_interpolation);
}

}  // namespace stretch::testing
