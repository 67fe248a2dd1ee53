// SentencePiece model files. The protobuf wire format (protobuf.dev, "Encoding"): a message is a
// sequence of fields, each a varint tag (field_number << 3 | wire_type) and a value: wire type 0
// a varint (7 bits a byte, low first, at most 10 bytes), 1 eight bytes, 2 a varint length and
// that many bytes (strings, bytes, embedded messages), 5 four bytes (float: IEEE-754 binary32,
// little-endian). 3 and 4 open and close the deprecated groups, which sentencepiece_model.proto
// has none of. Field numbers and defaults from google/sentencepiece src/sentencepiece_model.proto
// (see spm_model.h); libsentencepiece's behaviour quoted below is that of its v0.1.97
// (src/model_interface.cc, bpe_model.cc, normalizer.cc, sentencepiece_processor.cc), the version
// this project links.
#include "src/io/tokenizer/spm_model.h"

#include <fmt/format.h>
#include <sentencepiece_processor.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <span>
#include <unordered_map>
#include <utility>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/io/binary_reader.h"
#include "src/io/output_file.h"
#include "src/io/text.h"

namespace stretch {
namespace {

// The largest published SentencePiece models (256k-piece vocabularies) are about 4 MB: 256 MiB
// leaves room for any real one while bounding what a hostile file makes us read and hold.
constexpr int64_t kMaxModelBytes = int64_t{256} << 20;
// As Tokenizer's bound on a llama2.c vocabulary (tokenizer.cc): 64x the largest published one.
constexpr size_t kMaxPieces = size_t{1} << 24;
// LooksLikeSentencePieceModel reads this much at most; a first piece message is tens of bytes.
constexpr int64_t kSniffBytes = int64_t{64} << 10;

// llama2.c's encode() merges into a piece only when its score is above -1e10 (tokenizer.cc).
constexpr float kMinMergeScore = -1e10f;

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";      // U+2581, SentencePiece's space
constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD
// llama2.c's tokenizer.py export() spells BOS and EOS so (run.c never prints them).
constexpr std::string_view kLlama2cBos = "\n<s>\n";
constexpr std::string_view kLlama2cEos = "\n</s>\n";

enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5,
};

std::string_view WireTypeName(uint32_t wire_type) {
  switch (wire_type) {
    case kVarint: return "0 (varint)";
    case kFixed64: return "1 (fixed64)";
    case kLengthDelimited: return "2 (length-delimited)";
    case kStartGroup: return "3 (start group)";
    case kEndGroup: return "4 (end group)";
    case kFixed32: return "5 (fixed32)";
    default: return "an undefined wire type";
  }
}

// A piece for a message: printable ASCII as it is, other bytes below 0x20 escaped.
std::string Printable(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7F) {
      out += fmt::format("\\x{:02X}", u);
    } else {
      out += c;
    }
  }
  return out;
}

// One field as read: the tag's number and wire type, and the value.
struct WireField {
  uint32_t number = 0;
  uint32_t wire_type = 0;
  uint64_t varint = 0;     // kVarint
  uint32_t fixed32 = 0;    // kFixed32
  std::string_view bytes;  // kLengthDelimited
  size_t offset = 0;       // of the tag, from the start of the file
};

// Reads the fields of one message in order, every length and varint checked against the bytes of
// that message. `file` is the start of the whole file (for offsets); the message is named in
// errors as `message` (with "[index]" when index >= 0).
class WireReader {
 public:
  WireReader(std::string_view message, const char* file, const std::string& source,
             std::string_view name, int64_t index = -1)
      : data_(message), file_(file), source_(source), name_(name), index_(index) {}

  // The next field into `f`; false at the end of the message.
  bool Next(WireField& f) {
    if (at_ >= data_.size()) return false;
    f = WireField{};
    f.offset = Offset(at_);
    const uint64_t tag = Varint("a field tag");
    const uint64_t number = tag >> 3;
    f.wire_type = static_cast<uint32_t>(tag & 7);
    if (number == 0 || number > (uint64_t{1} << 29) - 1) {
      Fail("{}: {}: field number {} at offset {}: expected 1..536870911 (a protobuf ModelProto)",
           source_, Name(), number, f.offset);
    }
    f.number = static_cast<uint32_t>(number);
    switch (f.wire_type) {
      case kVarint: f.varint = Varint("a varint value"); break;
      case kFixed64: Take(8, f); break;
      case kFixed32: {
        const std::string_view b = Take(4, f);
        for (int k = 3; k >= 0; --k) f.fixed32 = f.fixed32 << 8 | static_cast<uint8_t>(b[k]);
        break;
      }
      case kLengthDelimited: {
        const uint64_t n = Varint("a length");
        if (n > data_.size() - at_) {
          Fail(
              "{}: {}: field {} at offset {} has length {}, but {} bytes are left in the "
              "message: expected a length within it (a cut or damaged file)",
              source_, Name(), f.number, f.offset, n, data_.size() - at_);
        }
        f.bytes = Take(static_cast<size_t>(n), f);
        break;
      }
      default:
        Fail(
            "{}: {}: field {} at offset {} has wire type {}: expected 0 (varint), 1 (fixed64), 2 "
            "(length-delimited) or 5 (fixed32); SentencePiece models use no groups",
            source_, Name(), f.number, f.offset, WireTypeName(f.wire_type));
    }
    return true;
  }

  // Throws unless the known field `f` (called `field`) has wire type `want`.
  void Expect(const WireField& f, uint32_t want, std::string_view field) const {
    if (f.wire_type != want) {
      Fail("{}: {}.{} (field {}) at offset {}: wire type {}, expected {}", source_, Name(), field,
           f.number, f.offset, WireTypeName(f.wire_type), WireTypeName(want));
    }
  }

