// The token cache file (layout in token_cache.h).
#include "src/io/token_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/core/words.h"
#include "src/io/binary_reader.h"
#include "src/io/output_file.h"

namespace stretch {
namespace {

constexpr char kMagic[4] = {'S', 'T', 'K', 'C'};
// The strings' lengths are also bounded by the file's size; this bound keeps a corrupt length
// from being believed just because the file happens to be large.
constexpr int64_t kMaxStringBytes = int64_t{1} << 30;
// Tokens are converted from the file's width in chunks of this many, through one small buffer.
constexpr int64_t kTokenChunk = int64_t{1} << 16;

std::string DescribeMagic(const unsigned char (&m)[4]) {
  const std::string_view bytes(reinterpret_cast<const char*>(m), 4);
  return fmt::format("{:02x} {:02x} {:02x} {:02x} (\"{}\")", m[0], m[1], m[2], m[3],
                     PrintableAscii(bytes, '?'));
}

// Reads through a BinaryReader and hashes every byte it reads, for the checksum at the end.
class HashedReader {
 public:
  explicit HashedReader(const std::string& path) : in_(path, "a stretch token cache") {}

  const std::string& path() const { return in_.path(); }
  int64_t remaining() const { return in_.remaining(); }
  int64_t offset() const { return in_.offset(); }
  uint64_t hash() const { return hash_; }

  void Bytes(void* dst, int64_t n, std::string_view field) {
    in_.ReadBytes(dst, n, field);
    hash_ = Fnv1a64(std::string_view(static_cast<const char*>(dst), static_cast<size_t>(n)), hash_);
  }
  uint32_t U32(std::string_view field) {
    unsigned char b[4];
    Bytes(b, 4, field);
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = v << 8 | b[i];
    return v;
  }
  uint64_t U64(std::string_view field) {
    unsigned char b[8];
    Bytes(b, 8, field);
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = v << 8 | b[i];
    return v;
  }
  // A u32 length, then that many bytes. The length is bounded by `limit` and by the bytes left
  // before the string is allocated.
  std::string String(std::string_view field, int64_t limit) {
    const int64_t at = offset();
    const int64_t n = U32(fmt::format("{} length", field));
    if (n > limit) {
      Fail(
          "{}: {} length {} at offset {} exceeds the limit {}: expected at most {} bytes "
          "(corrupt file?)",
          path(), field, n, at, limit, limit);
    }
    if (n > remaining()) {
      Fail(
          "{}: {} length {} at offset {} is larger than the {} bytes left in the file: "
          "expected a length that fits (truncated or corrupt file?)",
          path(), field, n, at, remaining());
    }
    std::string s(static_cast<size_t>(n), '\0');
    Bytes(s.data(), n, field);
    return s;
  }

