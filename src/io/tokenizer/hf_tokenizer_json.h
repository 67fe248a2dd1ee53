// Hugging Face tokenizer.json files of the LLaMA / SentencePiece kind: what transformers'
// convert_slow_tokenizer.py (LlamaConverter, SpmConverter.tokenizer for model_type 2) writes for a
// SentencePiece BPE model with byte fallback, read as and written from the project's llama2.c
// tokenizer (src/io/tokenizer/tokenizer.h).
//
// The file (both generations; tokenizers' serde names, field order as tokenizers writes it):
//   added_tokens    [{"id": 0, "content": "<unk>", ..., "special": true}, <s> 1, </s> 2]
//   normalizer      legacy (LlamaConverter.normalizer, legacy=True, the Llama-2 era):
//                     {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
//                      {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
//                   non-legacy: null
//   pre_tokenizer   legacy: null
//                   non-legacy (LlamaConverter.pre_tokenizer, legacy=False):
//                     {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
//                      "split": false}
//   post_processor  {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", ...}},
//                    {"Sequence": {"id": "A", ...}}], ..., "special_tokens": {"<s>": {"id": "<s>",
//                    "ids": [1], "tokens": ["<s>"]}}}   (LlamaTokenizerFast.update_post_processor;
//                    "</s>" last as well with add_eos_token)
//   decoder         {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String":
//                    "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
//                    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
//   model           {"type": "BPE", "dropout": null, "unk_token": "<unk>", ..., "fuse_unk": true,
//                    "byte_fallback": true, ["ignore_merges": false,] "vocab": {piece: id},
//                    "merges": ["▁ t", ...] (tokenizers >= 0.20 writes [["▁", "t"], ...])}
// Pieces are spelled as in tokenizer.model: a space is "▁" (U+2581), bytes are "<0x0A>".
//
// The merge list is SentencePieceExtractor.extract(vocab_scores)'s: for every piece, each split
// into two pieces of the vocabulary (at every character), sorted by the piece's SentencePiece
// score, highest first (a stable sort: equal scores keep piece-id order, and one piece's splits
// are ordered by (id of left, id of right)). Older extractors paired every two pieces (and
// dropped pieces scored exactly 0: `if piece_score:`); transformers 5's generate_merges adds
// (len(left), len(right)) descending to the sort key. Hugging Face's BPE (models/bpe/word.rs
// merge_all) then merges, among adjacent pairs that the list names, the one of lowest rank
// (position in the list), the leftmost of equal pairs, until none is left.
//
// Reading gives that as the project's score-based merging (hf_tokenizer_json.cc argues why it is
// the same and where it is not): score(piece) = -(rank of the first merge that makes it); a piece
// no merge makes gets a score below llama2.c's -1e10 floor, so llama2.c's encoder never merges
// into it either. Pieces are respelled as llama2.c spells them ("▁" -> ' ', <s> and </s> as
// llama2.c's export writes them, "\n<s>\n" and "\n</s>\n"): for Meta's LLaMA file the pieces are
// tokenizer.bin's, the scores are new.
//
// Where ids differ from Hugging Face's `tokenizer.encode(text)` (EncodeAsHuggingFace closes the
// first two):
//   - a text holding U+2581: Hugging Face reads it as a space (as SentencePiece does); llama2.c's
//     encoder as the three bytes of that character;
//   - the non-legacy form (Metaspace): Hugging Face adds no "▁" to a text that already begins with
//     a space (or "▁"), llama2.c's encoder always adds one;
//   - special tokens written in the text ("<s>"): Hugging Face matches them before BPE, llama2.c's
//     encoder spells them out (as BpeTokenizer does, src/io/tokenizer/bpe_tokenizer.h);
//   - text that is not valid UTF-8: Hugging Face cannot be given it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/io/tokenizer/tokenizer.h"

