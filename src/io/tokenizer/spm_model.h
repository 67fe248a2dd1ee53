// SentencePiece model files (tokenizer.model): a serialized sentencepiece.ModelProto, as
// src/sentencepiece_model.proto of google/sentencepiece defines it:
//
//   ModelProto      { repeated SentencePiece pieces = 1; TrainerSpec trainer_spec = 2;
//                     NormalizerSpec normalizer_spec = 3; SelfTestData self_test_data = 4;
//                     NormalizerSpec denormalizer_spec = 5; }
//   SentencePiece   { string piece = 1; float score = 2; Type type = 3 [default = NORMAL]; }
//                     Type: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6
//   TrainerSpec     { ModelType model_type = 3 [default = UNIGRAM] (UNIGRAM 1, BPE 2, WORD 3,
//                     CHAR 4); int32 vocab_size = 4; bool treat_whitespace_as_suffix = 24;
//                     bool byte_fallback = 35; int32 unk_id = 40, bos_id = 41, eos_id = 42,
//                     pad_id = 43; string unk_surface = 44 [default = " \u2047 "];
//                     string unk_piece = 45, bos_piece = 46, eos_piece = 47; ... }
//   NormalizerSpec  { string name = 1; bytes precompiled_charsmap = 2;
//                     bool add_dummy_prefix = 3 [default = true];
//                     bool remove_extra_whitespaces = 4 [default = true];
//                     bool escape_whitespaces = 5 [default = true]; ... }
//
// Reading goes two ways: libsentencepiece (SentencePieceProcessor) encodes and decodes, and a
// protobuf wire-format reader of our own (there are no protobuf headers to build against) gives
// the vocabulary with its types and the settings that decide how text is encoded. That reader
// checks every length and wire type against the bytes it has, so a damaged or hostile file is a
// stretch::Error naming the file, the field and the offset, before libsentencepiece sees it.
//
// Writing (SaveSentencePieceModel) turns a llama2.c vocabulary into the ModelProto that makes
// libsentencepiece encode exactly as llama2.c's encoder (src/io/tokenizer/tokenizer.h) does, with the
// settings of Meta's LLaMA tokenizer.model, from which llama2.c's tokenizer.bin was exported:
// BPE, byte fallback, identity normalization, a dummy-prefix space, whitespace kept as it is.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "src/io/tokenizer/text_tokenizer.h"
#include "src/io/tokenizer/tokenizer.h"

