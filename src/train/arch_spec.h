// The one-line specs of `stretch train --block`, `--position` and `--attention` (and their JSON
// config fields), parsed into a TrainArch.
//
//   --block      llama | gau[:key=S]
//                  llama   pre-norm attention + SwiGLU FFN (the default)
//                  gau     post-norm single-head Gated Attention Unit (src/train/gau_layer.h),
//                          key width S (default min(128, dim)); its expansion width e is
//                          model.hidden_dim
//   --position   rope[:base=B] | nope | alibi | kerple-log | kerple-power
//   --attention  a comma list of
//                  keynorm | querynorm | cosine      L2-normalized keys / queries / both
//                  scale=X                           what multiplies q.k (default 1/sqrt(head dim))
//                  full                              every layer full causal attention (default)
//                  window=W                          every layer a sliding window of W
//                  hwfa=W                            HWFA: every layer but the last a window of W
//                                                    with the position scheme; the last full
//                                                    attention without it (NoPE)
//                  hwfa2=W/K                         windowed layers, and every K-th layer (the
//                                                    K-th, 2K-th, ...) full attention
//                  swan=W/K                          SWAN-style: every K-th layer full attention
//                                                    without position (NoPE), the others windowed
//                                                    with the position scheme
//                e.g. `keynorm,hwfa=64`, `cosine,scale=10,window=128`.
// Errors name the flag, the piece, and what is allowed.
#pragma once

#include <string>
#include <string_view>

#include "src/train/transformer_train.h"

namespace stretch {

// Sets arch.block (and gau_key_dim; model.dim must be set for its default) from a --block spec.
void ApplyBlockSpec(std::string_view spec, TrainArch& arch);
// Sets arch.position (and model.rope_base) from a --position spec.
void ApplyPositionSpec(std::string_view spec, TrainArch& arch);
// Sets arch.logits and arch.layers (model.n_layers must be set) from an --attention spec.
void ApplyAttentionSpec(std::string_view spec, TrainArch& arch);

// The canonical text of what the arch holds (for logs and --help examples).
std::string BlockSpecOf(const TrainArch& arch);
std::string PositionSpecOf(const TrainArch& arch);
std::string LayoutText(const TrainArch& arch);

}  // namespace stretch
