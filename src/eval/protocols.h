// The lab's protocols over token sequences (each a function returning records; the lab runs
// them per cell, src/lab). Every protocol builds whole sequences, feeds each from position 0 and
// scores some of its targets through a SequenceScorer, so a test can put a constructed scorer
// (a perfect copier, say) in the model's place and know the answer.
//
// Sequences: a sequence of n tokens feeds its first n - 1 (positions 0 .. n-2) and position p
// predicts token p + 1. The protocols build sequences of ctx + 1 tokens: BOS, then ctx text
// tokens, so ctx tokens are fed and ctx targets scored (position 0 predicts the first text token
// from BOS alone, as ScoreStream does).
//
// Windows are chosen without randomness: the document's non-overlapping windows, in order, and
// `count` of them spread evenly over the whole list (index floor(i * total / count)), so a run is
// reproducible and draws from every part of the held-out text, not only its first document.
//
//   NonRepeat  genuine text: windows of ctx tokens of the documents (never crossing from one
//              document into the next).
//   Repeat     a sample of train_len tokens (a window of that length, chosen as above) repeated
//              until it fills ctx tokens (the last copy cut short). From the second copy on, every
//              target is a token the model has already seen at distance train_len: a model that
//              keeps long-range dependency copies it and scores far above its training-length
//              accuracy, one that has become local cannot (Su Jianlin, "Transformer upgrade road"
//              posts, kexue.fm archives 9444 and 9708).
//   Passkey    a random number hidden at a depth in held-out text and asked for at the end, scored
//              at the key's tokens only: src/eval/passkey.h.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "src/eval/score.h"

namespace stretch {

// Feeds each sequence whole and reports every target at positions >= first of each sequence
// (TokenRecord::window = the sequence's index, ::position = p, the target being sequence[p + 1]),
// sequences in order, positions ascending within each. It may report earlier positions too;
// callers that want only the end of their sequences (far copy, passkey) pass its start, so that
// the model runs its last layer and classifier on those rows alone.
using SequenceScorer = std::function<void(const std::vector<std::vector<int>>& sequences,
                                          int64_t first, const TokenSink& sink)>;

// The model under its current plan (Transformer::SetPlan/SetMethod; the caller resolves the method
// for fed_len = the sequences' length - 1), through ScoreSequences. `label` begins the progress
// line; `progress` false: none.
SequenceScorer ModelSequenceScorer(Transformer& model, std::string label, bool progress);

// Documents as token spans (without BOS; the protocols add it).
using TokenSpans = std::vector<std::span<const int>>;

// `count` of the documents' non-overlapping windows of `length` tokens, spread evenly (the rule at
// the top), as (document, offset). `what` begins the errors: documents holding fewer than `count`
// whole windows (naming how many they hold), length < 1 or count < 1.
struct WindowRef {
  size_t document = 0;
  int64_t offset = 0;
};
std::vector<WindowRef> SpreadWindows(const TokenSpans& documents, int64_t length, int64_t count,
                                     const char* what);

// `count` windows of `length` tokens (rule at the top), each as BOS followed by the window.
// Throws stretch::Error when the documents hold fewer than `count` whole windows (naming how many
// they hold), or for length < 1 or count < 1.
std::vector<std::vector<int>> NonRepeatSequences(const TokenSpans& documents, int64_t ctx,
                                                 int64_t count, int bos);
// `count` samples of train_len tokens, each as BOS followed by the sample repeated to ctx tokens.
// Throws as above, and for ctx < train_len.
std::vector<std::vector<int>> RepeatSequences(const TokenSpans& documents, int64_t train_len,
                                              int64_t ctx, int64_t count, int bos);

// Fixed tail, growing context: `count` samples of `longest` tokens (windows chosen as above), each
// fed as BOS followed by its last ctx tokens. Scored from position ctx - tail on
// (ScoreTargetsFrom), every context scores the very same targets, the last `tail` tokens of each
// sample; only the amount of context before them changes. Throws as above, and for ctx > longest.
std::vector<std::vector<int>> TailSequences(const TokenSpans& documents, int64_t longest,
                                            int64_t ctx, int64_t count, int bos);

// Scores the targets at positions >= first_position of every sequence: loss, accuracy, and
// buckets of `bucket` positions; ScoreSummary::windows counts the sequences with a scored target.
ScoreSummary ScoreTargetsFrom(const SequenceScorer& scorer,
                              const std::vector<std::vector<int>>& sequences,
                              int64_t first_position, int64_t bucket);
// Every target.
ScoreSummary ScoreAllTargets(const SequenceScorer& scorer,
                             const std::vector<std::vector<int>>& sequences, int64_t bucket);

}  // namespace stretch
