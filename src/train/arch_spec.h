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
//                  logn                              query i's logits times ln(n) / ln L, n the
//                                                    keys it sees (i + 1 unless masked), in
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
//                  chunk=C                           every layer chunked attention: the text cut
//                                                    into chunks of C, a query sees its own chunk
//                  gemma3=W/K                        Gemma 3: every K-th layer full attention at
//                                                    the model's RoPE (base, pi), the others a
//                                                    window of W at the local base (10,000, or
//                                                    local-base=B) without interpolation
//                  llama4=C/K                        Llama 4 iRoPE: every K-th layer full
//                                                    attention without RoPE and with temperature
//                                                    tuning (floor C, scale 0.1, or
//                                                    temperature=F/S), the others chunks of C
//                  layers=L1/L2/...                  one entry per layer, the list repeated over
//                                                    the layers; N*L for N copies; an entry joins
//                                                    rope|nope, full|window:W|chunk:C, base:B,
//                                                    pi:F, temp with +
//                  temperature=F/S                   the tuned layers' logits times
//                                                    ln(floor((i + 1) / F) + 1) * S + 1
//                e.g. `keynorm,hwfa=64`, `cosine,scale=10,window=128`, `gemma3=64/6`,
//                `layers=5*window:64+base:10000/full+pi:4`.
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