  std::string Name() const {
    return index_ >= 0 ? fmt::format("{}[{}]", name_, index_) : std::string(name_);
  }
  size_t Offset(size_t at) const { return static_cast<size_t>(data_.data() - file_) + at; }

 private:
  uint64_t Varint(std::string_view what) {
    const size_t start = at_;
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (at_ >= data_.size()) {
        Fail(
            "{}: {}: {} at offset {} runs past the end of the message: expected a complete "
            "varint (a cut or damaged file)",
            source_, Name(), what, Offset(start));
      }
      const auto b = static_cast<uint8_t>(data_[at_++]);
      // The 10th byte holds bit 63 only.
      if (shift == 63 && b > 1) break;
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return v;
    }
    Fail("{}: {}: {} at offset {} is longer than 64 bits: expected a varint of at most 10 bytes",
         source_, Name(), what, Offset(start));
  }

  std::string_view Take(size_t n, const WireField& f) {
    if (n > data_.size() - at_) {
      Fail(
          "{}: {}: field {} at offset {} needs {} bytes, {} are left in the message: expected "
          "the whole value (a cut or damaged file)",
          source_, Name(), f.number, f.offset, n, data_.size() - at_);
    }
    const std::string_view b = data_.substr(at_, n);
    at_ += n;
    return b;
  }

  std::string_view data_;
  const char* file_;
  const std::string& source_;
  std::string_view name_;
  int64_t index_;
  size_t at_ = 0;
};

// protobuf's int32 on the wire is the value sign-extended to 64 bits; a reader keeps the low 32.
int32_t WireInt32(uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }

struct ParsedPiece {
  std::string_view piece;
  float score = 0.0f;
  SentencePieceType type = SentencePieceType::kNormal;
};

ParsedPiece ParsePiece(std::string_view message, const char* file, const std::string& source,
                       int64_t index) {
  WireReader r(message, file, source, "pieces", index);
  ParsedPiece p;
  WireField f;
  while (r.Next(f)) {
    switch (f.number) {
      case 1:
        r.Expect(f, kLengthDelimited, "piece");
        p.piece = f.bytes;
        break;
      case 2:
        r.Expect(f, kFixed32, "score");
        p.score = std::bit_cast<float>(f.fixed32);
        // A NaN score is never merged into, an infinite one always wins: wrong encodings.
        if (!std::isfinite(p.score)) {
          Fail("{}: {}.score at offset {} is {}: expected a finite number", source, r.Name(),
               f.offset, p.score);
        }
        break;
      case 3: {
        r.Expect(f, kVarint, "type");
        const int32_t t = WireInt32(f.varint);
        if (t < 1 || t > 6) {
          Fail(
              "{}: {}.type at offset {} is {}: expected 1 (NORMAL), 2 (UNKNOWN), 3 (CONTROL), 4 "
              "(USER_DEFINED), 5 (UNUSED) or 6 (BYTE)",
              source, r.Name(), f.offset, t);
        }
        p.type = static_cast<SentencePieceType>(t);
        break;
      }
      default: break;  // extensions (200 and up): not ours to read
    }
  }
  if (p.piece.empty()) {
    Fail("{}: {} at offset {}: no piece string: expected a non-empty piece (field 1)", source,
         r.Name(), r.Offset(0));
  }
  return p;
}

void ParseTrainerSpec(std::string_view message, const char* file, const std::string& source,
                      SentencePieceSettings& s) {
  WireReader r(message, file, source, "trainer_spec");
  WireField f;
  auto int32 = [&](std::string_view name) {
    r.Expect(f, kVarint, name);
    return WireInt32(f.varint);
  };
  auto boolean = [&](std::string_view name) {
    r.Expect(f, kVarint, name);
    return f.varint != 0;
  };
  auto string = [&](std::string_view name) {
    r.Expect(f, kLengthDelimited, name);
    return std::string(f.bytes);
  };
  while (r.Next(f)) {
    switch (f.number) {
      case 3:
        s.model_type = int32("model_type");
        if (s.model_type < 1 || s.model_type > 4) {
          Fail(
              "{}: trainer_spec.model_type at offset {} is {}: expected 1 (UNIGRAM), 2 (BPE), 3 "
              "(WORD) or 4 (CHAR)",
              source, f.offset, s.model_type);
        }
        break;
      case 4: s.vocab_size = int32("vocab_size"); break;
      case 24: s.treat_whitespace_as_suffix = boolean("treat_whitespace_as_suffix"); break;
      case 35: s.byte_fallback = boolean("byte_fallback"); break;
      case 40: s.unk_id = int32("unk_id"); break;
      case 41: s.bos_id = int32("bos_id"); break;
      case 42: s.eos_id = int32("eos_id"); break;
      case 43: s.pad_id = int32("pad_id"); break;
      case 44: s.unk_surface = string("unk_surface"); break;
      case 45: s.unk_piece = string("unk_piece"); break;
      case 46: s.bos_piece = string("bos_piece"); break;
      case 47: s.eos_piece = string("eos_piece"); break;
      default: break;  // training settings: they do not change encoding
    }
  }
}

