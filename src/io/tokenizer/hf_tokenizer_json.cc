// Hugging Face tokenizer.json files of the SentencePiece kind (src/io/tokenizer/hf_tokenizer_json.h).
// Written from the descriptions of transformers' convert_slow_tokenizer.py (LlamaConverter,
// SpmConverter, SentencePieceExtractor) and of huggingface/tokenizers' models/bpe (model.rs
// merge_word, word.rs merge_all, serialization.rs), normalizers/prepend.rs, normalizers/replace.rs
// and pre_tokenizers/metaspace.rs; no code is taken from them.
//
// Why score(piece) = -(rank of the first merge that makes it) gives Hugging Face's ids.
//
// Both encoders start from the same symbols: the text with its "▁" prefix, one symbol per
// character (the character's piece, else one "<0xXX>" piece per byte: model.rs merge_word with
// byte_fallback; llama2.c's encode()), "▁" being ' ' in llama2.c's spelling. Both then repeat one
// step: among adjacent pairs that may merge, merge one, until none may. Two things must agree.
//
// 1. Which pairs may merge. Hugging Face: the pairs model.merges lists. llama2.c: any two pieces
//    whose concatenation is a piece scored above -1e10. A piece that no listed merge makes is
//    scored below that floor, so llama2.c never merges into it (and Hugging Face never makes it);
//    every other piece has a merge, and the reader refuses the file unless every split of such a
//    piece into two pieces is listed (SentencePieceExtractor lists every split, so converted files
//    pass). Respelling "▁" as ' ' commutes with concatenation, and merges into or out of <unk>,
//    <s>, </s> (whose llama2.c spelling differs) are refused, so the two sets of pairs are equal.
//
// 2. Which pair merges first. Hugging Face takes the pair of lowest rank, the leftmost of equal
//    pairs (a min-heap on (rank, position)); llama2.c the pair whose result has the highest score,
//    the leftmost of equal scores. With s(P) = -first(P), first(P) the rank of P's first merge,
//    the two choices agree whenever every piece's merges stand together in the list (ranks of
//    different pieces never interleave), and the best piece P among the candidates has one split
//    among them, or its splits among them are ranked in their order of position:
//      - contiguous blocks order pieces the same way by any of their ranks, so the lowest-ranked
//        candidate and the highest-scored candidate make the same piece P;
//      - two candidates that make P with one split are the same pair: both take the leftmost.
//    SentencePieceExtractor's lists (transformers 4.x) are always contiguous: a piece's splits are
//    appended together and share its score, and the sort by score is stable. The older pairwise
//    extractor and transformers 5's (score, len(left), len(right)) sort interleave pieces of equal
//    score (LLaMA's 15 runs of spaces at -1e9; HfSentencePieceJson::interleaved_pieces counts
//    such pieces). And even in a contiguous list a piece can be a candidate with two splits at
//    once (x y z with x+y = y+z = P, as "▁▁" "▁" "▁▁"), where Hugging Face merges the
//    lower-ranked split first and llama2.c (and SentencePiece) the leftmost. In these two cases
//    the ids can differ (the test builds a file where they do); with LLaMA's vocabulary the test
//    finds no difference on whole books and on every run of up to 200 spaces, for both orders.
//
// Both are otherwise the same greedy process, so the same choices give the same ids.
#include "src/io/tokenizer/hf_tokenizer_json.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/io/output_file.h"
#include "src/io/text.h"

namespace stretch {
namespace {

using nlohmann::json;

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's space
// Ids 0/1/2 in the file, and <s> and </s> as llama2.c's tokenizer.py export() spells them.
constexpr std::string_view kSpecialNames[3] = {"<unk>", "<s>", "</s>"};
constexpr std::string_view kLlama2cBos = "\n<s>\n";
constexpr std::string_view kLlama2cEos = "\n</s>\n";

// llama2.c's encode() never merges into a piece scored at or below -1e10 (src/io/tokenizer/tokenizer.cc);
// pieces no merge makes are scored below it.
constexpr float kMergeFloor = -1e10f;
constexpr float kNeverMergedScore = -2e10f;
// Ranks become scores -rank: every integer up to 2^24 is exact in a float, so at most 2^24
// merges; the same bound on pieces as tokenizer.cc's. The file is read whole: LLaMA's is 1.8 MB,
// the largest published tokenizer.json files tens of MB.
constexpr int64_t kMaxPieces = int64_t{1} << 24;
constexpr int64_t kMaxMerges = int64_t{1} << 24;
constexpr int64_t kMaxFileBytes = int64_t{1} << 30;

// ---- strings ----------------------------------------------------------------------------------

// RFC 3629: no overlong forms, no surrogates, at most U+10FFFF.
bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    size_t len = 1;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (b0 < 0x80) {
      ++i;
      continue;
    } else if (b0 >= 0xC2 && b0 <= 0xDF) {
      len = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      len = 3;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      len = 4;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    }
    i += len;
  }
  return true;
}

bool IsHexDigit(char c, bool upper_only) {
  return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (!upper_only && c >= 'a' && c <= 'f');
}

// "<0xAB>" in either hex case (what llama2.c's encoder takes for a byte piece).
bool AnyCaseBytePiece(std::string_view p) {
  return p.size() == 6 && p.substr(0, 3) == "<0x" && p[5] == '>' && IsHexDigit(p[3], false) &&
         IsHexDigit(p[4], false);
}

// "<0xAB>" with upper-case hex only: model.rs merge_word looks bytes up as format!("<{b:#04X}>").
bool CanonicalBytePiece(std::string_view p) {
  return AnyCaseBytePiece(p) && IsHexDigit(p[3], true) && IsHexDigit(p[4], true);
}

std::string BytePiece(int b) { return fmt::format("<0x{:02X}>", b); }

