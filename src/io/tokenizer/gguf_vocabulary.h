// A vocabulary as the tokenizer.ggml.* keys of a GGUF file, the way llama.cpp's converters write
// them (convert_hf_to_gguf.py's _set_vocab_sentencepiece and _set_vocab_gpt2), so that llama.cpp
// and stretch's own readers (ReadGgufTokenizer in src/io/gguf_model.h, BpeTokenizer::FromGguf)
// encode text with it as the vocabulary's own file does:
//   - a SentencePiece vocabulary run by score (src/io/tokenizer/tokenizer.h): tokenizer.ggml.model
//     "llama", its pieces with U+2581 for a space (user-defined tokens as the text they match),
//     scores, token types, its special ids, add_space_prefix and add_bos_token where they differ
//     from llama.cpp's defaults;
//   - a byte-level BPE vocabulary (Llama 3, Qwen, GPT-2): tokenizer.ggml.model "gpt2", its
//     pre-tokenizer's llama.cpp name (tokenizer.ggml.pre "gpt-2", "llama-bpe" or "qwen2"), the
//     pieces in the byte-level spelling (added tokens as their text), the merges "a b" in rank
//     order, token types (1 normal, 3 control, 4 user-defined for Hugging Face's non-special
//     added tokens but those LooksSpecialToLlamaCpp, which are control), BOS and EOS,
//     add_bos_token;
//   - a SentencePiece-style BPE vocabulary from a tokenizer.json (Gemma 3; BpeOptions::chars) as
//     the SentencePiece kind above (SpmFromSentencePieceStyleBpe): what llama.cpp runs Gemma with.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "src/io/gguf.h"
#include "src/io/tokenizer/bpe_tokenizer.h"
#include "src/io/tokenizer/tokenizer.h"

namespace stretch {

// Whether llama.cpp's converter writes a non-special added token as a control token (type 3)
// rather than user-defined (4): convert_hf_to_gguf.py's does_token_look_special ("<|...|>",
// "<｜...｜>", "<unused...>", "<pad>", "<mask>", "<2mass>", "[@BOS@]").
bool LooksSpecialToLlamaCpp(std::string_view text);
// Whether llama.cpp, loading a vocabulary, makes a token of this text a control token whatever
// its type says (llama_vocab::impl::load's end-of-text, end-of-generation and fill-in-the-middle
// names: "<|im_end|>", "</s>", "<|fim_prefix|>", ...): such a user-defined token is then cut out of
// a text only when special tokens are parsed.
bool ControlToLlamaCpp(std::string_view text);
// Whether llama.cpp ends generation at a token of this text (the names of its special_eog_ids:
// "<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|endoftext|>", "</s>", the FIM pad, ...).
bool EndsGenerationToLlamaCpp(std::string_view text);

GgufKeys GgufVocabularyKeys(const Tokenizer& tokenizer);
// Refused by name: add_prefix_space (llama.cpp's gpt2 vocabularies have no such key).
GgufKeys GgufVocabularyKeys(const BpeTokenizer& tokenizer);

// A SentencePiece-style BPE (BpeOptions::chars) as a SentencePiece vocabulary run by score, which
// encodes as it does: a piece made by merges scores minus the rank of the first merge that makes
// it, so the highest-scoring adjacent pair is the lowest-ranked merge; other pieces of two or more
// characters score -1e10, which llama2.c's floor (and stretch's) never merges; no leading space;
// Hugging Face's non-special added tokens are user-defined tokens matching their text as written
// (control tokens where LooksSpecialToLlamaCpp, as llama.cpp's converter makes them).
// Exact when every adjacent pair whose concatenation is a piece has a merge and the merges that
// make one piece are not interleaved with others that compete with them (true of vocabularies
// converted from a SentencePiece model, as Gemma's are; tests/io/bpe_tokenizer_test.cc checks it
// on Gemma 3's). `source` names it.
Tokenizer SpmFromSentencePieceStyleBpe(const BpeTokenizer& bpe);

// The other way: a SentencePiece vocabulary run by score (a GGUF file's: Gemma's, without the
// leading space; Phi-3's or Mistral's, with it) as a SentencePiece-style BPE (BpeOptions::chars;
// with the leading space BpeOptions::prepend_space), which SerializeBpeTokenizerJson writes as
// those models' own tokenizer.json files are written (Gemma's form, or the legacy LLaMA form). The merges are transformers' SentencePieceExtractor's
// (every split of a piece scored above llama2.c's -1e10 floor into two pieces, the pieces by
// score, highest first, a stable sort; one piece's splits by (left id, right id)), so the lowest
// rank is the highest-scoring pair, as the score-based encoder picks it. Control, unknown and
// unused tokens are control tokens (special added tokens), user-defined ones are matched in the
// text as written (non-special added tokens). A merge into or out of a control token, which
// llama.cpp's encoder makes where such a piece is scored above the floor and a tokenizer.json
// cannot hold, is left out: `dropped` (if given) counts them and names the first.
// Refused by name: a vocabulary with no byte pieces <0x00>..<0xFF>, pieces that are empty,
// spelled alike or hold U+2581.
struct DroppedMerges {
  int64_t count = 0;
  std::string first;  // the first one left out, e.g. "<p" + "ad>" -> "<pad>" (id 0)
};
BpeTokenizer SentencePieceStyleBpeFromSpm(const Tokenizer& spm, DroppedMerges* dropped = nullptr);

}  // namespace stretch