namespace stretch {

// How a file puts "▁" before a text.
enum class HfSpacePrefix : uint8_t {
  kAlways,  // normalizer Prepend "▁": before every non-empty text, as llama2.c's dummy prefix
  kUnlessSpace,  // pre_tokenizer Metaspace: not before a text that begins with a space (or "▁")
};

// A tokenizer.json of the LLaMA kind, as read.
struct HfSentencePieceJson {
  Tokenizer tokenizer;  // llama2.c's spelling and encoder; scores from the merge ranks
  HfSpacePrefix prefix = HfSpacePrefix::kAlways;
  bool add_bos = false;  // the post_processor puts <s> before the text
  bool add_eos = false;  // the post_processor puts </s> after it
  int space_id = -1;     // the piece "▁" (' ' in llama2.c's spelling)
  int merge_count = 0;   // entries of model.merges
  // Pieces whose merges stand apart in model.merges, other pieces' merges between them: where
  // such a piece competes with those, llama2.c's encoder can merge in another order than
  // Hugging Face (hf_tokenizer_json.cc). 0 for transformers 4.x's lists of distinct scores; 14 for
  // LLaMA's list as transformers 5 sorts it (its runs of spaces), which gives the same ids on every
  // Gutenberg book and run of spaces tested.
  int interleaved_pieces = 0;
};

// True when `path` holds a JSON object whose model is BPE with byte_fallback true and whose
// normalizer or pre_tokenizer spells spaces as "▁" (a Prepend or Replace with "▁", or a
// Metaspace) in llama2.c's layout: the files ReadHfSentencePieceJson reads. False for Gemma's form
// (a lone Replace) and for a legacy LLaMA form (Prepend + Replace) with a layout of its own
// (<unk>, <s>, </s> not at ids 0, 1, 2, or an added token that is not special, strips white space
// or is special inside model.vocab beyond id 2: Phi-3's, Mistral v0.3's), which
// BpeTokenizer::FromTokenizerJson reads; false for a missing, unreadable or non-JSON file and for
// byte-level BPE files (GPT-2's kind). The merges are skipped over, and of the vocabulary only its
// size and ids 0, 1, 2 are kept. Never throws.
bool LooksLikeSentencePieceTokenizerJson(const std::string& path);

// Reads the file, checking it field by field. Throws stretch::Error naming the file and the field
// (model.merges[12], model.vocab["<0x0A>"], normalizer.normalizers[0].type, ...), what was found
// and what was expected, for anything but the two forms above: a model other than BPE, byte
// fallback off or a byte piece "<0x00>".."<0xFF>" missing (or spelled in lower case), ids 0/1/2
// other than <unk>/<s>/</s>, ids with gaps or given twice, a piece holding a space or (respelled)
// equal to another, no "▁" piece, a merge naming a piece not in model.vocab or making one that is
// not, a merge given twice or touching <unk>/<s>/</s>, a merged piece with a split into two pieces
// that model.merges does not list (llama2.c's encoder would merge it, Hugging Face would not), a
// Metaspace that splits (split true or missing), no "▁" prefix at all, dropout, subword prefixes or
// suffixes, ignore_merges, a decoder or post_processor of another kind, non-special added tokens,
// more than 2^24 pieces or merges (ranks must be exact in a float score).
HfSentencePieceJson ReadHfSentencePieceJson(const std::string& path);
// Its tokenizer only (what LoadTokenizerFile needs).
Tokenizer ReadSentencePieceTokenizerJson(const std::string& path);

// Hugging Face's `tokenizer.encode(text).ids` for the file `t` was read from: the
// post-processor's <s>/</s> around the text's ids, U+2581 in the text read as a space, and the
// Metaspace form's prefix rule. Exact for valid UTF-8 text without special tokens written in it.
std::vector<int> EncodeAsHuggingFace(const HfSentencePieceJson& t, std::string_view text);

// The legacy LlamaConverter form of a llama2.c vocabulary (normalizer Prepend + Replace, no
// pre_tokenizer, <s> added by a TemplateProcessing, the decoder above, <unk>/<s>/</s> as special
// added tokens; merges as "a b" strings, which every tokenizers version reads), with the merges
// llama2.c's encoder allows (every split of every piece scored above -1e10 into two pieces), in
// the order SentencePieceExtractor gives them from the scores. Reading it back gives a tokenizer
// that encodes every text as `t` does, except where `t` has pieces of equal score that compete
// for overlapping pairs (llama2.c takes the leftmost, the file's ranks the lower id): in LLaMA's
// vocabulary only the 15 runs of spaces scored -1e9 tie, and they give the same ids either way
// (tests/io/hf_tokenizer_json_test.cc). Hugging Face's own encoder on the file can also part from
// `t` where one piece is a candidate with two splits at once (hf_tokenizer_json.cc). Throws stretch::Error, naming the piece, for a vocabulary
// the file cannot hold so: an empty piece, a piece that is not UTF-8 or holds U+2581, two pieces
// with one spelling once respelled, a missing or lower-case byte piece, no ' ' piece, <unk>/<s>/
// </s> as a side or a result of a merge llama2.c allows.
std::string SerializeSentencePieceTokenizerJson(const Tokenizer& t);
// The same written to `path` atomically (src/io/output_file.h).
void SaveSentencePieceTokenizerJson(const Tokenizer& t, const std::string& path);
// tokenizer_config.json for that tokenizer.json: LlamaTokenizer, <s> added before a text and no
// </s> after it, the special tokens' spellings, legacy spacing.
std::string SerializeSentencePieceTokenizerConfig(const Tokenizer& t);
void SaveSentencePieceTokenizerConfig(const Tokenizer& t, const std::string& path);

}  // namespace stretch
