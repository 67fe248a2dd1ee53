// Passkey documents: a random number hidden at a chosen depth in filler text and asked for at the
// end (Mohtashami & Jaggi 2023, "Landmark Attention", section 4.2; the same test in the LongLoRA
// and YaRN evaluations). Built at the token level, so the key's positions are known exactly for
// any tokenizer:
//
//   BOS  prefix  filler[0, k)  needle_before KEY [needle_middle KEY] needle_after  filler[k, F)
//        question KEY
//
// with F filler tokens (cut so that the whole is exactly BOS + ctx tokens) and k = round(depth F):
// depth 0 puts the needle right after BOS (and the prefix), depth 1 right before the question.
// The prefix and the second key are empty in the default format; llama.cpp's layout uses both.
//
// llama.cpp's layout (LlamaCppPasskeyFormat; the prompt of its examples/passkey/passkey.cpp, the
// `llama-passkey` tool): a task sentence, then a junk text of five short sentences repeated, with
// "The pass key is KEY. Remember it. KEY is the pass key." inserted before one repetition, then
// "What is the pass key? The pass key is". Here the junk (PasskeyFormat::junk) replaces the
// held-out filler: its repetitions are cut to F tokens and the needle goes at the repetition
// boundary nearest k (as llama.cpp inserts it before its i_pos-th repetition). llama.cpp draws
// the key in 1..50000 and reads the generated text; here the key has `digits` digits and its
// tokens are scored, as in the default layout.
//
// Encoding. Each fixed text piece is encoded alone and the token pieces are concatenated. The key
// is encoded digit by digit (each digit alone, its tokens concatenated), in the needle and in the
// answer alike: with the bytes tokenizer the key's tokens are exactly its digit bytes, and with a
// SentencePiece tokenizer (which may merge digits, or give a digit a word-start piece) the answer
// is still token for token the needle's key, so it can be copied, and its positions are known.
// The answer is the last thing in the document; nothing follows it.
//
// The default text is short because the lab trains at 64-128 tokens with the bytes tokenizer
// (one token per character): 14 + 29 tokens of text and twice the key, so a 5-digit trial needs
// ctx >= 53 + kPasskeyMinFiller = 61.
//
// This lives in src/io (linked by both src/train, which mixes passkey documents into training,
// and src/eval, which scores them: src/eval/passkey.h); it needs only an encoder and tokens.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/rng.h"