 private:
  BinaryReader in_;
  uint64_t hash_ = kFnvOffset;
};

TokenCacheMeta ReadMeta(HashedReader& in) {
  const std::string& path = in.path();
  unsigned char magic[4];
  in.Bytes(magic, 4, "magic");
  if (std::memcmp(magic, kMagic, 4) != 0) {
    Fail("{}: magic {}: expected \"STKC\", a stretch token cache", path, DescribeMagic(magic));
  }
  const uint32_t version = in.U32("version");
  if (version != kTokenCacheVersion) {
    Fail("{}: token cache version {}: this build reads version {} (delete the file to rebuild it)",
         path, version, kTokenCacheVersion);
  }
  TokenCacheMeta meta;
  const uint32_t vocab = in.U32("vocab_size");
  if (vocab < 1 || vocab > static_cast<uint32_t>(kTokenCacheMaxVocab)) {
    Fail("{}: vocab_size={}: expected 1..{}", path, vocab, kTokenCacheMaxVocab);
  }
  meta.vocab_size = static_cast<int32_t>(vocab);
  const uint32_t token_bytes = in.U32("token_bytes");
  const int expected_width = TokenCacheTokenBytes(meta.vocab_size);
  if (token_bytes != static_cast<uint32_t>(expected_width)) {
    Fail(
        "{}: token_bytes={} with vocab_size={}: expected {} (uint16 tokens when vocab_size <= "
        "65536, uint32 above)",
        path, token_bytes, meta.vocab_size, expected_width);
  }
  meta.corpus = in.String("corpus", kMaxStringBytes);
  meta.recipe = in.String("recipe", kMaxStringBytes);
  meta.tokenizer_kind = in.String("tokenizer_kind", kTokenCacheMaxKindBytes);
  meta.tokenizer_model = in.String("tokenizer_model", kMaxStringBytes);

  const int64_t counts_at = in.offset();
  const uint64_t n_docs = in.U64("n_documents");
  // Each document needs an 8-byte count, and the checksum follows everything.
  const uint64_t max_docs = static_cast<uint64_t>(std::max<int64_t>(in.remaining() - 8, 0)) / 8;
  if (n_docs > max_docs) {
    Fail(
        "{}: n_documents={} at offset {} needs {} bytes of counts, but only {} bytes are left: "
        "expected at most {} documents (truncated or corrupt file?)",
        path, n_docs, counts_at, n_docs > (UINT64_MAX / 8) ? UINT64_MAX : n_docs * 8,
        in.remaining(), max_docs);
  }
  meta.doc_tokens.resize(n_docs);
  uint64_t total = 0;
  for (uint64_t d = 0; d < n_docs; ++d) {
    const uint64_t count = in.U64("document token count");
    // Bounded by the file's size below; this keeps the sum from overflowing first.
    if (count > static_cast<uint64_t>(in.remaining()) ||
        __builtin_add_overflow(total, count, &total)) {
      Fail(
          "{}: document #{} has {} tokens, more than the {} bytes left in the file hold "
          "(truncated or corrupt file?)",
          path, d, count, in.remaining());
    }
    meta.doc_tokens[d] = static_cast<int64_t>(count);
  }
  // Tokens and the 8-byte checksum must fill the rest of the file exactly. Compared by division
  // first, so that a huge corrupt total cannot overflow the byte count.
  const uint64_t left = static_cast<uint64_t>(in.remaining());
  const uint64_t token_space = left >= 8 ? (left - 8) / token_bytes : 0;
  if (total > token_space || left < 8) {
    Fail(
        "{}: the {} document counts add up to {} tokens ({} bytes of uint{}) plus an 8-byte "
        "checksum, but only {} bytes follow them (truncated or corrupt file?)",
        path, n_docs, total, total > UINT64_MAX / token_bytes ? UINT64_MAX : total * token_bytes,
        8 * token_bytes, left);
  }
  const uint64_t expected = total * token_bytes + 8;
  if (left != expected) {
    Fail(
        "{}: {} bytes follow the document counts, expected exactly {} ({} tokens of uint{} and "
        "an 8-byte checksum): trailing bytes",
        path, left, expected, total, 8 * token_bytes);
  }
  return meta;
}

std::string DescribeTokenizer(std::string_view kind, std::string_view model) {
  return fmt::format("\"{}\" (model {} bytes, FNV-1a {:016x})", kind, model.size(), Fnv1a64(model));
}

// Writes little-endian fields to a file and hashes every byte written.
class HashedWriter {
 public:
  explicit HashedWriter(AtomicFile& file) : file_(file) {}
  uint64_t hash() const { return hash_; }

  void Bytes(const void* data, size_t n, std::string_view field) {
    if (n == 0) return;
    file_.Write(data, n, field);
    hash_ = Fnv1a64(std::string_view(static_cast<const char*>(data), n), hash_);
  }
  void U32(uint32_t v, std::string_view field) {
    unsigned char b[4];
    for (int i = 0; i < 4; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    Bytes(b, 4, field);
  }
  void U64(uint64_t v, std::string_view field) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    Bytes(b, 8, field);
  }
  void String(std::string_view s, std::string_view field) {
    U32(static_cast<uint32_t>(s.size()), field);
    Bytes(s.data(), s.size(), field);
  }