// s as a JSON string: quotes, backslashes and control characters escaped as serde_json escapes
// them, everything else (UTF-8 included) as is.
void AppendJsonString(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// ---- reading JSON -----------------------------------------------------------------------------

// A JSON value's kind, for messages: "the string \"WordPiece\"", "the number -2", "an array of 3".
std::string KindOf(const json* v) {
  if (v == nullptr) return "missing";
  if (v->is_string()) return fmt::format("the string {}", Quote(v->get_ref<const std::string&>()));
  if (v->is_number()) return fmt::format("the number {}", v->dump());
  if (v->is_boolean()) return v->get<bool>() ? "true" : "false";
  if (v->is_array()) return fmt::format("an array of {}", v->size());
  if (v->is_object()) return "an object";
  return "null";
}

// obj[key], or nullptr when absent (or obj is no object).
const json* Member(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

bool IsNull(const json* v) { return v == nullptr || v->is_null(); }

// One file's fields, for messages: "tokenizer.json: model.merges[3] is the number 7, expected a
// string \"a b\" or a pair of strings".
class Fields {
 public:
  explicit Fields(const std::string& path) : path_(path) {}
  const std::string& path() const { return path_; }

  [[noreturn]] void Bad(std::string_view field, const json* v, std::string_view expected) const {
    Fail("{}: {} is {}, expected {}", path_, field, KindOf(v), expected);
  }
  const json& Object(const json& obj, std::string_view key, std::string_view field) const {
    const json* v = Member(obj, key);
    if (v == nullptr || !v->is_object()) Bad(field, v, "an object");
    return *v;
  }
  const std::string& String(const json& obj, std::string_view key, std::string_view field) const {
    const json* v = Member(obj, key);
    if (v == nullptr || !v->is_string()) Bad(field, v, "a string");
    return v->get_ref<const std::string&>();
  }
  // obj[key] must be the string `want`.
  void Expect(const json& obj, std::string_view key, std::string_view field, std::string_view want,
              std::string_view why) const {
    const json* v = Member(obj, key);
    if (v == nullptr || !v->is_string() || v->get_ref<const std::string&>() != want) {
      Bad(field, v, fmt::format("{}{}", Quote(want), why));
    }
  }
  int Id(const json& v, std::string_view field) const {
    if (!v.is_number_unsigned() || v.get<uint64_t>() >= static_cast<uint64_t>(kMaxPieces)) {
      Bad(field, &v, fmt::format("a token id (an integer from 0 to {})", kMaxPieces - 1));
    }
    return static_cast<int>(v.get<uint64_t>());
  }

 private:
  const std::string& path_;
};

// The file's text, bounded before it is read.
std::string ReadBoundedFile(const std::string& path) {
  return ReadInputFile(path, "a tokenizer.json", kMaxFileBytes);
}

json ParseFile(const std::string& path) {
  const std::string text = ReadBoundedFile(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    Fail("{}: not valid JSON: {}", path, e.what());
  }
}

// ---- the parts besides the model ---------------------------------------------------------------

// The legacy normalizer: Prepend "▁" and Replace " " -> "▁", in either order (both give "▁" +
// the text with its spaces replaced; normalizers/prepend.rs prepends only to a non-empty text).
void CheckLegacyNormalizer(const Fields& f, const json& norm) {
  if (!norm.is_object()) f.Bad("normalizer", &norm, "an object");
  std::vector<std::pair<std::string, const json*>> steps;
  if (f.String(norm, "type", "normalizer.type") == "Sequence") {
    const json* list = Member(norm, "normalizers");
    if (list == nullptr || !list->is_array()) f.Bad("normalizer.normalizers", list, "an array");
    for (size_t k = 0; k < list->size(); ++k) {
      steps.emplace_back(fmt::format("normalizer.normalizers[{}]", k), &(*list)[k]);
    }
  } else {
    steps.emplace_back("normalizer", &norm);
  }
  bool prepend = false, replace = false;
  for (const auto& [field, step] : steps) {
    if (!step->is_object()) f.Bad(field, step, "an object");
    const std::string& type = f.String(*step, "type", field + ".type");
    if (type == "Prepend" && !prepend) {
      f.Expect(*step, "prepend", field + ".prepend", kSpaceSymbol,
               " (SentencePiece's dummy prefix)");
      prepend = true;
    } else if (type == "Replace" && !replace) {
      const json& pattern = f.Object(*step, "pattern", field + ".pattern");
      f.Expect(pattern, "String", field + ".pattern.String", " ", " (every space)");
      f.Expect(*step, "content", field + ".content", kSpaceSymbol, "");
      replace = true;
    } else {
      Fail(
          "{}: {}.type is {}{}, expected only Prepend \"▁\" and Replace \" \" -> \"▁\" "
          "(LlamaConverter's legacy normalizer; others would change the text before BPE)",
          f.path(), field, Quote(type), type == "Prepend" || type == "Replace" ? " again" : "");
    }
  }
  if (!replace) {
    Fail("{}: normalizer has no Replace \" \" -> \"▁\": expected one (spaces are \"▁\" in pieces)",
         f.path());
  }
  if (!prepend) {
    Fail(
        "{}: normalizer has no Prepend \"▁\": expected one (without it Hugging Face puts no \"▁\" "
        "before the text, which llama2.c's encoder always does)",
        f.path());
  }
}

// The non-legacy pre_tokenizer: Metaspace "▁", prepend_scheme "first" or "always" (the same for
// a text without special tokens in it), split false. pre_tokenizers/metaspace.rs: an absent
// prepend_scheme is "always" unless add_prefix_space is false; an absent split is true.
void CheckMetaspace(const Fields& f, const json& pre) {
  if (!pre.is_object()) f.Bad("pre_tokenizer", &pre, "an object");
  const std::string& type = f.String(pre, "type", "pre_tokenizer.type");
  if (type != "Metaspace") {
    Fail(
        "{}: pre_tokenizer.type is {}, expected \"Metaspace\" (with the normalizer null; or a "
        "legacy normalizer Prepend + Replace \"▁\" with the pre_tokenizer null)",
        f.path(), Quote(type));
  }
  f.Expect(pre, "replacement", "pre_tokenizer.replacement", kSpaceSymbol, "");
  const json* add = Member(pre, "add_prefix_space");
  if (!IsNull(add) && !add->is_boolean()) {
    f.Bad("pre_tokenizer.add_prefix_space", add, "true or false");
  }
  const bool add_prefix = IsNull(add) || add->get<bool>();
  const json* scheme = Member(pre, "prepend_scheme");
  std::string s = add_prefix ? "always" : "never";
  if (!IsNull(scheme)) {
    if (!scheme->is_string()) f.Bad("pre_tokenizer.prepend_scheme", scheme, "a string");
    s = scheme->get<std::string>();
    if (!add_prefix && s != "never") {
      Fail(
          "{}: pre_tokenizer.add_prefix_space is false but prepend_scheme is {}: Hugging Face "
          "refuses this (\"add_prefix_space does not match declared prepend_scheme\")",
          f.path(), Quote(s));
    }
  }
  if (s != "first" && s != "always") {
    Fail(
        "{}: pre_tokenizer.prepend_scheme is {}, expected \"first\" or \"always\" (without the "
        "prefix Hugging Face puts no \"▁\" before the text, which llama2.c's encoder always does)",
        f.path(), Quote(s));
  }
  const json* split = Member(pre, "split");
  if (IsNull(split) || !split->is_boolean() || split->get<bool>()) {
    Fail(
        "{}: pre_tokenizer.split is {}, expected false (split true, tokenizers' default when "
        "missing, runs BPE on each \"▁\"-led word apart, so \"▁▁\" never forms across words; "
        "llama2.c's encoder runs it on the whole text)",
        f.path(), IsNull(split) ? "missing or null" : KindOf(split));
  }
}

// Which of the two forms the file is.
HfSpacePrefix ReadSpaceHandling(const Fields& f, const json& root) {
  const json* norm = Member(root, "normalizer");
  const json* pre = Member(root, "pre_tokenizer");
  if (!IsNull(norm) && IsNull(pre)) {
    CheckLegacyNormalizer(f, *norm);
    return HfSpacePrefix::kAlways;
  }
  if (IsNull(norm) && !IsNull(pre)) {
    CheckMetaspace(f, *pre);
    return HfSpacePrefix::kUnlessSpace;
  }
  Fail(
      "{}: normalizer is {} and pre_tokenizer is {}: expected a normalizer Sequence [Prepend "
      "\"▁\", Replace \" \" -> \"▁\"] with the pre_tokenizer null (LlamaConverter, legacy), or a "
      "pre_tokenizer Metaspace with the normalizer null (non-legacy)",
      f.path(), IsNull(norm) ? "null" : "set", IsNull(pre) ? "null" : "set");
}

// LlamaConverter's decoder: Replace "▁" -> " ", ByteFallback, Fuse, and Strip(" ", 1, 0) when it
// adds a prefix. Decoding is the project's (Tokenizer::Decode), which these steps describe.
void CheckDecoder(const Fields& f, const json& root) {
  const json* dec = Member(root, "decoder");
  constexpr std::string_view kExpected =
      "LlamaConverter's decoder Sequence [Replace \"▁\" -> \" \", ByteFallback, Fuse, Strip \" \" "
      "1 0]";
  if (dec == nullptr || !dec->is_object()) f.Bad("decoder", dec, kExpected);
  f.Expect(*dec, "type", "decoder.type", "Sequence", fmt::format(" ({})", kExpected));
  const json* list = Member(*dec, "decoders");
  if (list == nullptr || !list->is_array() || list->size() < 3 || list->size() > 4) {
    f.Bad("decoder.decoders", list, fmt::format("an array of 3 or 4 steps ({})", kExpected));
  }
  static constexpr std::string_view kTypes[4] = {"Replace", "ByteFallback", "Fuse", "Strip"};
  for (size_t k = 0; k < list->size(); ++k) {
    const std::string field = fmt::format("decoder.decoders[{}]", k);
    const json& step = (*list)[k];
    if (!step.is_object()) f.Bad(field, &step, "an object");
    f.Expect(step, "type", field + ".type", kTypes[k], fmt::format(" ({})", kExpected));
    if (k == 0) {
      const json& pattern = f.Object(step, "pattern", field + ".pattern");
      f.Expect(pattern, "String", field + ".pattern.String", kSpaceSymbol, "");
      f.Expect(step, "content", field + ".content", " ", "");
    } else if (k == 3) {
      f.Expect(step, "content", field + ".content", " ", "");
      const json* start = Member(step, "start");
      const json* stop = Member(step, "stop");
      if (start == nullptr || !start->is_number_unsigned() || start->get<uint64_t>() != 1) {
        f.Bad(field + ".start", start, "1 (one leading space, the prefix's)");
      }
      if (stop == nullptr || !stop->is_number_unsigned() || stop->get<uint64_t>() != 0) {
        f.Bad(field + ".stop", stop, "0");
      }
    }
  }
}

struct Template {
  bool bos = false;
  bool eos = false;
};

// The post_processor: null (nothing added) or a TemplateProcessing whose single is [$A] with
// <s> before it and/or </s> after it (LlamaTokenizerFast.update_post_processor), the special
// tokens being ids 1 and 2.
Template ReadPostProcessor(const Fields& f, const json& root) {
  const json* pp = Member(root, "post_processor");
  if (IsNull(pp)) return {};
  if (!pp->is_object()) f.Bad("post_processor", pp, "an object");
  f.Expect(*pp, "type", "post_processor.type", "TemplateProcessing",
           " (LlamaTokenizerFast's) or null");
  const json* single = Member(*pp, "single");
  if (single == nullptr || !single->is_array()) f.Bad("post_processor.single", single, "an array");
  std::vector<std::string> items;  // "<s>", "$A", "</s>", ...
  for (size_t k = 0; k < single->size(); ++k) {
    const std::string field = fmt::format("post_processor.single[{}]", k);
    const json& item = (*single)[k];
    const json* special = Member(item, "SpecialToken");
    const json* sequence = Member(item, "Sequence");
    if (special != nullptr && special->is_object()) {
      items.push_back(f.String(*special, "id", field + ".SpecialToken.id"));
    } else if (sequence != nullptr && sequence->is_object()) {
      items.push_back("$" + f.String(*sequence, "id", field + ".Sequence.id"));
    } else {
      f.Bad(field, &item, "{\"SpecialToken\": {...}} or {\"Sequence\": {...}}");
    }
  }
  const auto a = std::find(items.begin(), items.end(), "$A");
  Template t;
  t.bos = a != items.end() && a != items.begin() && *(a - 1) == "<s>";
  t.eos = a != items.end() && a + 1 != items.end() && *(a + 1) == "</s>";
  if (a == items.end() || items.size() != 1u + t.bos + t.eos || (t.bos && a != items.begin() + 1)) {
    Fail(
        "{}: post_processor.single is {}, expected [$A] with \"<s>\" before it and/or \"</s>\" "
        "after it (other templates are not implemented)",
        f.path(), Quote(single->dump()));
  }
  const json& table = f.Object(*pp, "special_tokens", "post_processor.special_tokens");
  for (int id : {Tokenizer::kBos, Tokenizer::kEos}) {
    if (!(id == Tokenizer::kBos ? t.bos : t.eos)) continue;
    const std::string_view name = kSpecialNames[id];
    const std::string field = fmt::format("post_processor.special_tokens[{}]", Quote(name));
    const json* entry = Member(table, name);
    if (entry == nullptr || !entry->is_object()) f.Bad(field, entry, "an object");
    const json* ids = Member(*entry, "ids");
    if (ids == nullptr || !ids->is_array() || ids->size() != 1 || !(*ids)[0].is_number_unsigned() ||
        (*ids)[0].get<uint64_t>() != static_cast<uint64_t>(id)) {
      f.Bad(field + ".ids", ids, fmt::format("[{}]", id));
    }
  }
  return t;
}

// Options of Hugging Face's BPE that change the ids: refused unless off.
void CheckModelOptions(const Fields& f, const json& model) {
  const std::string& type = f.String(model, "type", "model.type");
  if (type != "BPE") {
    Fail("{}: model.type is {}, expected \"BPE\" (SentencePiece BPE as LlamaConverter writes it)",
         f.path(), Quote(type));
  }
  const json* fallback = Member(model, "byte_fallback");
  if (fallback == nullptr || !fallback->is_boolean() || !fallback->get<bool>()) {
    f.Bad("model.byte_fallback", fallback,
          "true (without byte fallback Hugging Face gives <unk> for an unknown character where "
          "llama2.c's encoder gives its bytes' pieces)");
  }
  if (const json* d = Member(model, "dropout");
      !IsNull(d) && !(d->is_number() && d->get<double>() == 0.0)) {
    f.Bad("model.dropout", d, "null (BPE dropout is not implemented)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* v = Member(model, key);
    if (!IsNull(v) && !(v->is_string() && v->get_ref<const std::string&>().empty())) {
      f.Bad(fmt::format("model.{}", key), v, "null or \"\" (not implemented)");
    }
  }
  if (const json* v = Member(model, "ignore_merges");
      !IsNull(v) && !(v->is_boolean() && !v->get<bool>())) {
    f.Bad("model.ignore_merges", v, "false (a whole-word lookup before BPE is not implemented)");
  }
  // fuse_unk acts only on <unk>, which byte fallback with all 256 byte pieces never gives.
  if (const json* v = Member(model, "fuse_unk"); !IsNull(v) && !v->is_boolean()) {
    f.Bad("model.fuse_unk", v, "true or false");
  }
  if (const json* v = Member(model, "unk_token");
      !IsNull(v) && !(v->is_string() && v->get_ref<const std::string&>() == kSpecialNames[0])) {
    f.Bad("model.unk_token", v, "\"<unk>\" (the piece at id 0) or null");
  }
}

}  // namespace

// ---- detection --------------------------------------------------------------------------------

namespace {

// A string anywhere below `v` that contains `part`.
bool Mentions(const json& v, std::string_view part) {
  if (v.is_string()) return v.get_ref<const std::string&>().find(part) != std::string::npos;
  if (v.is_object() || v.is_array()) {
    for (const json& item : v) {
      if (Mentions(item, part)) return true;
    }
  }
  return false;
}

}  // namespace

bool LooksLikeSentencePieceTokenizerJson(const std::string& path) {
  try {
    // The first non-blank byte must be '{' (read from the first 4 KiB: a tokenizer.json does
    // not start with more blanks). A device or FIFO reads as "" and is never opened.
    const std::string head = ReadInputHead(path, 4096);
    const size_t first = head.find_first_not_of(" \n\r\t");
    if (first == std::string::npos || head[first] != '{') return false;
    const std::string text = ReadBoundedFile(path);
    // The vocabulary and the merges (nearly all of the file) are parsed over and dropped: a key
    // event returning false discards the key and its value. Of model.vocab only its size and the
    // pieces of ids 0, 1, 2 are kept.
    std::string top;    // the top-level key whose value is being parsed
    std::string sub;    // under "model", the key whose value is being parsed
    std::string piece;  // the model.vocab key whose id comes next
    size_t n_vocab = 0;
    std::array<std::string, 3> low;  // model.vocab's pieces of ids 0, 1, 2
    const json::parser_callback_t keep = [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth == 3 && top == "model" && sub == "vocab") {
        if (event == json::parse_event_t::key) {
          piece = parsed.get<std::string>();
          ++n_vocab;
          return false;
        }
        if (event == json::parse_event_t::value && parsed.is_number_unsigned() &&
            parsed.get<uint64_t>() < 3) {
          low[parsed.get<uint64_t>()] = piece;
        }
        return true;  // the value of a dropped key is not stored
      }
      if (event != json::parse_event_t::key) return true;
      const std::string& key = parsed.get_ref<const std::string&>();
      if (depth == 1) top = key;
      if (depth == 2 && top == "model") sub = key;
      return !(depth == 2 && top == "model" && key == "merges");
    };
    const json root = json::parse(text, keep, /*allow_exceptions=*/false);
    if (!root.is_object()) return false;
    const json* model = Member(root, "model");
    const json* type = model != nullptr ? Member(*model, "type") : nullptr;
    const json* fallback = model != nullptr ? Member(*model, "byte_fallback") : nullptr;
    if (type == nullptr || *type != "BPE" || fallback == nullptr || *fallback != true) return false;
    const json* norm = Member(root, "normalizer");
    const json* pre = Member(root, "pre_tokenizer");
    // Gemma's layout (a lone Replace " " -> "▁" and no Metaspace, merges applied by rank over the
    // text between added tokens) is BpeTokenizer's SentencePiece-style mode (bpe_tokenizer.h),
    // not the legacy Prepend + Replace layout read here.
    const json* norm_type = norm != nullptr && norm->is_object() ? Member(*norm, "type") : nullptr;
    if (norm_type != nullptr && *norm_type == "Replace" &&
        !(pre != nullptr && Mentions(*pre, "Metaspace"))) {
      return false;
    }
    if (!((norm != nullptr && Mentions(*norm, kSpaceSymbol)) ||
          (pre != nullptr && Mentions(*pre, "Metaspace")))) {
      return false;
    }
    // A layout of its own is BpeTokenizer's SentencePiece-style mode with
    // BpeOptions::prepend_space, which keeps each added token's id, kind and rstrip, not
    // llama2.c's layout read here: model.vocab without <unk>, <s>, </s> at ids 0, 1, 2, or an
    // added token that is not special (Phi-3's </s>), strips white space (Phi-3's) or is a special
    // token inside model.vocab beyond id 2 (Mistral v0.3's [INST]). Special tokens added after
    // model.vocab (a LLaMA 2 fine-tune's <pad>) stay with llama2.c's layout, which appends them.
    const bool legacy = norm_type != nullptr && *norm_type == "Sequence" &&
                        !(pre != nullptr && Mentions(*pre, "Metaspace"));
    if (!legacy) return true;
    for (size_t id = 0; id < 3; ++id) {
      if (low[id] != kSpecialNames[id]) return false;
    }
    const json* added = Member(root, "added_tokens");
    for (size_t k = 0; added != nullptr && added->is_array() && k < added->size(); ++k) {
      const json& t = (*added)[k];
      if (!t.is_object()) continue;  // refused later
      const json* special = Member(t, "special");
      const json* id = Member(t, "id");
      if (special == nullptr || id == nullptr || !id->is_number_unsigned()) continue;
      if (*special == false) return false;
      for (const char* strip : {"lstrip", "rstrip", "single_word"}) {
        const json* v = Member(t, strip);
        if (v != nullptr && *v == true) return false;
      }
      if (id->get<uint64_t>() >= 3 && id->get<uint64_t>() < n_vocab) return false;
    }
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// ---- reading ----------------------------------------------------------------------------------

HfSentencePieceJson ReadHfSentencePieceJson(const std::string& path) {
  const Fields f(path);
  const json root = ParseFile(path);
  if (!root.is_object()) f.Bad("the top level", &root, "an object");
  const json& model = f.Object(root, "model", "model");
  CheckModelOptions(f, model);
  HfSentencePieceJson out;
  out.prefix = ReadSpaceHandling(f, root);
  CheckDecoder(f, root);

  // Ids: model.vocab holds 0..v-1, added tokens may add v, v+1, ... (never made by a merge).
  const json& vocab = f.Object(model, "vocab", "model.vocab");
  const json* added = Member(root, "added_tokens");
  if (!IsNull(added) && !added->is_array()) f.Bad("added_tokens", added, "an array");
  const size_t n_added = IsNull(added) ? 0 : added->size();
  if (static_cast<int64_t>(vocab.size() + n_added) > kMaxPieces) {
    Fail("{}: model.vocab and added_tokens have {} entries: expected at most {}", path,
         vocab.size() + n_added, kMaxPieces);
  }
  const int n_vocab = static_cast<int>(vocab.size());
  std::vector<std::string> hf(static_cast<size_t>(n_vocab));  // Hugging Face's spelling, by id
  std::vector<uint8_t> given(static_cast<size_t>(n_vocab), 0);
  std::unordered_map<std::string, int> hf_id;  // model.vocab: piece -> id
  hf_id.reserve(static_cast<size_t>(n_vocab));
  for (const auto& [piece, v] : vocab.items()) {
    const std::string field = fmt::format("model.vocab[{}]", Quote(piece));
    const int id = f.Id(v, field);
    if (id >= n_vocab) {
      Fail("{}: {} is {}: expected the ids 0..{} (model.vocab has {} entries), without gaps", path,
           field, id, n_vocab - 1, n_vocab);
    }
    if (given[static_cast<size_t>(id)]) {
      Fail("{}: {} is {}, which model.vocab also gives to {}", path, field, id,
           Quote(hf[static_cast<size_t>(id)]));
    }
    given[static_cast<size_t>(id)] = 1;
    hf[static_cast<size_t>(id)] = piece;
    hf_id.emplace(piece, id);
  }
  if (n_vocab < 3) {
    Fail("{}: model.vocab has {} entries: expected at least 3 (<unk>, <s>, </s> at ids 0, 1, 2)",
         path, n_vocab);
  }
  for (int id = 0; id < 3; ++id) {
    if (hf[static_cast<size_t>(id)] != kSpecialNames[id]) {
      Fail(
          "{}: model.vocab gives id {} to {}, expected {} (stretch keeps <unk>, <s>, </s> at ids "
          "0, 1, 2, as llama2.c and LlamaConverter do)",
          path, id, Quote(hf[static_cast<size_t>(id)]), Quote(kSpecialNames[id]));
    }
  }
  std::vector<std::pair<int, std::string>> extra;  // added tokens beyond model.vocab
  for (size_t k = 0; k < n_added; ++k) {
    const std::string field = fmt::format("added_tokens[{}]", k);
    const json& t = (*added)[k];
    if (!t.is_object()) f.Bad(field, &t, "an object");
    const json* idv = Member(t, "id");
    if (idv == nullptr) f.Bad(field + ".id", idv, "a token id");
    const int id = f.Id(*idv, field + ".id");
    const std::string& content = f.String(t, "content", field + ".content");
    const json* special = Member(t, "special");
    if (special == nullptr || !special->is_boolean()) {
      f.Bad(field + ".special", special, "true or false");
    }
    if (!special->get<bool>()) {
      Fail(
          "{}: {} ({}) is not special: Hugging Face matches such tokens in the text before BPE, "
          "which stretch does not implement",
          path, field, Quote(content));
    }
    if (id < n_vocab) {
      if (content != hf[static_cast<size_t>(id)]) {
        Fail("{}: {}.content is {} for id {}, which model.vocab gives to {}", path, field,
             Quote(content), id, Quote(hf[static_cast<size_t>(id)]));
      }
    } else {
      extra.emplace_back(id, content);
    }
  }
  std::sort(extra.begin(), extra.end());
  for (size_t k = 0; k < extra.size(); ++k) {
    if (extra[k].first != n_vocab + static_cast<int>(k)) {
      Fail(
          "{}: added_tokens give id {} ({}) where id {} comes next: expected the ids after "
          "model.vocab's without gaps or repeats",
          path, extra[k].first, Quote(extra[k].second), n_vocab + static_cast<int>(k));
    }
  }
  const int n = n_vocab + static_cast<int>(extra.size());

  // llama2.c's spelling, which must be one-to-one.
  std::vector<std::string> pieces(static_cast<size_t>(n));
  std::unordered_map<std::string, int> l2c_id;  // llama2.c's spelling -> id
  l2c_id.reserve(static_cast<size_t>(n));
  for (int id = 0; id < n; ++id) {
    std::string& p = pieces[static_cast<size_t>(id)];
    if (id == Tokenizer::kUnk) {
      p = kSpecialNames[0];
    } else if (id == Tokenizer::kBos) {
      p = kLlama2cBos;
    } else if (id == Tokenizer::kEos) {
      p = kLlama2cEos;
    } else if (id < n_vocab) {
      const std::string& s = hf[static_cast<size_t>(id)];
      if (s.empty()) Fail("{}: model.vocab[\"\"] is {}: expected no empty piece", path, id);
      if (s.find(' ') != std::string::npos) {
        Fail(
            "{}: model.vocab[{}] holds a space: expected \"▁\" for a space (the normalizer turns "
            "every space into \"▁\", and llama2.c spells \"▁\" as a space)",
            path, Quote(s));
      }
      if (AnyCaseBytePiece(s) && !CanonicalBytePiece(s)) {
        Fail(
            "{}: model.vocab[{}] is a byte piece in lower case: expected {} (Hugging Face looks "
            "bytes up in upper case, llama2.c's encoder in either)",
            path, Quote(s), Quote(BytePiece(std::stoi(s.substr(3, 2), nullptr, 16))));
      }
      p = ReplaceAll(s, kSpaceSymbol, " ");
    } else {
      p = extra[static_cast<size_t>(id - n_vocab)].second;  // raw text, never merged into
      if (p.empty()) Fail("{}: the added token of id {} is empty: expected its text", path, id);
    }
    if (const auto [it, fresh] = l2c_id.emplace(p, id); !fresh) {
      Fail(
          "{}: ids {} and {} are both {} in llama2.c's spelling (\"▁\" read as a space): expected "
          "distinct pieces",
          path, it->second, id, Quote(p));
    }
  }
  for (int b = 0; b < 256; ++b) {
    if (!hf_id.contains(BytePiece(b))) {
      Fail(
          "{}: model.vocab has no {}: expected all 256 byte pieces \"<0x00>\"..\"<0xFF>\" for "
          "byte_fallback (Hugging Face gives <unk> for a character whose bytes are not all there)",
          path, Quote(BytePiece(b)));
    }
  }
  if (const auto it = l2c_id.find(" "); it != l2c_id.end() && it->second < n_vocab) {
    out.space_id = it->second;
  } else {
    Fail("{}: model.vocab has no \"▁\": expected the piece of a space", path);
  }

  // The merges, rank = position among the entries (tokenizers skips "#version" lines).
  const json* list = Member(model, "merges");
  if (list == nullptr || !list->is_array()) {
    f.Bad("model.merges", list, "an array of \"a b\" strings or [\"a\", \"b\"] pairs");
  }
  if (static_cast<int64_t>(list->size()) > kMaxMerges) {
    Fail("{}: model.merges has {} entries: expected at most {} (ranks must be exact as floats)",
         path, list->size(), kMaxMerges);
  }
  auto pair_key = [](int a, int b) {
    return static_cast<uint64_t>(a) << 32 | static_cast<uint32_t>(b);
  };
  std::unordered_map<uint64_t, size_t> listed;  // (left, right) -> index in model.merges
  listed.reserve(list->size());
  std::vector<int> first_rank(static_cast<size_t>(n), -1), last_rank(static_cast<size_t>(n), -1);
  std::vector<int> merges_of(static_cast<size_t>(n), 0);
  int rank = 0;
  std::string merged;
  for (size_t k = 0; k < list->size(); ++k) {
    const json& m = (*list)[k];
    const std::string field = fmt::format("model.merges[{}]", k);
    std::string_view a, b;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      if (s.starts_with("#version")) continue;
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        f.Bad(field, &m, "two pieces separated by one space");
      }
      a = std::string_view(s).substr(0, space);
      b = std::string_view(s).substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get_ref<const std::string&>();
      b = m[1].get_ref<const std::string&>();
    } else {
      f.Bad(field, &m, "a string \"a b\" or a pair of strings [\"a\", \"b\"]");
    }
    int ids[3];
    merged.assign(a);
    merged.append(b);
    const std::string_view parts[3] = {a, b, merged};
    for (int j = 0; j < 3; ++j) {
      const auto it = hf_id.find(std::string(parts[j]));
      if (it == hf_id.end()) {
        Fail("{}: {} {} {}, which is not in model.vocab{}", path, field, j < 2 ? "names" : "makes",
             Quote(parts[j]), j < 2 ? "" : " (Hugging Face refuses such a merge)");
      }
      ids[j] = it->second;
      if (ids[j] < 3) {
        Fail(
            "{}: {} {} {}: expected no merge into or out of <unk>, <s>, </s> (SentencePiece never "
            "merges control pieces, and llama2.c spells <s> and </s> otherwise)",
            path, field, j < 2 ? "names" : "makes", Quote(parts[j]));
      }
    }
    if (const auto [it, fresh] = listed.emplace(pair_key(ids[0], ids[1]), k); !fresh) {
      Fail(
          "{}: {} repeats model.merges[{}] ({} {}): expected each pair once (Hugging Face would "
          "keep the later rank)",
          path, field, it->second, Quote(a), Quote(b));
    }
    const size_t made = static_cast<size_t>(ids[2]);
    if (first_rank[made] < 0) first_rank[made] = rank;
    last_rank[made] = rank;
    ++merges_of[made];
    ++rank;
  }
  out.merge_count = rank;
  for (int id = 0; id < n; ++id) {
    const size_t i = static_cast<size_t>(id);
    if (first_rank[i] >= 0 && last_rank[i] - first_rank[i] + 1 != merges_of[i]) {
      ++out.interleaved_pieces;
    }
  }

  // Every split of a merged piece into two pieces must be listed (the file's merges and
  // llama2.c's are then the same pairs; see the top of this file).
  for (int id = 0; id < n; ++id) {
    if (first_rank[static_cast<size_t>(id)] < 0) continue;
    const std::string& p = pieces[static_cast<size_t>(id)];
    for (size_t k = 1; k < p.size(); ++k) {
      const auto left = l2c_id.find(p.substr(0, k));
      if (left == l2c_id.end()) continue;
      const auto right = l2c_id.find(p.substr(k));
      if (right == l2c_id.end()) continue;
      if (!listed.contains(pair_key(left->second, right->second))) {
        auto spell = [&](int i) {
          return Quote(i < n_vocab ? hf[static_cast<size_t>(i)] : pieces[static_cast<size_t>(i)]);
        };
        Fail(
            "{}: model.merges has no {} {}, though it makes {} (first at rank {}): expected every "
            "split of a merged piece into two pieces listed, as SentencePieceExtractor lists them "
            "(llama2.c's encoder would merge that pair, Hugging Face would not)",
            path, spell(left->second), spell(right->second), spell(id),
            first_rank[static_cast<size_t>(id)]);
      }
    }
  }

  std::vector<float> scores(static_cast<size_t>(n));
  for (int id = 0; id < n; ++id) {
    const int r = first_rank[static_cast<size_t>(id)];
    scores[static_cast<size_t>(id)] = r >= 0 ? -static_cast<float>(r) : kNeverMergedScore;
  }
  const Template t = ReadPostProcessor(f, root);
  out.add_bos = t.bos;
  out.add_eos = t.eos;
  out.tokenizer = Tokenizer::FromVocabulary(path, std::move(pieces), std::move(scores));
  return out;
}

Tokenizer ReadSentencePieceTokenizerJson(const std::string& path) {
  return ReadHfSentencePieceJson(path).tokenizer;
}

std::vector<int> EncodeAsHuggingFace(const HfSentencePieceJson& t, std::string_view text) {
  // The normalizer (or Metaspace) turns every space into "▁", after which a "▁" of the text is
  // the same character: llama2.c's spelling of both is a space.
  const std::string spaced = ReplaceAll(text, kSpaceSymbol, " ");
  std::string_view body = spaced;
  std::vector<int> ids;
  if (t.add_bos) ids.push_back(Tokenizer::kBos);
  // Metaspace adds no "▁" before a text that begins with one: that first space is the prefix,
  // which Encode puts back (all but the text " ", which Encode("") would leave empty).
  if (t.prefix == HfSpacePrefix::kUnlessSpace && body.starts_with(' ')) {
    body.remove_prefix(1);
    if (body.empty()) ids.push_back(t.space_id);
  }
  if (!body.empty()) {
    const std::vector<int> text_ids = t.tokenizer.Encode(body, /*bos=*/false, /*eos=*/false);
    ids.insert(ids.end(), text_ids.begin(), text_ids.end());
  }
  if (t.add_eos) ids.push_back(Tokenizer::kEos);
  return ids;
}

// ---- writing ----------------------------------------------------------------------------------

namespace {

// Collects the reasons, keeping the first few for the message.
struct Problems {
  std::vector<std::string> first;
  size_t count = 0;
  void Add(std::string s) {
    if (first.size() < 8) first.push_back(std::move(s));
    ++count;
  }
  std::string Text() const {
    std::string out;
    for (const std::string& p : first) out += (out.empty() ? "" : "; ") + p;
    if (count > first.size()) out += fmt::format("; and {} more", count - first.size());
    return out;
  }
};

struct Merge {
  float score;  // of the merged piece
  int left, right;
};

}  // namespace

std::string SerializeSentencePieceTokenizerJson(const Tokenizer& t) {
  const int n = t.vocab_size();
  Problems problems;
  std::vector<std::string> hf(static_cast<size_t>(n));
  std::unordered_map<std::string, int> l2c_id, hf_id;
  l2c_id.reserve(static_cast<size_t>(n));
  hf_id.reserve(static_cast<size_t>(n));
  for (int id = 0; id < n; ++id) {
    const std::string& p = t.Piece(id);
    std::string& s = hf[static_cast<size_t>(id)];
    if (id < 3) {
      s = kSpecialNames[id];
    } else if (p.empty()) {
      problems.Add(fmt::format("piece {} is empty: expected none (JSON keys of model.vocab)", id));
    } else if (!IsValidUtf8(p)) {
      problems.Add(
          fmt::format("piece {} {} is not UTF-8: expected UTF-8 (JSON text)", id, Quote(p)));
    } else if (p.find(kSpaceSymbol) != std::string::npos) {
      problems.Add(fmt::format(
          "piece {} {} holds U+2581: expected none (the file spells a space so)", id, Quote(p)));
    } else if (AnyCaseBytePiece(p) && !CanonicalBytePiece(p)) {
      problems.Add(fmt::format(
          "piece {} {} is a byte piece in lower case: expected upper case (Hugging Face's)", id,
          Quote(p)));
    } else {
      s = ReplaceAll(p, " ", kSpaceSymbol);
    }
    if (const auto [it, fresh] = l2c_id.emplace(p, id); !fresh) {
      problems.Add(fmt::format("pieces {} and {} are both {}: expected distinct pieces", it->second,
                               id, Quote(p)));
    } else if (const auto [jt, fresh_hf] = hf_id.emplace(s, id); !fresh_hf && !s.empty()) {
      problems.Add(fmt::format("pieces {} and {} are both {} in the file's spelling", jt->second,
                               id, Quote(s)));
    }
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = hf_id.find(BytePiece(b));
    if (it == hf_id.end() || it->second < 3) {
      problems.Add(fmt::format("no piece {}: expected all 256 byte pieces for byte_fallback",
                               Quote(BytePiece(b))));
    }
  }
  if (!l2c_id.contains(" ")) {
    problems.Add("no piece \" \": expected one (a text's spaces are that piece, \"▁\")");
  }
  // The merges llama2.c's encoder allows (tokenizer.cc FromVocabulary: every split of a piece
  // scored above the floor into two pieces; no piece is empty), each piece's splits ordered by
  // (id of left, id of right) as SentencePieceExtractor orders them.
  std::vector<Merge> merges;
  std::vector<Merge> local;
  for (int id = 0; problems.count == 0 && id < n; ++id) {
    const float score = t.Score(id);
    if (!(score > kMergeFloor)) continue;  // never merged into (NaN too)
    const std::string& p = t.Piece(id);
    local.clear();
    for (size_t k = 1; k < p.size(); ++k) {
      const auto left = l2c_id.find(p.substr(0, k));
      if (left == l2c_id.end()) continue;
      const auto right = l2c_id.find(p.substr(k));
      if (right == l2c_id.end()) continue;
      if (id < 3 || left->second < 3 || right->second < 3) {
        problems.Add(fmt::format(
            "llama2.c's encoder merges pieces {} and {} into {}: expected no merge into or out of "
            "<unk>, <s>, </s> (the file names them by other spellings)",
            left->second, right->second, id));
        continue;
      }
      local.push_back({score, left->second, right->second});
    }
    std::sort(local.begin(), local.end(), [](const Merge& x, const Merge& y) {
      return std::pair(x.left, x.right) < std::pair(y.left, y.right);
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  if (problems.count > 0) {
    Fail("{}: cannot be written as a tokenizer.json that encodes as llama2.c's encoder does: {}",
         t.path(), problems.Text());
  }
  // SentencePieceExtractor: sorted(merges, key=score, reverse=True), a stable sort.
  std::stable_sort(merges.begin(), merges.end(),
                   [](const Merge& x, const Merge& y) { return x.score > y.score; });
  STRETCH_CHECK(static_cast<int64_t>(merges.size()) <= kMaxMerges, "{} merges", merges.size());

  std::string out;
  out.reserve(static_cast<size_t>(n) * 24 + merges.size() * 16 + 4096);
  out +=
      "{\n"
      "  \"version\": \"1.0\",\n"
      "  \"truncation\": null,\n"
      "  \"padding\": null,\n"
      "  \"added_tokens\": [\n";
  for (int id = 0; id < 3; ++id) {
    out += fmt::format(
        "    {{\n      \"id\": {},\n      \"content\": \"{}\",\n      \"single_word\": false,\n"
        "      \"lstrip\": false,\n      \"rstrip\": false,\n      \"normalized\": false,\n"
        "      \"special\": true\n    }}{}\n",
        id, kSpecialNames[id], id < 2 ? "," : "");
  }
  out +=
      "  ],\n"
      "  \"normalizer\": {\n"
      "    \"type\": \"Sequence\",\n"
      "    \"normalizers\": [\n"
      "      {\n        \"type\": \"Prepend\",\n        \"prepend\": \"▁\"\n      },\n"
      "      {\n        \"type\": \"Replace\",\n        \"pattern\": {\n          \"String\": \" "
      "\"\n"
      "        },\n        \"content\": \"▁\"\n      }\n"
      "    ]\n"
      "  },\n"
      "  \"pre_tokenizer\": null,\n"
      "  \"post_processor\": {\n"
      "    \"type\": \"TemplateProcessing\",\n"
      "    \"single\": [\n"
      "      {\n        \"SpecialToken\": {\n          \"id\": \"<s>\",\n          \"type_id\": 0\n"
      "        }\n      },\n"
      "      {\n        \"Sequence\": {\n          \"id\": \"A\",\n          \"type_id\": 0\n"
      "        }\n      }\n"
      "    ],\n"
      "    \"pair\": [\n"
      "      {\n        \"SpecialToken\": {\n          \"id\": \"<s>\",\n          \"type_id\": 0\n"
      "        }\n      },\n"
      "      {\n        \"Sequence\": {\n          \"id\": \"A\",\n          \"type_id\": 0\n"
      "        }\n      },\n"
      "      {\n        \"SpecialToken\": {\n          \"id\": \"<s>\",\n          \"type_id\": 1\n"
      "        }\n      },\n"
      "      {\n        \"Sequence\": {\n          \"id\": \"B\",\n          \"type_id\": 1\n"
      "        }\n      }\n"
      "    ],\n"
      "    \"special_tokens\": {\n"
      "      \"<s>\": {\n        \"id\": \"<s>\",\n        \"ids\": [\n          1\n        ],\n"
      "        \"tokens\": [\n          \"<s>\"\n        ]\n      }\n"
      "    }\n"
      "  },\n"
      "  \"decoder\": {\n"
      "    \"type\": \"Sequence\",\n"
      "    \"decoders\": [\n"
      "      {\n        \"type\": \"Replace\",\n        \"pattern\": {\n          \"String\": "
      "\"▁\"\n"
      "        },\n        \"content\": \" \"\n      },\n"
      "      {\n        \"type\": \"ByteFallback\"\n      },\n"
      "      {\n        \"type\": \"Fuse\"\n      },\n"
      "      {\n        \"type\": \"Strip\",\n        \"content\": \" \",\n        \"start\": 1,\n"
      "        \"stop\": 0\n      }\n"
      "    ]\n"
      "  },\n"
      "  \"model\": {\n"
      "    \"type\": \"BPE\",\n"
      "    \"dropout\": null,\n"
      "    \"unk_token\": \"<unk>\",\n"
      "    \"continuing_subword_prefix\": null,\n"
      "    \"end_of_word_suffix\": null,\n"
      "    \"fuse_unk\": true,\n"
      "    \"byte_fallback\": true,\n"
      "    \"ignore_merges\": false,\n"
      "    \"vocab\": {\n";
  for (int id = 0; id < n; ++id) {
    out += "      ";
    AppendJsonString(out, hf[static_cast<size_t>(id)]);
    out += fmt::format(": {}{}\n", id, id + 1 < n ? "," : "");
  }
  out += "    },\n    \"merges\": [\n";
  for (size_t k = 0; k < merges.size(); ++k) {
    out += "      ";
    AppendJsonString(out, hf[static_cast<size_t>(merges[k].left)] + " " +
                              hf[static_cast<size_t>(merges[k].right)]);
    out += k + 1 < merges.size() ? ",\n" : "\n";
  }
  out += "    ]\n  }\n}\n";
  return out;
}

void SaveSentencePieceTokenizerJson(const Tokenizer& t, const std::string& path) {
  const std::string text = SerializeSentencePieceTokenizerJson(t);
  AtomicFile out(path);
  out.Write(text.data(), text.size(), "the tokenizer.json");
  out.Commit();
}

std::string SerializeSentencePieceTokenizerConfig(const Tokenizer& t) {
  // The keys transformers' LlamaTokenizer(Fast) saves (tokenization_llama.py: add_bos_token,
  // add_eos_token, legacy, the special tokens), for the legacy form above: <s> before a text,
  // no </s> after it.
  nlohmann::ordered_json j;
  j["tokenizer_class"] = "LlamaTokenizer";
  j["add_bos_token"] = true;
  j["add_eos_token"] = false;
  j["bos_token"] = t.Piece(Tokenizer::kBos);
  j["eos_token"] = t.Piece(Tokenizer::kEos);
  j["unk_token"] = t.Piece(Tokenizer::kUnk);
  j["legacy"] = true;
  j["clean_up_tokenization_spaces"] = false;
  return j.dump(2) + "\n";
}

void SaveSentencePieceTokenizerConfig(const Tokenizer& t, const std::string& path) {
  const std::string text = SerializeSentencePieceTokenizerConfig(t);
  AtomicFile out(path);
  out.Write(text.data(), text.size(), "the tokenizer_config.json");
  out.Commit();
}

}  // namespace stretch