// normalizer_spec, or denormalizer_spec with `denormalizer`.
void ParseNormalizerSpec(std::string_view message, const char* file, const std::string& source,
                         bool denormalizer, SentencePieceSettings& s) {
  WireReader r(message, file, source, denormalizer ? "denormalizer_spec" : "normalizer_spec");
  WireField f;
  while (r.Next(f)) {
    switch (f.number) {
      case 1:
        r.Expect(f, kLengthDelimited, "name");
        if (!denormalizer) s.normalizer_name = std::string(f.bytes);
        break;
      case 2:
        r.Expect(f, kLengthDelimited, "precompiled_charsmap");
        // libsentencepiece builds a (de)normalizer from a non-empty map only.
        (denormalizer ? s.denormalizer : s.precompiled_charsmap) = !f.bytes.empty();
        break;
      case 3:
        r.Expect(f, kVarint, "add_dummy_prefix");
        if (!denormalizer) s.add_dummy_prefix = f.varint != 0;
        break;
      case 4:
        r.Expect(f, kVarint, "remove_extra_whitespaces");
        if (!denormalizer) s.remove_extra_whitespaces = f.varint != 0;
        break;
      case 5:
        r.Expect(f, kVarint, "escape_whitespaces");
        if (!denormalizer) s.escape_whitespaces = f.varint != 0;
        break;
      default: break;
    }
  }
}

std::string ReadModelBytes(const std::string& path) {
  BinaryReader r(path, "a SentencePiece model (tokenizer.model)");
  if (r.size() == 0) Fail("{}: empty file: expected a SentencePiece model (a ModelProto)", path);
  if (r.size() > kMaxModelBytes) {
    Fail("{}: {} bytes: expected a SentencePiece model of at most {} bytes", path, r.size(),
         kMaxModelBytes);
  }
  std::string bytes(static_cast<size_t>(r.size()), '\0');
  r.ReadBytes(bytes.data(), r.size(), "the model");
  return bytes;
}

