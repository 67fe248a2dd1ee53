// The one-line specs of `stretch train --block`, `--position` and `--attention` (and their JSON
// config fields), parsed into a TrainArch.
//
//   --block      llama | gau[:key=S]
//                  llama   pre-norm attention + SwiGLU FFN (the default)
//                  gau     post-norm single-head Gated Attention Unit (src/train/gau_layer.h),
//                          key width S (default min(128, dim)); its expansion width e is
//                          model.hidden_dim
//   --position   rope[:base=B,fraction=P,pi=F|ntk=F] | xpos[:...,gamma=G] | nope | alibi |
//                kerple-log | kerple-power | sandwich[:dim=D,lambda=X] | a relative map
//                  pi=F    position interpolation (Chen et al. 2023): position m rotated as m / F
//                          (model.rope_interpolation)
//                  ntk=F   NTK-aware RoPE: base' = base F^(D/(D-2)), D = the head dim (model.head_dim())
//                          (model.rope_base, the spec's base kept in rope_ntk_base)
//                  F >= 1; one of the two. On xpos they change the rotation only (the decay
//                  keeps the true distances).
//   --attention  a comma list of
//                  keynorm | querynorm | cosine      L2-normalized keys / queries / both
//                  scale=X                           what multiplies q.k (default 1/sqrt(head dim))
//                  logn                              query i's logits times ln(i + 1) / ln L, in
//                                                    training and at inference (trained log-n)
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
// Errors name the spec ("position spec rope:pi=0.5: ..."), the piece, and what is allowed;
// the CLI writes the spec's flag in their place (tools/cli/common.h, WithFlagNames).
#pragma once

#include <string>
#include <string_view>

#include "src/train/transformer_train.h"

namespace stretch {

// Sets arch.model.block (and key_dim; model.dim must be set for its default) from a --block
// spec; FinalizeArch sets the GAU's kernel heads once hidden_dim is known.
void ApplyBlockSpec(std::string_view spec, TrainArch& arch);
// Sets the position scheme and its fields (model.attention.position, model.rope_base, ...) from a
// --position spec. Every field of the scheme the spec does not give goes back to its default,
// except the RoPE base, which a spec without base= keeps. ntk=F needs the sizes (model.dim and
// n_heads, or the GAU key width) set first: it resolves model.rope_base (FinalizeArch).
void ApplyPositionSpec(std::string_view spec, TrainArch& arch);
// Sets the logits (norms, scale, logn, SSMax) and the layers of model.attention (model.n_layers
// must be set) from an --attention spec.
void ApplyAttentionSpec(std::string_view spec, TrainArch& arch);

// The canonical text of what the arch holds (for logs and --help examples).
std::string BlockSpecOf(const TrainArch& arch);
std::string PositionSpecOf(const TrainArch& arch);
std::string LayoutText(const TrainArch& arch);

}  // namespace stretch