namespace stretch {

// Text -> token ids, no BOS (TrainingTokenizer::Encode, say).
using TextEncoder = std::function<std::vector<int>(std::string_view)>;

// Text pieces as they encode in the middle of a text. SentencePiece tokenizers (llama2.c's,
// LLaMA's) put a dummy-prefix space before every text they encode, so pieces encoded alone and
// concatenated read "  The key is  1 2 3" to the model (every digit a space and a digit). This
// encodes "\n" + text and drops the tokens of "\n" alone: a newline is a piece boundary in every
// tokenizer here (its own byte token in SentencePiece, a pre-tokenizer split in byte-level BPE),
// so what remains is the text's mid-text tokens. When the tokens of "\n" are not a prefix of the
// longer encoding (a merge across the newline), the text is encoded alone.
TextEncoder MidTextEncoder(TextEncoder encode);

// The fewest filler tokens a trial may have: a document of needle and question alone does not
// test retrieval from within text.
inline constexpr int64_t kPasskeyMinFiller = 8;

struct PasskeyFormat {
  int digits = 5;  // decimal digits of the key, 1..18; the first is never 0
  std::string needle_before = " The key is ";
  std::string needle_after = ". ";
  std::string question = " What is the key? The key is ";
  std::string prefix;         // after BOS, before the filler (llama.cpp: the task sentence)
  std::string needle_middle;  // not empty: the needle holds the key twice, around this text
  std::string junk;  // not empty: the filler is this text repeated (the trial's `filler` unused)
};

// llama.cpp's `llama-passkey` layout (examples/passkey/passkey.cpp: prompt_prefix, prompt_junk,
// prompt_rand, prompt_suffix), with the spaces it puts between the pieces. llama.cpp's question
// ends with "is" and the model generates " KEY"; here it ends with "is ", as the needle's "The
// pass key is " does, so that the answer (digits encoded alone, above) is token for token the
// needle's key.
PasskeyFormat LlamaCppPasskeyFormat();

// Phrasings of the passkey document for training (`stretch train --passkey-phrasings varied`):
// stretch's own layout first, then five others, each a needle sentence and a question that ends
// with the needle's words, two of them with the key said twice. A model trained on one phrasing
// can learn that phrase rather than retrieval: the quick lab's models read stretch's layout and,
// after their prose stage, answer llama.cpp's question with prose (docs/training.md, twenty-fourth
// round). None uses llama.cpp's words ("pass key", its task sentence or its junk filler), so that
// its layout stays a test of a layout never seen in training.
std::vector<PasskeyFormat> VariedPasskeyFormats();

// The format's pieces, encoded once.
struct PasskeyPieces {
  int digits = 0;
  std::vector<int> needle_before, needle_after, question, prefix, needle_middle, junk;
  int key_copies = 2;  // the key's occurrences in a trial: the needle's (1 or 2) and the answer
  std::array<std::vector<int>, 10> digit;  // the tokens of each digit '0'..'9', encoded alone
  int64_t fixed = 0;  // tokens of prefix + needle_before + needle_middle + needle_after + question
  int64_t longest_key = 0;  // tokens of the longest key (digits x the longest digit)
};

// Encodes the pieces. Throws stretch::Error for digits outside 1..18, or a digit that encodes to
// no token.
PasskeyPieces EncodePasskeyPieces(const TextEncoder& encode, const PasskeyFormat& format = {});

// The shortest ctx any key fits with kPasskeyMinFiller filler tokens.
int64_t PasskeyMinCtx(const PasskeyPieces& pieces);
// Filler tokens a trial of ctx can take at most (the shortest key): a filler source this long
// always suffices.
int64_t PasskeyMaxFiller(const PasskeyPieces& pieces, int64_t ctx);

// Throws stretch::Error for depth outside [0, 1] or ctx below PasskeyMinCtx (naming it).
void CheckPasskeyArgs(const PasskeyPieces& pieces, int64_t ctx, double depth);

struct PasskeyTrial {
  std::vector<int> tokens;             // (ctx + 1): BOS, then ctx tokens (layout at the top)
  std::vector<int64_t> key_positions;  // positions p whose target tokens[p + 1] is a key token
                                       // of the answer, ascending
  std::string key;                     // the digits
  double depth = 0.0;                  // as asked
  int64_t needle_start = 0;            // index in tokens of the needle's first token
  int64_t question_start = 0;          // index in tokens of the question's first token
};

// One trial of ctx fed tokens: the key drawn from rng (first digit uniform in 1..9, the others in
// 0..9, each UniformIndex-style without modulo bias), the filler the first F tokens of `filler`
// (of the junk repeated, when the format has one). Throws stretch::Error as CheckPasskeyArgs, and
// for a filler shorter than the F tokens the trial needs.
PasskeyTrial MakePasskeyTrial(const PasskeyPieces& pieces, std::span<const int> filler, int bos,
                              int64_t ctx, double depth, Rng& rng);

// The trial's control: the same question and answer (the same key, at the same positions), but no
// needle: its tokens are replaced by more filler (the first ctx - |prefix| - |question| - |key|
// tokens of `filler`, or of the junk repeated), so the key occurs nowhere before the answer and
// a model can only guess it. needle_start is -1. Throws stretch::Error for a filler too short.
PasskeyTrial MakePasskeyControl(const PasskeyPieces& pieces, std::span<const int> filler, int bos,
                                int64_t ctx, const PasskeyTrial& trial);

// Decoys for training (`stretch train --passkey-decoys N`): sentences shaped like the needle,
// " The door is 48213. ", with another noun and another number, written over a passkey row's
// filler. Without them the only number after " is " in a training row is the key, so a model can
// find the key by "a number follows" alone; with them it has to match the question's noun. The
// nouns are none of the phrasings' (VariedPasskeyFormats, llama.cpp's "pass key"), and one, "day",
// ends in the same letter as "key".
std::vector<std::string> PasskeyDecoyNouns();

struct PasskeyDecoys {
  std::vector<std::vector<int>> before;  // " The NOUN is ", one per PasskeyDecoyNouns()
  std::vector<int> after;                // ". "
};
PasskeyDecoys EncodePasskeyDecoys(const TextEncoder& encode);

// Writes up to n decoys over the trial's filler, never over its prefix, needle, question or
// answer, nor over each other. For each: a noun drawn uniformly, a number of pieces.digits digits
// drawn as a key is (drawn again while it equals the trial's key), then a start uniform among the
// filler positions where it fits whole. Returns how many were written: fewer than n when the
// filler has no room left. The trial's key, key_positions, needle_start and question_start are
// unchanged. Throws stretch::Error for a trial of a format with junk (llama.cpp's layout: a
// test, never a training row).
int AddPasskeyDecoys(PasskeyTrial& trial, const PasskeyPieces& pieces, const PasskeyDecoys& decoys,
                     int n, Rng& rng);

}  // namespace stretch