 private:
  AtomicFile& file_;
  uint64_t hash_ = kFnvOffset;
};

}  // namespace

int64_t TokenCacheMeta::n_tokens() const {
  int64_t total = 0;
  for (int64_t n : doc_tokens) total += n;
  return total;
}

int TokenCacheTokenBytes(int32_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

uint64_t Fnv1a64(std::string_view bytes, uint64_t hash) {
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::optional<uint32_t> PeekTokenCacheVersion(const std::string& path) {
  BinaryReader in(path, "a stretch token cache");
  if (in.size() < 8) return std::nullopt;
  unsigned char head[8];
  in.ReadBytes(head, 8, "magic and version");
  if (std::memcmp(head, kMagic, 4) != 0) return std::nullopt;
  return static_cast<uint32_t>(head[4]) | static_cast<uint32_t>(head[5]) << 8 |
         static_cast<uint32_t>(head[6]) << 16 | static_cast<uint32_t>(head[7]) << 24;
}

TokenCacheMeta ReadTokenCacheMeta(const std::string& path) {
  HashedReader in(path);
  return ReadMeta(in);
}

TokenCache ReadTokenCache(const std::string& path) {
  HashedReader in(path);
  TokenCache cache;
  cache.meta = ReadMeta(in);
  const int64_t n = cache.meta.n_tokens();  // bounded by the file's size in ReadMeta
  const int width = TokenCacheTokenBytes(cache.meta.vocab_size);
  const uint32_t vocab = static_cast<uint32_t>(cache.meta.vocab_size);
  cache.tokens.resize(static_cast<size_t>(n));
  std::vector<unsigned char> buf(static_cast<size_t>(std::min(n, kTokenChunk) * width));
  for (int64_t at = 0; at < n; at += kTokenChunk) {
    const int64_t m = std::min(kTokenChunk, n - at);
    in.Bytes(buf.data(), m * width, "tokens");
    for (int64_t i = 0; i < m; ++i) {
      const unsigned char* b = buf.data() + i * width;
      uint32_t v = static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8;
      if (width == 4) v |= static_cast<uint32_t>(b[2]) << 16 | static_cast<uint32_t>(b[3]) << 24;
      if (v >= vocab) {
        Fail("{}: token #{} = {} is outside the vocabulary: expected 0..{} (corrupt file?)", path,
             at + i, v, vocab - 1);
      }
      cache.tokens[static_cast<size_t>(at + i)] = static_cast<int32_t>(v);
    }
  }
  const uint64_t computed = in.hash();
  unsigned char b[8];
  in.Bytes(b, 8, "checksum");
  uint64_t stored = 0;
  for (int i = 7; i >= 0; --i) stored = stored << 8 | b[i];
  if (stored != computed) {
    Fail(
        "{}: checksum {:016x} does not match the contents, whose FNV-1a 64 is {:016x}: the file "
        "is corrupt (delete it to rebuild)",
        path, stored, computed);
  }
  return cache;
}

void RequireTokenCacheTokenizer(const std::string& path, const TokenCacheMeta& meta,
                                std::string_view kind, std::string_view model) {
  if (meta.tokenizer_kind == kind && meta.tokenizer_model == model) return;
  Fail("{}: the cache was made with tokenizer {}, expected tokenizer {}", path,
       DescribeTokenizer(meta.tokenizer_kind, meta.tokenizer_model),
       DescribeTokenizer(kind, model));
}

void WriteTokenCache(const std::string& path, const TokenCache& cache) {
  const TokenCacheMeta& meta = cache.meta;
  STRETCH_CHECK(meta.vocab_size >= 1 && meta.vocab_size <= kTokenCacheMaxVocab, "vocab_size={}",
                meta.vocab_size);
  STRETCH_CHECK(static_cast<int64_t>(meta.tokenizer_kind.size()) <= kTokenCacheMaxKindBytes,
                "tokenizer kind of {} bytes", meta.tokenizer_kind.size());
  for (const std::string* s : {&meta.corpus, &meta.recipe, &meta.tokenizer_model}) {
    STRETCH_CHECK(static_cast<int64_t>(s->size()) <= kMaxStringBytes, "string of {} bytes",
                  s->size());
  }
  int64_t total = 0;
  for (int64_t n : meta.doc_tokens) {
    STRETCH_CHECK(n >= 0, "negative document size {}", n);
    total += n;
  }
  STRETCH_CHECK(total == static_cast<int64_t>(cache.tokens.size()),
                "document counts add up to {} tokens, the cache holds {}", total,
                cache.tokens.size());
  const int width = TokenCacheTokenBytes(meta.vocab_size);

  AtomicFile file(path);
  {
    HashedWriter out(file);
    out.Bytes(kMagic, 4, "magic");
    out.U32(kTokenCacheVersion, "version");
    out.U32(static_cast<uint32_t>(meta.vocab_size), "vocab_size");
    out.U32(static_cast<uint32_t>(width), "token_bytes");
    out.String(meta.corpus, "corpus");
    out.String(meta.recipe, "recipe");
    out.String(meta.tokenizer_kind, "tokenizer_kind");
    out.String(meta.tokenizer_model, "tokenizer_model");
    out.U64(meta.doc_tokens.size(), "n_documents");
    for (int64_t n : meta.doc_tokens) out.U64(static_cast<uint64_t>(n), "document token count");
    std::vector<unsigned char> buf(static_cast<size_t>(kTokenChunk * width));
    const int64_t n = total;
    for (int64_t at = 0; at < n; at += kTokenChunk) {
      const int64_t m = std::min(kTokenChunk, n - at);
      for (int64_t i = 0; i < m; ++i) {
        const int32_t t = cache.tokens[static_cast<size_t>(at + i)];
        STRETCH_CHECK(t >= 0 && t < meta.vocab_size, "token #{} = {} outside vocabulary {}", at + i,
                      t, meta.vocab_size);
        const uint32_t v = static_cast<uint32_t>(t);
        unsigned char* b = buf.data() + i * width;
        for (int k = 0; k < width; ++k) b[k] = static_cast<unsigned char>(v >> (8 * k));
      }
      out.Bytes(buf.data(), static_cast<size_t>(m * width), "tokens");
    }
    out.U64(out.hash(), "checksum");
  }
  file.Commit();
}

}  // namespace stretch
