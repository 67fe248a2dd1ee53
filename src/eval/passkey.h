// The passkey retrieval protocol (documents: src/io/passkey.h): `count` trials of ctx fed tokens
// at one depth, their filler cut from held-out text, scored only at the key's tokens through a
// SequenceScorer (src/eval/protocols.h), so a test can put an oracle in the model's place.
//
// Filler windows are chosen without randomness, as the other protocols choose theirs: `count` of
// the documents' non-overlapping windows of PasskeyMaxFiller tokens, spread evenly (index
// floor(i * total / count)); the keys come from Rng(seed). The same arguments give the same trials.
#pragma once

#include <cstdint>
#include <vector>

#include "src/eval/protocols.h"
#include "src/io/passkey.h"

namespace stretch {

// Throws stretch::Error for depth outside [0, 1], digits outside 1..18, ctx too short for the
// needle, question and key (naming the shortest), count < 1, or documents holding fewer than
// `count` filler windows.
std::vector<PasskeyTrial> MakePasskeyTrials(const TokenSpans& documents, const TextEncoder& encode,
                                            int bos, int64_t ctx, double depth, int64_t count,
                                            uint64_t seed, const PasskeyFormat& format = {});

// The trials of MakePasskeyTrials (the same, for the same arguments) and, for each, its control
// (MakePasskeyControl: the same question and answer, no needle, the key nowhere before the
// answer). A control's filler is its trial's filler window followed by the next trials' windows
// (the last trial's by the first's), since it also takes the needle's place: so the trials, and
// with them the records of labs that scored them without controls, stay as they were.
struct PasskeyTrialsWithControls {
  std::vector<PasskeyTrial> trials, controls;  // controls[i] is trials[i]'s
};
PasskeyTrialsWithControls MakePasskeyTrialsWithControls(const TokenSpans& documents,
                                                        const TextEncoder& encode, int bos,
                                                        int64_t ctx, double depth, int64_t count,
                                                        uint64_t seed,
                                                        const PasskeyFormat& format = {});

struct PasskeyResult {
  int64_t trials = 0;
  int64_t retrieved = 0;        // trials with every key token predicted right
  double accuracy = 0.0;        // retrieved / trials
  int64_t key_tokens = 0;       // key tokens scored, over all trials
  double token_accuracy = 0.0;  // share of them predicted right
  double key_loss = 0.0;        // mean loss over them, nats
  // Trials whose digit at place p (0 = the first the answer asks for) was right; known when each
  // digit of every key is one token (a byte tokenizer; most BPE vocabularies encode a digit alone
  // as one token), else empty.
  std::vector<int64_t> right_by_place;
};

// Scores the trials' key tokens only (TokenRecord positions in key_positions; the scorer's other
// records are ignored).
PasskeyResult ScorePasskey(const SequenceScorer& scorer, const std::vector<PasskeyTrial>& trials);

}  // namespace stretch
