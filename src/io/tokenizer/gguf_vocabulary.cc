#include "src/io/tokenizer/gguf_vocabulary.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/io/text.h"
#include "src/io/tokenizer/bpe_pretokenizer.h"

namespace stretch {
namespace {

constexpr std::string_view kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's space

// The number of UTF-8 code points of `s` (lead bytes counted).
size_t CodePoints(std::string_view s) {
  return static_cast<size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

}  // namespace

bool LooksSpecialToLlamaCpp(std::string_view t) {
  const auto framed = [&t](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.starts_with(open) && t.ends_with(close);
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || framed("<|", "|>") ||
         framed("<\xef\xbd\x9c", "\xef\xbd\x9c>") || framed("<unused", ">");
}

namespace {

// llama-vocab.cpp (d32676d), llama_vocab::impl::load: the texts that make a token end
// generation (its list for special_eog_ids) ...
constexpr std::string_view kEndOfGenerationNames[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "[e~[",
    // ... and the fill-in-the-middle pad, repository and file separator, which end it too.
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>", "<|repo_name|>",
    "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>"};

// The other fill-in-the-middle names it makes control tokens.
constexpr std::string_view kOtherControlNames[] = {
    // prefix
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
    "<\xef\xbd\x9c"
    "fim\xe2\x96\x81"
    "begin\xef\xbd\x9c>",
    "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>",
    // suffix
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
    "<\xef\xbd\x9c"
    "fim\xe2\x96\x81hole\xef\xbd\x9c>",
    "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>",
    // middle
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>",
    "<\xef\xbd\x9c"
    "fim\xe2\x96\x81"
    "end\xef\xbd\x9c>",
    "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"};

}  // namespace

bool EndsGenerationToLlamaCpp(std::string_view t) {
  return std::find(std::begin(kEndOfGenerationNames), std::end(kEndOfGenerationNames), t) !=
         std::end(kEndOfGenerationNames);
}

bool ControlToLlamaCpp(std::string_view t) {
  return EndsGenerationToLlamaCpp(t) ||
         std::find(std::begin(kOtherControlNames), std::end(kOtherControlNames), t) !=
             std::end(kOtherControlNames);
}

GgufKeys GgufVocabularyKeys(const Tokenizer& t) {
  const int n = t.vocab_size();
  std::vector<std::string> tokens(static_cast<size_t>(n));
  std::vector<float> scores(static_cast<size_t>(n));
  std::vector<int32_t> types(static_cast<size_t>(n));
  for (int id = 0; id < n; ++id) {
    std::string piece = t.Piece(id);
    // llama2.c spells BOS and EOS "\n<s>\n", "\n</s>\n"; llama.cpp's convert-llama2c writes the
    // three as SentencePiece names them.
    if (t.Llama2cLayout() && id == Tokenizer::kUnk) piece = "<unk>";
    if (t.Llama2cLayout() && id == Tokenizer::kBos) piece = "<s>";
    if (t.Llama2cLayout() && id == Tokenizer::kEos) piece = "</s>";
    tokens[static_cast<size_t>(id)] = piece;
    scores[static_cast<size_t>(id)] = t.Score(id);
    types[static_cast<size_t>(id)] = static_cast<int32_t>(t.Type(id));
  }
  // Pieces spell a space U+2581; a user-defined token is the text it matches, as written.
  for (int id = 0; id < n; ++id) {
    if (t.Type(id) != SpmTokenType::kUserDefined) {
      tokens[static_cast<size_t>(id)] = ReplaceAll(tokens[static_cast<size_t>(id)], " ", kSpace);
    }
  }
  for (const auto& [text, id] : t.user_defined()) tokens[static_cast<size_t>(id)] = text;
  GgufKeys kv;
  kv.emplace_back("tokenizer.ggml.model", GgufString("llama"));
  kv.emplace_back("tokenizer.ggml.tokens", GgufStringArray(tokens));
  kv.emplace_back("tokenizer.ggml.scores", GgufF32Array(scores));
  kv.emplace_back("tokenizer.ggml.token_type", GgufI32Array(types));
  // llama.cpp reads an absent id as its default (0, 1, 2), so "none" has no GGUF form.
  for (const auto& [name, id] :
       {std::pair{"unknown", t.unk()}, std::pair{"BOS", t.bos()}, std::pair{"EOS", t.eos()}}) {
    if (id < 0) {
      Fail(
          "{}: the vocabulary has no {} token, which a GGUF file cannot say (llama.cpp would "
          "take id {}); give the tokenizer_config.json that names it",
          t.path(), name,
          std::string_view(name) == "unknown" ? 0
          : name[0] == 'B'                    ? 1
                                              : 2);
    }
  }
  kv.emplace_back("tokenizer.ggml.unknown_token_id", GgufU32(t.unk()));
  kv.emplace_back("tokenizer.ggml.bos_token_id", GgufU32(t.bos()));
  kv.emplace_back("tokenizer.ggml.eos_token_id", GgufU32(t.eos()));
  if (!t.add_space_prefix()) kv.emplace_back("tokenizer.ggml.add_space_prefix", GgufBool(false));
  if (!t.Llama2cLayout()) kv.emplace_back("tokenizer.ggml.add_bos_token", GgufBool(t.add_bos()));
  return kv;
}

GgufKeys GgufVocabularyKeys(const BpeTokenizer& t) {
  const BpeOptions& o = t.options();
  if (o.chars) return GgufVocabularyKeys(SpmFromSentencePieceStyleBpe(t));
  if (o.add_prefix_space) {
    Fail(
        "{}: its pre-tokenizer adds a space before the text (add_prefix_space), which llama.cpp's "
        "byte-level vocabularies cannot say; it has no GGUF form",
        t.source());
  }
  if (o.nfc && o.split != BpeSplit::kQwen2) {
    Fail("{}: it normalizes text to NFC, which llama.cpp does for no pre-tokenizer but qwen2's",
         t.source());
  }
  const int n = t.vocab_size();
  std::vector<std::string> tokens(static_cast<size_t>(n));
  std::vector<int32_t> types(static_cast<size_t>(n), 1);
  for (int id = 0; id < n; ++id) {
    tokens[static_cast<size_t>(id)] = t.Piece(id);
    if (t.Kind(id) == BpeTokenKind::kControl) types[static_cast<size_t>(id)] = 3;
  }
  for (const auto& [text, id] : o.matched) {
    tokens[static_cast<size_t>(id)] = text;
    types[static_cast<size_t>(id)] = LooksSpecialToLlamaCpp(text) ? 3 : 4;
  }
  std::vector<std::string> merges;
  const std::vector<BpeMerge> rules = t.Merges();
  merges.reserve(rules.size());
  for (const BpeMerge& m : rules) merges.push_back(t.Piece(m.left) + " " + t.Piece(m.right));
  GgufKeys kv;
  kv.emplace_back("tokenizer.ggml.model", GgufString("gpt2"));
  kv.emplace_back("tokenizer.ggml.pre", GgufString(std::string(BpeSplitName(o.split))));
  kv.emplace_back("tokenizer.ggml.tokens", GgufStringArray(tokens));
  kv.emplace_back("tokenizer.ggml.token_type", GgufI32Array(types));
  kv.emplace_back("tokenizer.ggml.merges", GgufStringArray(merges));
  if (o.bos >= 0) kv.emplace_back("tokenizer.ggml.bos_token_id", GgufU32(o.bos));
  if (o.eos >= 0) kv.emplace_back("tokenizer.ggml.eos_token_id", GgufU32(o.eos));
  kv.emplace_back("tokenizer.ggml.add_bos_token", GgufBool(o.add_bos));
  return kv;
}

Tokenizer SpmFromSentencePieceStyleBpe(const BpeTokenizer& bpe) {
  const BpeOptions& o = bpe.options();
  STRETCH_CHECK(o.chars, "{} is not a SentencePiece-style vocabulary", bpe.source());
  const int n = bpe.vocab_size();
  constexpr float kNeverMerged = -1e10f;  // llama2.c's floor: such a piece is never merged into
  std::vector<float> scores(static_cast<size_t>(n), 0.0f);
  std::vector<uint8_t> made(static_cast<size_t>(n), 0);
  const std::vector<BpeMerge> rules = bpe.Merges();
  for (size_t rank = 0; rank < rules.size(); ++rank) {
    const auto r = static_cast<size_t>(rules[rank].result);
    if (made[r]) continue;
    made[r] = 1;
    scores[r] = -static_cast<float>(rank) - 1.0f;  // exact: ranks stay far below 2^24
  }
  SpmLayout layout;
  layout.unk = o.unk;
  layout.bos = o.bos;
  layout.eos = o.eos;
  layout.add_space_prefix = o.prepend_space;
  layout.rstrip = o.rstrip;
  layout.add_bos = o.add_bos;
  layout.types.assign(static_cast<size_t>(n), SpmTokenType::kNormal);
  std::vector<std::string> pieces(static_cast<size_t>(n));
  for (int id = 0; id < n; ++id) {
    const std::string& p = bpe.Piece(id);
    const auto k = static_cast<size_t>(id);
    pieces[k] = ReplaceAll(p, kSpace, " ");
    if (!made[k] && CodePoints(p) > 1) scores[k] = kNeverMerged;
    if (bpe.Kind(id) == BpeTokenKind::kControl) {
      layout.types[k] = id == o.unk ? SpmTokenType::kUnknown : SpmTokenType::kControl;
    } else if (p.size() == 6 && p.starts_with("<0x") && p.back() == '>') {
      layout.types[k] = SpmTokenType::kByte;
    }
  }
  if (o.unk >= 0) layout.types[static_cast<size_t>(o.unk)] = SpmTokenType::kUnknown;
  for (const auto& [text, id] : o.matched) {
    if (LooksSpecialToLlamaCpp(text)) {  // as llama.cpp's converter writes it
      layout.types[static_cast<size_t>(id)] = SpmTokenType::kControl;
      pieces[static_cast<size_t>(id)] = text;
      continue;
    }
    layout.types[static_cast<size_t>(id)] = SpmTokenType::kUserDefined;
    layout.matched.emplace_back(text, id);
  }
  return Tokenizer::FromVocabulary(bpe.source(), std::move(pieces), std::move(scores),
                                   std::move(layout));
}

BpeTokenizer SentencePieceStyleBpeFromSpm(const Tokenizer& t, DroppedMerges* dropped) {
  constexpr float kFloor = -1e10f;  // llama2.c's: a piece scored at or below it is never merged
  const int n = t.vocab_size();
  BpeOptions o;
  o.chars = true;
  o.prepend_space = t.add_space_prefix();
  o.rstrip = t.rstrip();
  o.unk = t.unk();
  o.bos = t.bos();
  o.eos = t.eos();
  o.add_bos = t.add_bos();
  o.kinds.assign(static_cast<size_t>(n), BpeTokenKind::kNormal);
  std::vector<std::string> pieces(static_cast<size_t>(n));
  std::unordered_map<std::string, int> first_id;  // the Tokenizer's spelling -> its first id
  first_id.reserve(static_cast<size_t>(n));
  for (int id = 0; id < n; ++id) {
    const auto k = static_cast<size_t>(id);
    const std::string& p = t.Piece(id);
    if (p.empty())
      Fail("{}: piece {} is empty: expected a piece (a key of model.vocab)", t.path(), id);
    if (p.find(kSpace) != std::string::npos) {
      Fail("{}: piece {} {} holds U+2581: expected none (the file spells a space so)", t.path(), id,
           Quote(p));
    }
    const SpmTokenType type = t.Type(id);
    if (type == SpmTokenType::kControl || type == SpmTokenType::kUnknown ||
        type == SpmTokenType::kUnused) {
      o.kinds[k] = BpeTokenKind::kControl;
      o.special.emplace_back(p, id);
    }
    pieces[k] = ReplaceAll(p, " ", kSpace);
    first_id.emplace(p, id);
  }
  for (const auto& [text, id] : t.user_defined()) o.matched.emplace_back(text, id);

  // SentencePieceExtractor's list: per piece (first ids, scored above the floor), each split into
  // two pieces, ordered by (left id, right id); then a stable sort by the piece's score.
  struct Merge {
    float score;
    int left, right;
  };
  std::vector<Merge> merges, local;
  for (int id = 0; id < n; ++id) {
    const float score = t.Score(id);
    if (!(score > kFloor)) continue;
    const std::string& p = t.Piece(id);
    if (first_id.at(p) != id) continue;  // a duplicate: BpeTokenizer refuses it by name below
    local.clear();
    for (size_t cut = 1; cut < p.size(); ++cut) {
      const auto left = first_id.find(p.substr(0, cut));
      if (left == first_id.end()) continue;
      const auto right = first_id.find(p.substr(cut));
      if (right == first_id.end()) continue;
      const auto kind = [&](int i) { return o.kinds[static_cast<size_t>(i)]; };
      if (kind(id) != BpeTokenKind::kNormal || kind(left->second) != BpeTokenKind::kNormal ||
          kind(right->second) != BpeTokenKind::kNormal) {
        if (dropped != nullptr) {
          if (dropped->count == 0) {
            dropped->first = fmt::format("{} + {} -> {} (id {})", Quote(left->first),
                                         Quote(right->first), Quote(p), id);
          }
          ++dropped->count;
        }
        continue;
      }
      local.push_back({score, left->second, right->second});
    }
    std::sort(local.begin(), local.end(), [](const Merge& x, const Merge& y) {
      return std::pair(x.left, x.right) < std::pair(y.left, y.right);
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const Merge& x, const Merge& y) { return x.score > y.score; });
  std::vector<std::pair<std::string, std::string>> named;
  named.reserve(merges.size());
  for (const Merge& m : merges) {
    named.emplace_back(pieces[static_cast<size_t>(m.left)], pieces[static_cast<size_t>(m.right)]);
  }
  return BpeTokenizer::FromVocabulary(t.path(), std::move(pieces), named, std::move(o));
}

}  // namespace stretch