namespace stretch {

// ModelProto.SentencePiece.Type.
enum class SentencePieceType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// The fields of TrainerSpec and NormalizerSpec that change how text is encoded or decoded, with
// the proto's defaults where the file leaves a field out.
struct SentencePieceSettings {
  int32_t model_type = 1;     // TrainerSpec.ModelType: 1 unigram, 2 BPE, 3 word, 4 char
  int32_t vocab_size = 8000;  // as the file says; the number of pieces is what counts
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  int32_t unk_id = 0;
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  int32_t pad_id = -1;
  std::string unk_piece = "<unk>";
  std::string bos_piece = "<s>";
  std::string eos_piece = "</s>";
  std::string unk_surface = " \xE2\x81\x87 ";  // what <unk> decodes to (U+2047)
  std::string normalizer_name;                 // "identity", "nmt_nfkc", ...
  bool precompiled_charsmap = false;           // the normalizer has character rules (not identity)
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
  bool denormalizer = false;  // a denormalizer_spec with rules: decoded text is rewritten
};

// A model's vocabulary in SentencePiece's spelling (a space is U+2581), id order.
struct SentencePieceVocabulary {
  std::string source;  // the file, for messages
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<SentencePieceType> types;
  SentencePieceSettings settings;
};

// True when the file begins like a ModelProto: its first field is a `pieces` message (tag 0x0A,
// a length within the file) whose own fields are well-formed protobuf and include a non-empty
// piece string. Reads at most the first 64 KiB; false for a missing or unreadable path or a
// directory. A llama2.c tokenizer never matches (its first byte, the low byte of
// max_token_length, would have to be 10, and then the next byte, 0, makes an empty piece
// message), nor a GGUF file ("GGUF") or a safetensors file (its 8-byte header length's high
// bytes are 0: field number 0).
bool LooksLikeSentencePieceModel(const std::string& path);

// The vocabulary and settings of a tokenizer.model, read by our wire-format reader. Throws
// stretch::Error (file, field, offset, found, expected) for a file that is not a well-formed
// ModelProto: a length or varint beyond its message, a wire type other than the field's, an
// unknown piece type, an empty piece, no pieces, more than 2^24 pieces, a file over 256 MiB, or a
// missing trainer_spec or normalizer_spec (every SentencePiece trainer writes both after the
// pieces, so a file cut anywhere loses them).
SentencePieceVocabulary ReadSentencePieceVocabulary(const std::string& path);
// The same from the bytes of a model; `source` names them in messages.
SentencePieceVocabulary ParseSentencePieceModel(std::string_view bytes, const std::string& source);

// The vocabulary as the project's llama2.c tokenizer, spelled as llama2.c's tokenizer.py export()
// writes it (U+2581 becomes ' ', BOS and EOS become "\n<s>\n" and "\n</s>\n"): from Meta's
// tokenizer.model this is tokenizer.bin, piece for piece and score for score. Throws
// stretch::Error, naming every setting or piece that differs, when llama2.c's encoder would not
// give SentencePiece's ids: expected BPE with byte fallback (all 256 "<0xXX>" pieces), identity
// normalization, a dummy prefix, whitespace kept, ids 0/1/2 the UNKNOWN/CONTROL/CONTROL
// <unk>/<s>/</s>, every other piece NORMAL or BYTE (see SaveSentencePieceModel for the rest).
Tokenizer Llama2cTokenizerFromSentencePiece(const SentencePieceVocabulary& vocabulary);

// A tokenizer.model through libsentencepiece behind the one text interface: BOS and EOS are the
// model's <s> and </s> (EOS -1 when it has none); EncodePrompt is BOS then SentencePiece's ids of
// the text; EncodeText reads files as src/io/text.h says (each file encoded whole, no BOS or EOS),
// so its stream compares token for token with the llama2.c tokenizer's; the decoder follows
// SentencePiece's Decode rules token by token (a run of byte pieces becomes its UTF-8 characters,
// held back while a character is incomplete; the first piece of the text loses its dummy-prefix
// space; <unk> decodes to the model's unk_surface). Throws stretch::Error when our reader refuses
// the file (ReadSentencePieceVocabulary), when libsentencepiece cannot load it (its message
// quoted), when it has no BOS piece (generation starts from one), or when it has a denormalizer
// (its rewriting of the whole decoded text cannot be streamed). libsentencepiece trusts a
// model's precompiled_charsmap (a double-array trie): only identity models (Meta's, and every
// model SaveSentencePieceModel writes) have none.
std::unique_ptr<TextTokenizer> LoadSentencePieceModel(const std::string& path);

// The ModelProto bytes for a llama2.c vocabulary: pieces respelled (' ' -> U+2581; ids 0, 1, 2
// written as UNKNOWN "<unk>", CONTROL "<s>", CONTROL "</s>", with their scores; "<0xXX>" as
// BYTE; the rest NORMAL, type left out as Meta's file does), then TrainerSpec {model_type BPE,
// vocab_size, treat_whitespace_as_suffix false, byte_fallback true, unk/bos/eos/pad ids 0/1/2/-1}
// and NormalizerSpec {name "identity", empty precompiled_charsmap, add_dummy_prefix true,
// remove_extra_whitespaces false, escape_whitespaces true}. For Meta's tokenizer.bin the pieces
// come out byte for byte as in Meta's tokenizer.model.
//
// Throws stretch::Error, naming the piece, for a vocabulary SentencePiece would encode
// differently from llama2.c's encoder: an empty piece (SentencePiece refuses it); two pieces with
// one spelling once respelled; a piece holding U+2581 (SentencePiece reads that character in
// text as a space); a byte piece spelled other than "<0xXX>" with upper-case hex, or not all 256
// of them (without byte fallback llama2.c gives one <unk> per byte of an unknown character,
// SentencePiece one per run); a multi-character piece scored at or below -1e10, or NaN (llama2.c
// never merges into it); a piece holding a character that is no piece of its own (SentencePiece
// would merge through it where llama2.c falls back to bytes); a special or byte piece that
// llama2.c can reach by a merge (SentencePiece never produces one from text).
std::string SerializeSentencePieceModel(const Tokenizer& tokenizer);
// The same, written to `path` atomically (src/io/output_file.h).
void SaveSentencePieceModel(const Tokenizer& tokenizer, const std::string& path);

}  // namespace stretch
