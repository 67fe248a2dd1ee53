// Synthetic copy documents for training small models that retrieve, and the copy readout that
// measures whether they do. Small models trained on prose alone never learn to copy (issue 41:
// induction heads emerge from natural text only after billions of tokens); rows that can only be
// predicted by copying teach it in a few million tokens.
//
// Every row is T + 1 tokens (T fed positions, the last target), like a training window. Random
// strings are drawn from two alphabets whose characters are each encoded alone through the run's
// tokenizer (as passkey digits are, src/io/passkey.cc), so lengths below are in tokens: with the
// bytes tokenizer one token per character, with SentencePiece a character's tokens concatenated
// (a string or gap is cut to its exact token length, so it may end inside a character's tokens).
//
//   periodic   BOS S S S ...                  S: s random string tokens, repeated until the row is
//                                             full (the last repeat cut at the row's end); S's
//                                             characters are distinct while the alphabet lasts
//                                             (26 letters), so that one token finds its place in
//                                             the previous repeat: the easiest copying, which a
//                                             small model learns first (the gapped rows' strings,
//                                             drawn with replacement, then need longer matches)
//   gapped     BOS S G1 S G2 S ...            G_i: g_i random gap tokens; the gap alphabet has no
//                                             token with the string alphabet, so a gap never holds
//                                             any part of the answer. g_1 uniform in [0, T - 2s],
//                                             so the second S lies wholly inside the row and the
//                                             copy distance s + g_1 spans [s, T - s]; later gaps
//                                             drawn the same way, the last repeat cut at the end
//   textcopy   a window W of training text    with W[a + d, a + d + s) := W[a, a + s): a span of
//                                             the text pasted again d tokens later (overwriting
//                                             the text there); a uniform in [1, T + 1 - 2s], d
//                                             uniform in [s, T + 1 - s - a], so the paste ends
//                                             inside the row and never overlaps its source
//   randcopy   a window W of training text    with a random string R (string alphabet) written at
//                                             W[a, a + s) and again at W[a + d, a + d + s), a and d
//                                             drawn as textcopy's: no delimiter marks where R or its
//                                             copy begins (gapped rows' gaps do: a model can copy
//                                             them by counting from the gap's end, and then fails
//                                             to copy a string met inside prose, as the retrieval
//                                             protocols place it), so the copy is predicted only by
//                                             matching R's tokens, inside prose
//   textperiodic BOS P P P ...                P: s tokens of a window of training text (from a
//                                             uniform start), repeated until the row is full: prose
//                                             that pays to copy (a model that copies random strings
//                                             inside prose may still leave prose itself to its
//                                             language model; issue 41)
//   textdecoy  a textcopy row with decoys:   m pieces of the copied span S, each S[u, u + j) with
//              m uniform in [2, 6], j in      j + 1 <= s, written over the text outside the source
//              [2, 4], u in [0, s - j - 1]    and the copy, with the token after each (also outside
//                                             them) unlike S[u + j]. A decoy matches the last j
//                                             tokens before a copy token and then goes on
//                                             otherwise, so the copy is predicted only by matching
//                                             more than j tokens back: what prose needs in a long
//                                             context, where a query's last two or three bytes
//                                             recur many times (docs/training.md, tenth round). A
//                                             decoy that finds no free place in 32 draws is left
//                                             out
//   textfar    a textcopy row whose distance   d uniform in [ceil(T / 2), T - s] (the far half of
//              is far                         the distances s..T - s a row of T + 1 tokens holds),
//                                             then a uniform in [1, T + 1 - s - d]: textcopy's d is
//                                             triangular (a distance near T comes only with a
//                                             source at the row's start), so a model trained on it
//                                             copies from near L back half as well as from L/2
//                                             (docs/training.md, seventh round), which is where
//                                             YaRN and Self-Extend put far keys
//   textedge   a textfar row reaching the     d uniform in [ceil(T / 2), T - 2], a uniform in
//              row's end                      [1, T - 1 - d], the copy cut at the row's end (its
//                                             first min(s, T + 1 - a - d) tokens): the distances
//                                             T - s .. T - 2, which textfar never trains, are
//                                             where Self-Extend's smallest group and YaRN put the
//                                             farthest keys (docs/training.md, fifteenth round)
//   passkey    src/io/passkey.h, unchanged
//
// s is uniform in [span_min, span_max] (CopySpans; by default T/16 .. 5T/16, the 8..40 at
// T = 128). The first token of a copy is unpredictable (where a gap ends is random), so a readout
// scores a copy's tokens after its first: s - 1 targets per row.
//
// Controls (the readout's; never trained on). A control row has the layout of its copy row, drawn
// from the same Rng state, with the copy replaced by tokens that cannot be copied:
//   gapped control     the second S replaced by a fresh string S' of the same length from the
//                      string alphabet, redrawn until it shares no span of kControlSpan tokens with
//                      anything before it (so nothing before it can be copied to predict it);
//   textcopy control   the pasted span replaced by the same number of tokens of another window of
//                      text (prose repeats words, so this measures what language alone predicts);
//   randcopy control   the second R replaced by a fresh string of the same length, redrawn as the
//                      gapped control's is.
//
// Mix. Each training row is, by one UniformDouble() per row, passkey, periodic, gapped, textcopy,
// randcopy, textperiodic, textdecoy, textfar or textedge (cumulative shares in that order), else a window of
// text; a window is drawn for every row first (as passkey rows always did), so a run with passkey
// rows alone draws exactly what it drew before the other kinds existed.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/rng.h"
#include "src/io/passkey.h"

