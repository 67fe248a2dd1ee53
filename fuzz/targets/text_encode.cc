// Text from outside (a corpus, a prompt, `score --data`), any bytes, invalid UTF-8 included,
// through every tokenizer's encoder and back through its decoder: llama2.c's (with and without
// byte pieces), byte-level BPE (src/io/tokenizer/bpe_tokenizer.h; its pre-tokenizers split any text into
// pieces that are together exactly the text; NFC is idempotent), Hugging Face's SentencePiece encoding
// (src/io/tokenizer/hf_tokenizer_json.h), the trainer's tokenizers (bytes, SentencePiece:
// src/io/tokenizer/training_tokenizer.h). The tokenizers that promise it must give the bytes back exactly.
// Also the token files of `score --tokens` (src/io/text.h ReadTokenFile).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_target.h"
#include "fuzz/seed_writer.h"
#include "src/io/text.h"
#include "src/io/tokenizer/bpe_pretokenizer.h"
#include "src/io/tokenizer/bpe_tokenizer.h"
#include "src/io/tokenizer/hf_tokenizer_json.h"
#include "src/io/tokenizer/spm_model.h"
#include "src/io/tokenizer/text_tokenizer.h"
#include "src/io/tokenizer/tokenizer.h"
#include "src/io/tokenizer/training_tokenizer.h"
#include "src/io/tokenizer/unicode_nfc.h"

namespace stretch::fuzz {
namespace {

// Made once per process: what the encoders run with.
struct TextTokenizers {
  Tokenizer tiny = TinyFuzzTokenizer();
  Tokenizer rich = RichFuzzTokenizer();
  BpeTokenizer bpe =
      BpeTokenizer::FromTokenizerJson(WriteScratch("text_encode_bpe.json", BpeFuzzTokenizerJson()));
  BpeTokenizer llama3 = BpeTokenizer::FromTokenizerJson(
      WriteScratch("text_encode_llama3.json", FamilyFuzzTokenizerJson(FuzzJsonFamily::kLlama3)));
  BpeTokenizer qwen2 = BpeTokenizer::FromTokenizerJson(
      WriteScratch("text_encode_qwen2.json", FamilyFuzzTokenizerJson(FuzzJsonFamily::kQwen2)));
  BpeTokenizer gemma3 = BpeTokenizer::FromTokenizerJson(
      WriteScratch("text_encode_gemma3.json", FamilyFuzzTokenizerJson(FuzzJsonFamily::kGemma3)));
  HfSentencePieceJson hf = ReadHfSentencePieceJson(WriteScratch(
      "text_encode_sp.json", SerializeSentencePieceTokenizerJson(RichFuzzTokenizer())));
  TrainingTokenizer bytes = TrainingTokenizer::Bytes();
  TrainingTokenizer spm =
      TrainingTokenizer::Load("sentencepiece", SerializeSentencePieceModel(RichFuzzTokenizer()));
};

const TextTokenizers& Tokenizers() {
  static const TextTokenizers t;
  return t;
}

}  // namespace

int FuzzTextEncode(const uint8_t* data, size_t size) {
  const TextTokenizers& t = Tokenizers();
  const std::string_view text = AsText(data, size);
  ExpectErrorOrSuccess([&] { (void)t.tiny.Decode(t.tiny.Encode(text, true, true)); });
  ExpectErrorOrSuccess([&] { (void)t.rich.Decode(t.rich.Encode(text, true, false)); });
  ExpectErrorOrSuccess([&] {
    if (t.bpe.Decode(t.bpe.Encode(text)) != text) {
      Finding("byte-level BPE: Decode(Encode(x)) != x for " + Quote(text));
    }
  });
  // The families' layouts: Llama 3's gives any text back exactly (no normalizer; its added token
  // is text too); Qwen's normalizes to NFC first, Gemma's writes spaces as U+2581 and decodes
  // U+2581 as a space, so theirs give back the normalized text: they must not fail otherwise.
  ExpectErrorOrSuccess([&] {
    if (t.llama3.Decode(t.llama3.Encode(text)) != text) {
      Finding("Llama 3 layout: Decode(Encode(x)) != x for " + Quote(text));
    }
  });
  ExpectErrorOrSuccess([&] { (void)t.qwen2.Decode(t.qwen2.Encode(text)); });
  ExpectErrorOrSuccess([&] { (void)t.gemma3.Decode(t.gemma3.Encode(text)); });
  // NFC (src/io/tokenizer/unicode_nfc.h) is idempotent on any bytes.
  {
    const std::string nfc = NfcNormalize(text);
    if (NfcNormalize(nfc) != nfc) Finding("NFC is not idempotent on " + Quote(text));
  }
  // Every pre-tokenizer's pieces are non-empty and together exactly the text.
  for (const BpeSplit split : {BpeSplit::kGpt2, BpeSplit::kLlama3, BpeSplit::kQwen2}) {
    std::string joined;
    for (const std::string_view piece : SplitBpePieces(split, text)) {
      if (piece.empty()) Finding(std::string(BpeSplitName(split)) + ": an empty piece");
      joined += piece;
    }
    if (joined != text) {
      Finding(std::string(BpeSplitName(split)) + ": the pieces are not the text " + Quote(text));
    }
  }
  ExpectErrorOrSuccess([&] { (void)EncodeAsHuggingFace(t.hf, text); });
  ExpectErrorOrSuccess([&] {
    if (t.bytes.Decode(t.bytes.Encode(text)) != text) {
      Finding("bytes tokenizer: Decode(Encode(x)) != x for " + Quote(text));
    }
  });
  ExpectErrorOrSuccess([&] { (void)t.spm.Decode(t.spm.Encode(text)); });
  const std::string path = WriteScratch("tokens.txt", data, size);
  ExpectErrorOrSuccess([&] { (void)ReadTokenFile(path, 40); });
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzTextEncode)