// The byte of "<0xAB>" with upper-case hex digits, as libsentencepiece spells byte pieces
// (ByteToPiece: "<0x%02X>"), or -1.
int CanonicalBytePiece(std::string_view piece) {
  if (piece.size() != 6 || !piece.starts_with("<0x") || piece[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = piece[static_cast<size_t>(k)];
    if (c >= '0' && c <= '9') {
      v = v * 16 + (c - '0');
    } else if (c >= 'A' && c <= 'F') {
      v = v * 16 + (c - 'A' + 10);
    } else {
      return -1;
    }
  }
  return v;
}

// "<0xab>" in either case, as llama2.c's sscanf reads byte pieces (tokenizer.cc).
bool AnyCaseBytePiece(std::string_view piece) {
  if (piece.size() != 6 || !piece.starts_with("<0x") || piece[5] != '>') return false;
  return std::isxdigit(static_cast<unsigned char>(piece[3])) &&
         std::isxdigit(static_cast<unsigned char>(piece[4]));
}

// A piece split as llama2.c's encoder splits text: a byte and the continuation bytes (10xxxxxx)
// after it, up to 4 bytes in all.
std::vector<std::string_view> CodePointGroups(std::string_view s) {
  std::vector<std::string_view> groups;
  for (size_t i = 0; i < s.size();) {
    size_t j = i + 1;
    while (j < s.size() && j - i < 4 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) ++j;
    groups.push_back(s.substr(i, j - i));
    i = j;
  }
  return groups;
}

// The llama2.c piece `id` in SentencePiece's spelling, as SerializeSentencePieceModel writes it.
std::string SentencePieceSpelling(int id, std::string_view piece) {
  if (id == Tokenizer::kUnk) return "<unk>";
  if (id == Tokenizer::kBos) return "<s>";
  if (id == Tokenizer::kEos) return "</s>";
  return ReplaceAll(piece, " ", kSpaceSymbol);
}

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

// Where llama2.c's encoder over `pieces` (llama2.c's spelling; ids 0/1/2 <unk>/<s>/</s>) gives
// other ids than libsentencepiece over the model SerializeSentencePieceModel writes for them. The
// two run the same greedy BPE (merge the adjacent pair whose concatenation is the best-scored
// piece, the leftmost on ties, bpe_model.cc's agenda against run.c's rescan) on the same
// dummy-prefixed text, split into the same characters for valid UTF-8; they differ only where the
// vocabulary lets them:
//   - llama2.c looks a character up among all pieces and falls back to its bytes' pieces at once;
//     libsentencepiece keeps an unknown character as a symbol that may still merge with its
//     neighbours (pieces_ holds NORMAL, USER_DEFINED and UNUSED pieces) and turns what stays
//     unknown into bytes at the end;
//   - llama2.c merges into any piece scored above -1e10, byte and special pieces included, and
//     with byte-fallback symbols as sides; libsentencepiece only into NORMAL pieces of any score;
//   - libsentencepiece refuses empty and duplicate pieces and needs all 256 byte pieces for byte
//     fallback (model_interface.cc InitializePieces); its normalizer turns a text space into
//     U+2581, so a piece holding U+2581 would match a space.
void CheckLlama2cEncodesAsSentencePiece(std::span<const std::string> pieces,
                                        std::span<const float> scores, Problems& problems) {
  const size_t n = pieces.size();
  std::unordered_map<std::string, int> spm_ids;
  spm_ids.reserve(n);
  std::vector<uint8_t> special(n, 0);  // ids 0, 1, 2 and byte pieces
  int bytes_found = 0;
  std::vector<uint8_t> byte_seen(256, 0);
  for (size_t id = 0; id < n; ++id) {
    const std::string& p = pieces[id];
    const int i = static_cast<int>(id);
    const auto [it, fresh] = spm_ids.emplace(SentencePieceSpelling(i, p), i);
    if (!fresh) {
      problems.Add(fmt::format(
          "pieces {} and {} are both \"{}\" in SentencePiece's spelling: expected distinct "
          "pieces (SentencePiece refuses a duplicate)",
          it->second, id, Printable(it->first)));
    }
    if (id < 3) {
      special[id] = 1;
      continue;
    }
    if (p.empty()) {
      problems.Add(fmt::format(
          "piece {} is empty: expected a non-empty piece (SentencePiece refuses empty ones)", id));
    }
    if (p.find(kSpaceSymbol) != std::string::npos) {
      problems.Add(fmt::format(
          "piece {} \"{}\" holds U+2581: expected none (SentencePiece reads that character in "
          "text as a space, llama2.c does not)",
          id, Printable(p)));
    }
    if (AnyCaseBytePiece(p)) {
      special[id] = 1;
      const int b = CanonicalBytePiece(p);
      if (b < 0) {
        problems.Add(fmt::format(
            "piece {} \"{}\" is a byte piece with lower-case hex: expected \"<0x{:02X}>\" (the "
            "only spelling SentencePiece's byte fallback knows)",
            id, p, std::stoi(p.substr(3, 2), nullptr, 16)));
      } else if (!byte_seen[static_cast<size_t>(b)]) {
        byte_seen[static_cast<size_t>(b)] = 1;
        ++bytes_found;
      }
    }
  }
  if (bytes_found != 256) {
    problems.Add(fmt::format(
        "{} of the 256 byte pieces \"<0x00>\"..\"<0xFF>\": expected all 256 (without byte "
        "fallback llama2.c gives one <unk> per byte of an unknown character, SentencePiece one "
        "per run of them)",
        bytes_found));
  }
  std::unordered_map<std::string_view, int> ids;  // llama2.c's lookup: the first id of a piece
  ids.reserve(n);
  for (size_t id = 0; id < n; ++id) ids.emplace(pieces[id], static_cast<int>(id));
  for (size_t id = 3; id < n; ++id) {
    if (special[id]) continue;
    const std::vector<std::string_view> groups = CodePointGroups(pieces[id]);
    if (groups.size() < 2) continue;  // a character: looked up, never a merge's result
    if (!(scores[id] > kMinMergeScore)) {
      problems.Add(fmt::format(
          "piece {} \"{}\" has score {}: expected above -1e10 (llama2.c never merges into a "
          "piece scored lower, SentencePiece does)",
          id, Printable(pieces[id]), scores[id]));
    }
    for (const std::string_view g : groups) {
      if (!ids.contains(g)) {
        problems.Add(fmt::format(
            "piece {} \"{}\" holds \"{}\", which is no piece of its own: expected every "
            "character of a piece to be a piece (llama2.c falls back to its bytes, SentencePiece "
            "merges it)",
            id, Printable(pieces[id]), Printable(g)));
        break;
      }
    }
  }
  // Merges llama2.c can do that libsentencepiece cannot: into a special or byte piece, or with
  // one as a side.
  for (size_t id = 0; id < n; ++id) {
    if (!(scores[id] > kMinMergeScore)) continue;
    const std::string_view p = pieces[id];
    for (size_t k = 1; k < p.size(); ++k) {
      const auto l = ids.find(p.substr(0, k));
      if (l == ids.end()) continue;
      const auto r = ids.find(p.substr(k));
      if (r == ids.end()) continue;
      if (special[id] || special[static_cast<size_t>(l->second)] ||
          special[static_cast<size_t>(r->second)]) {
        problems.Add(fmt::format(
            "llama2.c merges \"{}\" and \"{}\" into piece {} \"{}\": expected no merge into or "
            "with a byte or special piece (SentencePiece does none)",
            Printable(l->first), Printable(r->first), id, Printable(p)));
        break;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Writing

class WireWriter {
 public:
  void Varint(uint64_t v) {
    while (v >= 0x80) {
      out_ += static_cast<char>(static_cast<uint8_t>(v | 0x80));
      v >>= 7;
    }
    out_ += static_cast<char>(static_cast<uint8_t>(v));
  }
  void Tag(uint32_t field, WireType type) { Varint(uint64_t{field} << 3 | type); }
  void Bytes(uint32_t field, std::string_view s) {
    Tag(field, kLengthDelimited);
    Varint(s.size());
    out_ += s;
  }
  void Float(uint32_t field, float f) {
    Tag(field, kFixed32);
    const uint32_t bits = std::bit_cast<uint32_t>(f);
    for (int k = 0; k < 4; ++k) out_ += static_cast<char>(static_cast<uint8_t>(bits >> (8 * k)));
  }
  // int32 and enums: negative values sign-extended to 64 bits (10 bytes), as protobuf writes them.
  void Int32(uint32_t field, int32_t v) {
    Tag(field, kVarint);
    Varint(static_cast<uint64_t>(static_cast<int64_t>(v)));
  }
  void Bool(uint32_t field, bool v) {
    Tag(field, kVarint);
    Varint(v ? 1 : 0);
  }
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};

// ---------------------------------------------------------------------------------------------
// libsentencepiece behind TextTokenizer

// One UTF-8 character at the start of `s` by libsentencepiece's rules (util.cc DecodeUTF8 and
// IsValidDecodeUTF8): the lead byte gives the length; the continuation bytes must be 10xxxxxx and
// the code point neither overlong, nor a surrogate, nor above U+10FFFF. Returns its length, or 0
// when `s` does not start with a whole valid character.
size_t Utf8CharLength(std::string_view s) {
  if (s.empty()) return 0;
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[k])); };
  const auto trail = [&](size_t k) { return (b(k) & 0xC0) == 0x80; };
  const auto valid = [](uint32_t cp) { return cp < 0xD800 || (cp >= 0xE000 && cp <= 0x10FFFF); };
  if (b(0) < 0x80) return 1;
  if ((b(0) & 0xE0) == 0xC0 && s.size() >= 2) {
    const uint32_t cp = (b(0) & 0x1F) << 6 | (b(1) & 0x3F);
    return trail(1) && cp >= 0x80 && valid(cp) ? 2 : 0;
  }
  if ((b(0) & 0xF0) == 0xE0 && s.size() >= 3) {
    const uint32_t cp = (b(0) & 0x0F) << 12 | (b(1) & 0x3F) << 6 | (b(2) & 0x3F);
    return trail(1) && trail(2) && cp >= 0x800 && valid(cp) ? 3 : 0;
  }
  if ((b(0) & 0xF8) == 0xF0 && s.size() >= 4) {
    const uint32_t cp =
        (b(0) & 0x07) << 18 | (b(1) & 0x3F) << 12 | (b(2) & 0x3F) << 6 | (b(3) & 0x3F);
    return trail(1) && trail(2) && trail(3) && cp >= 0x10000 && valid(cp) ? 4 : 0;
  }
  return 0;
}

// True when `s`, shorter than the character its lead byte announces, can still become a valid
// one with more bytes. The range limits fall on the second byte (E0 A0.., ED ..9F, F0 90..,
// F4 ..8F), so completing with 0x80 bytes after a chosen second byte decides it.
bool Utf8Incomplete(std::string_view s) {
  if (s.empty()) return false;
  const auto lead = static_cast<uint8_t>(s[0]);
  const size_t need = (lead & 0xE0) == 0xC0   ? 2
                      : (lead & 0xF0) == 0xE0 ? 3
                      : (lead & 0xF8) == 0xF0 ? 4
                                              : 0;
  if (s.size() >= need) return false;
  std::string trial(s);
  if (trial.size() >= 2) {
    trial.resize(need, '\x80');
    return Utf8CharLength(trial) == need;
  }
  for (int second = 0x80; second <= 0xBF; ++second) {
    trial.resize(1);
    trial += static_cast<char>(second);
    trial.resize(need, '\x80');
    if (Utf8CharLength(trial) == need) return true;
  }
  return false;
}

class SentencePieceTextTokenizer : public TextTokenizer {
 public:
  SentencePieceTextTokenizer(std::string path, SentencePieceVocabulary vocabulary,
                             std::unique_ptr<sentencepiece::SentencePieceProcessor> spm)
      : path_(std::move(path)), vocab_(std::move(vocabulary)), spm_(std::move(spm)) {
    byte_.assign(vocab_.pieces.size(), -1);
    for (size_t id = 0; id < vocab_.pieces.size(); ++id) {
      const SentencePieceType type = vocab_.types[id];
      if (type == SentencePieceType::kByte) {
        byte_[id] = static_cast<int16_t>(CanonicalBytePiece(vocab_.pieces[id]));
      }
      // llama.cpp's special tokens: control, user-defined and unknown (<s>, </s>, <unk>).
      if (type == SentencePieceType::kControl || type == SentencePieceType::kUserDefined ||
          type == SentencePieceType::kUnknown) {
        special_.emplace_back(vocab_.pieces[id], static_cast<int>(id));
      }
    }
    SortSpecialTokens(special_);
  }

  std::string Name() const override { return path_; }
  int vocab_size() const override { return static_cast<int>(vocab_.pieces.size()); }
  int bos() const override { return spm_->bos_id(); }
  int eos() const override { return spm_->eos_id(); }
  std::vector<int> EncodePrompt(std::string_view text) const override {
    std::vector<int> ids = {bos()};
    const std::vector<int> body = Encode(text);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
  }
  // Each piece between special tokens encoded on its own: SentencePiece adds its dummy prefix to
  // each, as llama.cpp adds a space to a piece at the start or after a special token (which every
  // piece is).
  std::vector<int> EncodePromptParsingSpecial(std::string_view text) const override {
    return EncodeAtSpecialTokens(text, special_, {bos()},
                                 [this](std::string_view piece) { return Encode(piece); });
  }
  std::vector<std::pair<std::string, int>> SpecialTokens() const override { return special_; }
  std::vector<int> TokensSpelled(
      const std::function<bool(std::string_view)>& match) const override {
    return IdsSpelled(
        vocab_size(), [this](int id) { return vocab_.pieces[static_cast<size_t>(id)]; }, match);
  }
  TextStream EncodeText(const std::string& path) const override {
    return EncodeTextPath(path, [this](const std::string& text) { return Encode(text); });
  }
  std::string ProtocolText() const override {
    const SentencePieceSettings& s = vocab_.settings;
    if (!s.precompiled_charsmap && s.add_dummy_prefix && !s.remove_extra_whitespaces &&
        s.escape_whitespaces && !s.treat_whitespace_as_suffix) {
      return TextProtocolText();  // exactly llama2.c's protocol
    }
    return fmt::format(
        "Text files are encoded whole by SentencePiece with the model's own normalization "
        "(\"{}\"{}, dummy prefix {}, extra whitespace {}), no BOS or EOS inside the stream. A "
        "directory means its *.txt files in name order, each encoded on its own, concatenated.",
        s.normalizer_name, s.precompiled_charsmap ? " with character rules" : "",
        s.add_dummy_prefix ? "added" : "not added",
        s.remove_extra_whitespaces ? "removed" : "kept");
  }
  std::unique_ptr<TokenTextDecoder> Decoder(std::span<const int> prompt) const override;

  std::vector<int> Encode(std::string_view text) const {
    std::vector<int> ids;
    const sentencepiece::util::Status status = spm_->Encode(text, &ids);
    if (!status.ok()) {
      Fail("{}: SentencePiece cannot encode {} bytes of text: {}", path_, text.size(),
           status.ToString());
    }
    return ids;
  }

  const std::string& path() const { return path_; }
  const SentencePieceVocabulary& vocabulary() const { return vocab_; }
  int ByteOf(int id) const { return byte_[static_cast<size_t>(id)]; }

 private:
  std::string path_;
  SentencePieceVocabulary vocab_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> spm_;
  std::vector<int16_t> byte_;                         // per id: the byte of a BYTE piece, or -1
  std::vector<std::pair<std::string, int>> special_;  // SpecialTokens()
};

// SentencePieceProcessor::Decode run token by token. Decode turns each maximal run of byte
// pieces into UTF-8 characters (a byte that starts no valid character, or an incomplete one at
// the run's end, becomes U+FFFD), gives "" for CONTROL pieces and unk_surface for <unk>, turns
// U+2581 into a space, and drops the leading U+2581 of the first text piece (is_bos_ws: true until
// text has been produced or a piece has given up its U+2581). Here a character is emitted as soon
// as its last byte arrives, and bytes that may still become one are held back until the next
// non-byte piece or Finish.
class SentencePieceDecoder : public TokenTextDecoder {
 public:
  SentencePieceDecoder(const SentencePieceTextTokenizer& tokenizer, std::span<const int> prompt)
      : tok_(tokenizer) {
    // The prompt's text is not returned; bytes it leaves pending are settled as Decode settles
    // the end of a run (a prompt encoded from text ends on a whole character).
    for (const int id : prompt) Next(id);
    Finish();
  }

  std::string Next(int token) override {
    const SentencePieceVocabulary& v = tok_.vocabulary();
    if (token < 0 || token >= tok_.vocab_size()) {
      Fail("{}: token id {} out of range: expected 0..{}", tok_.path(), token,
           tok_.vocab_size() - 1);
    }
    std::string out;
    const int byte = tok_.ByteOf(token);
    if (byte >= 0) {
      bytes_ += static_cast<char>(byte);
      DrainBytes(out, /*run_ends=*/false);
      return out;
    }
    DrainBytes(out, /*run_ends=*/true);
    if (bos_ws_seen_ || text_seen_) bos_ws_ = false;
    const SentencePieceType type = v.types[static_cast<size_t>(token)];
    if (type == SentencePieceType::kControl) {
      bos_ws_seen_ = false;
      return out;
    }
    if (type == SentencePieceType::kUnknown) {
      bos_ws_seen_ = false;
      Append(out, v.settings.unk_surface);
      return out;
    }
    std::string_view piece = v.pieces[static_cast<size_t>(token)];
    bool consumed = false;
    if (bos_ws_ && (v.settings.add_dummy_prefix || v.settings.remove_extra_whitespaces)) {
      consumed = piece.starts_with(kSpaceSymbol);
      if (consumed) piece.remove_prefix(kSpaceSymbol.size());
      // With remove_extra_whitespaces every leading space goes: the next piece is still first.
      if (v.settings.remove_extra_whitespaces) consumed = false;
    }
    bos_ws_seen_ = consumed;
    Append(out, ReplaceAll(piece, kSpaceSymbol, " "));
    return out;
  }

  std::string Finish() override {
    std::string out;
    DrainBytes(out, /*run_ends=*/true);
    return out;
  }

 private:
  void Append(std::string& out, std::string_view s) {
    out += s;
    if (!s.empty()) text_seen_ = true;
  }
  // Emits the characters at the front of the pending bytes; unless the run ends, stops at bytes
  // that may still become a character.
  void DrainBytes(std::string& out, bool run_ends) {
    size_t at = 0;
    while (at < bytes_.size()) {
      const std::string_view rest = std::string_view(bytes_).substr(at);
      const size_t len = Utf8CharLength(rest);
      if (len > 0) {
        Append(out, rest.substr(0, len));
        at += len;
      } else if (!run_ends && Utf8Incomplete(rest)) {
        break;
      } else {
        Append(out, kReplacementChar);
        at += 1;
      }
    }
    bytes_.erase(0, at);
  }

  const SentencePieceTextTokenizer& tok_;
  std::string bytes_;         // byte pieces not yet turned into text
  bool bos_ws_ = true;        // Decode's is_bos_ws
  bool bos_ws_seen_ = false;  // the last text piece gave up its leading U+2581
  bool text_seen_ = false;    // some text has been produced (the prompt's included)
};

std::unique_ptr<TokenTextDecoder> SentencePieceTextTokenizer::Decoder(
    std::span<const int> prompt) const {
  return std::make_unique<SentencePieceDecoder>(*this, prompt);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Reading

SentencePieceVocabulary ParseSentencePieceModel(std::string_view bytes, const std::string& source) {
  if (bytes.empty()) Fail("{}: empty: expected a SentencePiece model (a ModelProto)", source);
  if (static_cast<int64_t>(bytes.size()) > kMaxModelBytes) {
    Fail("{}: {} bytes: expected a SentencePiece model of at most {} bytes", source, bytes.size(),
         kMaxModelBytes);
  }
  SentencePieceVocabulary v;
  v.source = source;
  bool trainer_spec = false, normalizer_spec = false;
  WireReader r(bytes, bytes.data(), source, "ModelProto");
  WireField f;
  while (r.Next(f)) {
    switch (f.number) {
      case 1: {
        r.Expect(f, kLengthDelimited, "pieces");
        if (v.pieces.size() >= kMaxPieces) {
          Fail("{}: more than {} pieces (at offset {}): expected at most {}", source, kMaxPieces,
               f.offset, kMaxPieces);
        }
        const ParsedPiece p =
            ParsePiece(f.bytes, bytes.data(), source, static_cast<int64_t>(v.pieces.size()));
        v.pieces.emplace_back(p.piece);
        v.scores.push_back(p.score);
        v.types.push_back(p.type);
        break;
      }
      case 2:
        r.Expect(f, kLengthDelimited, "trainer_spec");
        ParseTrainerSpec(f.bytes, bytes.data(), source, v.settings);
        trainer_spec = true;
        break;
      case 3:
        r.Expect(f, kLengthDelimited, "normalizer_spec");
        ParseNormalizerSpec(f.bytes, bytes.data(), source, /*denormalizer=*/false, v.settings);
        normalizer_spec = true;
        break;
      case 5:
        r.Expect(f, kLengthDelimited, "denormalizer_spec");
        ParseNormalizerSpec(f.bytes, bytes.data(), source, /*denormalizer=*/true, v.settings);
        break;
      default: break;  // self_test_data (4), extensions
    }
  }
  if (v.pieces.empty()) {
    Fail("{}: no pieces: expected a SentencePiece ModelProto (field 1, the pieces, first)", source);
  }
  if (!trainer_spec || !normalizer_spec) {
    Fail(
        "{}: {} pieces but no {}: expected both trainer_spec and normalizer_spec after the pieces "
        "(a cut file loses them)",
        source, v.pieces.size(),
        !trainer_spec && !normalizer_spec ? "trainer_spec or normalizer_spec"
        : !trainer_spec                   ? "trainer_spec"
                                          : "normalizer_spec");
  }
  return v;
}

SentencePieceVocabulary ReadSentencePieceVocabulary(const std::string& path) {
  const std::string bytes = ReadModelBytes(path);
  return ParseSentencePieceModel(bytes, path);
}

bool LooksLikeSentencePieceModel(const std::string& path) {
  const std::string head = ReadInputHead(path, kSniffBytes);  // "" for a device or FIFO
  if (head.size() < 4) return false;
  if (head[0] != '\x0A') return false;  // field 1 (pieces), wire type 2
  try {
    // The first field read as a one-field message of its own: its length must fall within the
    // bytes read, and the piece message inside must parse, with a non-empty piece.
    WireReader r(head, head.data(), path, "ModelProto");
    WireField f;
    if (!r.Next(f)) return false;
    ParsePiece(f.bytes, head.data(), path, 0);
    return true;
  } catch (const Error&) {
    return false;
  }
}

Tokenizer Llama2cTokenizerFromSentencePiece(const SentencePieceVocabulary& vocabulary) {
  const SentencePieceVocabulary& v = vocabulary;
  const SentencePieceSettings& s = v.settings;
  const size_t n = v.pieces.size();
  STRETCH_CHECK(v.scores.size() == n && v.types.size() == n, "{} pieces, {} scores, {} types", n,
                v.scores.size(), v.types.size());
  Problems problems;
  if (s.model_type != 2) {
    problems.Add(fmt::format("trainer_spec.model_type={}: expected 2 (BPE)", s.model_type));
  }
  if (!s.byte_fallback) problems.Add("trainer_spec.byte_fallback=false: expected true");
  if (s.treat_whitespace_as_suffix) {
    problems.Add("trainer_spec.treat_whitespace_as_suffix=true: expected false");
  }
  if (s.precompiled_charsmap) {
    problems.Add(fmt::format(
        "normalizer_spec \"{}\" has a precompiled_charsmap: expected identity normalization",
        s.normalizer_name));
  }
  if (!s.add_dummy_prefix) problems.Add("normalizer_spec.add_dummy_prefix=false: expected true");
  if (s.remove_extra_whitespaces) {
    problems.Add("normalizer_spec.remove_extra_whitespaces=true: expected false");
  }
  if (!s.escape_whitespaces) {
    problems.Add("normalizer_spec.escape_whitespaces=false: expected true");
  }
  if (s.denormalizer) problems.Add("a denormalizer_spec with rules: expected none");
  const SentencePieceType want[3] = {SentencePieceType::kUnknown, SentencePieceType::kControl,
                                     SentencePieceType::kControl};
  const std::string* want_piece[3] = {&s.unk_piece, &s.bos_piece, &s.eos_piece};
  const char* want_name[3] = {"UNKNOWN", "CONTROL", "CONTROL"};
  if (n < 3) {
    problems.Add(fmt::format("{} pieces: expected at least 3 (<unk>, <s>, </s>)", n));
  }
  for (size_t id = 0; id < std::min<size_t>(n, 3); ++id) {
    if (v.types[id] != want[id] || v.pieces[id] != *want_piece[id]) {
      problems.Add(fmt::format("piece {} is \"{}\" of type {}: expected the {} piece \"{}\"", id,
                               Printable(v.pieces[id]), static_cast<int>(v.types[id]),
                               want_name[id], Printable(*want_piece[id])));
    }
  }
  std::vector<std::string> pieces(n);
  for (size_t id = 0; id < n; ++id) {
    const std::string& p = v.pieces[id];
    if (id >= 3) {
      const SentencePieceType t = v.types[id];
      if (t == SentencePieceType::kByte) {
        if (CanonicalBytePiece(p) < 0) {
          problems.Add(fmt::format("BYTE piece {} \"{}\": expected \"<0xXX>\"", id, Printable(p)));
        }
      } else if (t != SentencePieceType::kNormal) {
        problems.Add(fmt::format(
            "piece {} \"{}\" has type {}: expected NORMAL or BYTE (llama2.c has no other kind)", id,
            Printable(p), static_cast<int>(t)));
      } else if (AnyCaseBytePiece(p)) {
        problems.Add(fmt::format(
            "NORMAL piece {} \"{}\" is spelled as a byte piece: expected none (llama2.c would use "
            "it for byte fallback)",
            id, Printable(p)));
      }
      if (p.find(' ') != std::string::npos) {
        problems.Add(fmt::format(
            "piece {} \"{}\" holds a space: expected U+2581 for a space (llama2.c would match a "
            "text space to it)",
            id, Printable(p)));
      }
    }
    pieces[id] = id == 1   ? std::string(kLlama2cBos)
                 : id == 2 ? std::string(kLlama2cEos)
                           : ReplaceAll(p, kSpaceSymbol, " ");
  }
  if (n >= 3) CheckLlama2cEncodesAsSentencePiece(pieces, v.scores, problems);
  if (problems.count > 0) {
    Fail("{}: llama2.c's encoder would not give SentencePiece's ids for this model: {}", v.source,
         problems.Text());
  }
  return Tokenizer::FromVocabulary(v.source, std::move(pieces), v.scores);
}

std::unique_ptr<TextTokenizer> LoadSentencePieceModel(const std::string& path) {
  const std::string bytes = ReadModelBytes(path);
  SentencePieceVocabulary v = ParseSentencePieceModel(bytes, path);
  if (v.settings.denormalizer) {
    Fail(
        "{}: the model has a denormalizer_spec with rules: expected none (its rewriting of the "
        "whole decoded text cannot be done token by token)",
        path);
  }
  auto spm = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const sentencepiece::util::Status status = spm->LoadFromSerializedProto(bytes);
  if (!status.ok()) {
    Fail("{}: SentencePiece cannot load the model: {}", path, status.ToString());
  }
  if (static_cast<size_t>(spm->GetPieceSize()) != v.pieces.size()) {
    Fail("{}: SentencePiece reads {} pieces, our reader {}: expected the same (a damaged file)",
         path, spm->GetPieceSize(), v.pieces.size());
  }
  if (spm->bos_id() < 0) {
    Fail(
        "{}: no BOS: expected a CONTROL piece \"{}\" (trainer_spec.bos_piece): generation starts "
        "from BOS",
        path, Printable(v.settings.bos_piece));
  }
  return std::make_unique<SentencePieceTextTokenizer>(path, std::move(v), std::move(spm));
}

// ---------------------------------------------------------------------------------------------
// Writing

std::string SerializeSentencePieceModel(const Tokenizer& tokenizer) {
  const int n = tokenizer.vocab_size();
  std::vector<std::string> pieces;
  std::vector<float> scores;
  pieces.reserve(static_cast<size_t>(n));
  scores.reserve(static_cast<size_t>(n));
  for (int id = 0; id < n; ++id) {
    pieces.push_back(tokenizer.Piece(id));
    scores.push_back(tokenizer.Score(id));
  }
  Problems problems;
  CheckLlama2cEncodesAsSentencePiece(pieces, scores, problems);
  if (problems.count > 0) {
    Fail(
        "{}: cannot be written as a SentencePiece model that encodes as llama2.c's encoder does: "
        "{}",
        tokenizer.path(), problems.Text());
  }
  WireWriter model;
  for (int id = 0; id < n; ++id) {
    const std::string& p = pieces[static_cast<size_t>(id)];
    SentencePieceType type = SentencePieceType::kNormal;
    if (id == Tokenizer::kUnk) {
      type = SentencePieceType::kUnknown;
    } else if (id == Tokenizer::kBos || id == Tokenizer::kEos) {
      type = SentencePieceType::kControl;
    } else if (CanonicalBytePiece(p) >= 0) {
      type = SentencePieceType::kByte;
    }
    WireWriter piece;
    piece.Bytes(1, SentencePieceSpelling(id, p));
    piece.Float(2, scores[static_cast<size_t>(id)]);
    // NORMAL is the default: left out, as SentencePiece's own files do.
    if (type != SentencePieceType::kNormal) piece.Int32(3, static_cast<int32_t>(type));
    model.Bytes(1, piece.bytes());
  }
  WireWriter trainer;       // fields in number order, as protobuf writes them
  trainer.Int32(3, 2);      // model_type: BPE
  trainer.Int32(4, n);      // vocab_size
  trainer.Bool(24, false);  // treat_whitespace_as_suffix
  trainer.Bool(35, true);   // byte_fallback
  trainer.Int32(40, Tokenizer::kUnk);
  trainer.Int32(41, Tokenizer::kBos);
  trainer.Int32(42, Tokenizer::kEos);
  trainer.Int32(43, -1);  // pad_id: none
  trainer.Bytes(45, "<unk>");
  trainer.Bytes(46, "<s>");
  trainer.Bytes(47, "</s>");
  model.Bytes(2, trainer.bytes());
  WireWriter normalizer;
  normalizer.Bytes(1, "identity");
  normalizer.Bytes(2, "");    // precompiled_charsmap: no rules
  normalizer.Bool(3, true);   // add_dummy_prefix
  normalizer.Bool(4, false);  // remove_extra_whitespaces
  normalizer.Bool(5, true);   // escape_whitespaces
  model.Bytes(3, normalizer.bytes());
  return model.bytes();
}

void SaveSentencePieceModel(const Tokenizer& tokenizer, const std::string& path) {
  const std::string bytes = SerializeSentencePieceModel(tokenizer);
  AtomicFile out(path);
  out.Write(bytes.data(), bytes.size(), "the SentencePiece model");
  out.Commit();
}

}  // namespace stretch