namespace stretch {

// The alphabets' default characters: lowercase letters for strings, uppercase letters and a few
// marks for gaps (disjoint, so a gap never spells part of a string).
inline constexpr std::string_view kCopyStringChars = "abcdefghijklmnopqrstuvwxyz";
inline constexpr std::string_view kCopyGapChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZ.,;:-";

// A control's fresh string shares no span this long with the row before it.
inline constexpr int64_t kControlSpan = 4;

// A textdecoy row's decoys: how many are drawn, how long each is, how many places each tries.
inline constexpr int64_t kMinDecoys = 2;
inline constexpr int64_t kMaxDecoys = 6;
inline constexpr int64_t kMinDecoyLength = 2;
inline constexpr int64_t kMaxDecoyLength = 4;
inline constexpr int kDecoyTries = 32;

// Each character's tokens, encoded alone.
struct CopyAlphabets {
  std::vector<std::vector<int>> string, gap;
  // 0: every string draws from the whole string alphabet. k >= 2: each periodic or gapped row
  // first draws a size a uniform in [k, |string alphabet|], then a random subset of a characters,
  // and its strings use only those. With few characters a token recurs often in the row, so one
  // token (or two) no longer tells where a copy's source is: the row is copied only by matching
  // several preceding tokens at once, as prose needs (bytes repeat in prose; issue 41: models
  // trained on the whole alphabet copied random strings but not prose). A control's fresh string
  // draws from the whole alphabet: a subset of 3 letters may hold no string of 40 free of the
  // source's 4-token spans (the readout's rows use the whole alphabet anyway).
  int64_t draw_min = 0;
};

// Encodes both alphabets. Throws stretch::Error for an alphabet of fewer than 2 characters, a
// character that encodes to no token, or a token that both alphabets use (naming the characters).
CopyAlphabets EncodeCopyAlphabets(const TextEncoder& encode,
                                  std::string_view string_chars = kCopyStringChars,
                                  std::string_view gap_chars = kCopyGapChars);

// The range of string lengths s, in tokens.
struct CopySpans {
  int64_t min = 0;
  int64_t max = 0;
};

// The default spans for rows of T + 1 tokens: T/16 .. 5T/16, at least 2 (8..40 at T = 128).
CopySpans DefaultCopySpans(int64_t T);

// Throws stretch::Error unless 2 <= min <= max and 2 max <= T - 1 (a gapped row holds two copies
// and BOS), naming `what` (the option that set them).
void CheckCopySpans(const CopySpans& spans, int64_t T, const std::string& what);

// The kinds of training rows, and a row's share of each.
enum class RowKind {
  kText,
  kPasskey,
  kPeriodic,
  kGapped,
  kTextCopy,
  kRandCopy,
  kTextPeriodic,
  kTextDecoy,
  kTextFar,
  kTextEdge
};
std::string_view RowKindName(RowKind kind);

struct CopyMix {
  double passkey = 0.0;
  double periodic = 0.0;
  double gapped = 0.0;
  double textcopy = 0.0;
  double randcopy = 0.0;
  double textperiodic = 0.0;
  double textdecoy = 0.0;
  double textfar = 0.0;
  double textedge = 0.0;
  double text() const;
  bool HasCopy() const;
  bool NeedsAlphabets() const { return periodic > 0.0 || gapped > 0.0 || randcopy > 0.0; }
  bool operator==(const CopyMix&) const = default;
};

// Every kind but text, with its share, in the order a row's draw walks them (RowKindOf): a new
// kind goes last, so that a mix without it draws exactly what it drew before.
struct CopyMixKind {
  RowKind kind;
  double CopyMix::*share;
};
inline constexpr std::array<CopyMixKind, 9> kCopyMixKinds = {{
    {RowKind::kPasskey, &CopyMix::passkey},
    {RowKind::kPeriodic, &CopyMix::periodic},
    {RowKind::kGapped, &CopyMix::gapped},
    {RowKind::kTextCopy, &CopyMix::textcopy},
    {RowKind::kRandCopy, &CopyMix::randcopy},
    {RowKind::kTextPeriodic, &CopyMix::textperiodic},
    {RowKind::kTextDecoy, &CopyMix::textdecoy},
    {RowKind::kTextFar, &CopyMix::textfar},
    {RowKind::kTextEdge, &CopyMix::textedge},
}};

// Parses "text=0.5,textcopy=0.3,gapped=0.1,passkey=0.1": names from text, passkey, periodic,
// gapped, textcopy, randcopy, textperiodic, textdecoy, textfar, textedge, each at most once, shares in
// [0, 1]; text is what the others leave (given, the shares must add up to 1 within 1e-9). Throws
// stretch::Error naming `what`, the entry and what was expected.
CopyMix ParseCopyMix(std::string_view text, const std::string& what);
// The copy kinds' shares as ParseCopyMix reads them, "periodic=0.2,gapped=0.1" (passkey and text
// left out: a run stores its passkey share on its own); "" when none.
std::string CopyMixText(const CopyMix& mix);

// The kind of the row whose draw is u in [0, 1): the kinds of kCopyMixKinds by cumulative share,
// else text.
RowKind RowKindOf(const CopyMix& mix, double u);

// A decoy of a textdecoy row: tokens[at, at + length) = tokens[source + offset, ... + length).
struct CopyDecoy {
  int64_t at = 0;
  int64_t offset = 0;
  int64_t length = 0;
};

// One generated row and where its copy is.
struct CopyRow {
  std::vector<int> tokens;        // (T + 1)
  int64_t source = 0;             // index in tokens of the copied span's first token
  int64_t copy = 0;               // index in tokens of the copy's (or the control's) first token
  int64_t span = 0;               // s
  std::vector<int64_t> scored;    // positions p whose target tokens[p + 1] a readout scores:
                                  // the copy's tokens after its first, ascending
  std::vector<CopyDecoy> decoys;  // textdecoy rows: the decoys written, by position
};

enum class CopyRole { kCopy, kControl };

// Periodic row (layout at the top): draws s, then the string.
CopyRow MakePeriodicRow(const CopyAlphabets& alphabets, const CopySpans& spans, int bos, int64_t T,
                        Rng& rng);
// Gapped row: draws s, S, g_1, G1, then (kControl) S' until it shares no kControlSpan-token span
// with the row before it, then the later gaps and repeats. The same Rng state gives a copy and a
// control with the same s, S, g_1 and G1. Throws stretch::Error if no fresh string is found in
// 10000 draws (an alphabet whose characters share tokens among themselves).
CopyRow MakeGappedRow(const CopyAlphabets& alphabets, const CopySpans& spans, int bos, int64_t T,
                      Rng& rng, CopyRole role = CopyRole::kCopy);
// Textcopy row from `window` (T + 1 tokens): draws s, a, d. kControl pastes the first s tokens of
// `other` (another window, at least s tokens) instead of the source span.
CopyRow MakeTextCopyRow(std::span<const int> window, const CopySpans& spans, int64_t T, Rng& rng,
                        CopyRole role = CopyRole::kCopy, std::span<const int> other = {});
// Textfar row: a textcopy row whose distance is drawn first, from the far half of those the row
// can hold (layout at the top); the same roles and throws as MakeTextCopyRow.
CopyRow MakeTextFarRow(std::span<const int> window, const CopySpans& spans, int64_t T, Rng& rng,
                       CopyRole role = CopyRole::kCopy, std::span<const int> other = {});
// Textedge row: a textfar row whose distance reaches T - 2, the copy cut at the row's end (its
// span the tokens that fit); the same roles and throws.
CopyRow MakeTextEdgeRow(std::span<const int> window, const CopySpans& spans, int64_t T, Rng& rng,
                        CopyRole role = CopyRole::kCopy, std::span<const int> other = {});

// Textperiodic row from `window` (T + 1 tokens): draws s, then the start of P in [1, T + 1 - s].
CopyRow MakeTextPeriodicRow(std::span<const int> window, const CopySpans& spans, int bos, int64_t T,
                            Rng& rng);
// Textdecoy row from `window` (T + 1 tokens): the textcopy row that the same Rng state gives,
// then its decoys (the layout at the top).
CopyRow MakeTextDecoyRow(std::span<const int> window, const CopySpans& spans, int64_t T, Rng& rng);

// Randcopy row from `window` (T + 1 tokens): draws s, a, d as MakeTextCopyRow, then R from the
// row's string alphabet (CopyAlphabets::draw_min); kControl writes a fresh string at the copy,
// redrawn until it shares no kControlSpan-token span with the row before it.
CopyRow MakeRandCopyRow(std::span<const int> window, const CopyAlphabets& alphabets,
                        const CopySpans& spans, int64_t T, Rng& rng,
                        CopyRole role = CopyRole::kCopy);

// The readout's fixed held-out rows: n rows of each kind, drawn from their own Rng (never the
// training stream) and text windows of held-out documents, built once per run.
struct CopyProbeRows {
  std::vector<int> tokens;                   // (n, T + 1)
  std::vector<std::vector<int64_t>> scored;  // (n) positions scored in each row
  int64_t rows() const { return static_cast<int64_t>(scored.size()); }
};
struct CopyProbe {
  int64_t T = 0;
  CopyProbeRows gapped, gapped_control, textcopy, textcopy_control, randcopy, randcopy_control,
      passkey;
};

// Builds the probe: n gapped rows and their controls, n textcopy and n randcopy rows and their
// controls from
// `windows` (held-out text windows of T + 1 tokens; none: no textcopy rows), n passkey trials at
// depths (i + 0.5) / n (when `passkey` is given and fits T; filler from the windows). Draws from
// Rng(seed) alone.
CopyProbe MakeCopyProbe(const CopyAlphabets& alphabets, const CopySpans& spans, int bos, int64_t T,
                        int64_t n, const std::vector<std::vector<int>>& windows,
                        const PasskeyPieces* passkey, uint64_t seed);

// Next-token predictions of B rows of T + 1 tokens: (B, T) ids, entry (b, p) the prediction for
// tokens[b (T + 1) + p + 1] (a model's argmax; Trainer::Predict).
using TokenPredictor = std::function<std::vector<int>(const std::vector<int>& tokens, int64_t B)>;

// A share of hits with its count, and its 95% Wilson interval. The hits may come in rows (a
// readout row's scored tokens): a row's tokens are correlated (a model that finds a copy's source
// copies most of it), so the interval counts EffectiveN() trials, not n.
struct Proportion {
  int64_t hits = 0;
  int64_t n = 0;
  // Per row, when the hits were counted in rows (AddRow); empty: n independent trials.
  std::vector<int64_t> row_hits, row_n;
  double value() const { return n > 0 ? static_cast<double>(hits) / static_cast<double>(n) : 0; }
  // Adds a row of `row_count` trials with `row_hit` hits.
  void AddRow(int64_t row_hit, int64_t row_count);
  // n divided by the design effect of the rows (Kish): the ratio estimator's variance between
  // rows, m / (m - 1) sum_i (h_i - p n_i)^2 / n^2 for m rows, over the binomial's p (1 - p) / n;
  // the design effect is at least 1 (rows never count for more than their trials), and is 1
  // when either variance is 0 (p = 0 or 1, or fewer than 2 rows: nothing to estimate it from).
  double EffectiveN() const;
  double low() const;  // Wilson at EffectiveN()
  double high() const;
};

struct CopyReadout {
  Proportion copy, copy_control;          // gapped rows' scored tokens; their controls'
  Proportion textcopy, textcopy_control;  // textcopy rows'; their controls'
  Proportion randcopy, randcopy_control;  // randcopy rows'; their controls'
  Proportion passkey_digits;              // the answers' key tokens
  Proportion passkey_keys;                // whole keys read back exactly
};

// Predicts every probe row with `predict` and counts the scored targets it gets right. Kinds
// without rows count nothing (n = 0).
CopyReadout ReadCopy(const CopyProbe& probe, const TokenPredictor& predict);

// The readout as one line: "copy 0.993/0.021 textcopy 0.580/0.402 randcopy 0.861/0.030 passkey
// 0.969 (0.994)", each kind's accuracy against its control (kinds without rows left out; gapped
// copies always shown), passkeys read back whole and, in brackets, their digits.
std::string CopyReadoutText(const CopyReadout& r);

}  // namespace stretch
