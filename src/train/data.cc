#include "src/train/data.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <unordered_map>
#include <utility>

#include "src/core/check.h"
#include "src/core/error.h"
#include "src/core/input_file.h"
#include "src/io/text.h"
#include "src/io/token_cache.h"

namespace stretch {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kCorpusInput = "a text file or a directory of *.txt files";

CorpusFile StatCorpusFile(const fs::path& p) {
  CorpusFile file;
  file.path = fs::absolute(p).lexically_normal().string();
  struct stat st {};
  if (::stat(file.path.c_str(), &st) != 0) {
    Fail("{}: cannot stat: {}", file.path, std::strerror(errno));
  }
  file.size = static_cast<int64_t>(st.st_size);
  file.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return file;
}

std::string Fingerprint(const std::vector<CorpusFile>& files,
                        const std::optional<std::string>& separator) {
  std::string out = "stretch corpus v1\n";
  out += separator ? fmt::format("separator {} bytes: {}\n", separator->size(), *separator)
                   : std::string("separator none: one document per file\n");
  for (const CorpusFile& f : files) out += fmt::format("{}\t{}\t{}\n", f.path, f.size, f.mtime_ns);
  return out;
}

// Appends the documents of `text` split on lines equal to `separator` (see CorpusOptions).
void SplitOnSeparator(const std::string& text, std::string_view separator,
                      std::vector<std::string>& documents, int64_t& empty_pieces) {
  std::string current;
  auto flush = [&] {
    if (current.empty()) {
      ++empty_pieces;
    } else {
      documents.push_back(std::move(current));
    }
    current.clear();
  };
  size_t at = 0;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    const size_t end = nl == std::string::npos ? text.size() : nl;
    const size_t next = nl == std::string::npos ? text.size() : nl + 1;
    std::string_view line(text.data() + at, end - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line == separator) {
      flush();
    } else {
      current.append(text, at, next - at);
    }
    at = next;
  }
  flush();
}

// The first line where two multi-line strings differ, for a message.
std::string FirstDifference(std::string_view a, std::string_view b) {
  size_t at = 0;
  for (;;) {
    const size_t ea = std::min(a.find('\n', at), a.size());
    const size_t eb = std::min(b.find('\n', at), b.size());
    const std::string_view la = at < a.size() ? a.substr(at, ea - at) : std::string_view();
    const std::string_view lb = at < b.size() ? b.substr(at, eb - at) : std::string_view();
    if (la != lb || ea != eb) {
      return fmt::format("the cache has \"{}\", now \"{}\"", la.empty() ? "(nothing)" : la,
                         lb.empty() ? "(nothing)" : lb);
    }
    if (ea >= a.size() && eb >= b.size()) return "no difference";
    at = ea + 1;
  }
}

void CheckExpectedCorpus(const DataOptions& options, const TokenDocuments& documents) {
  if (!options.expected) return;
  const TokenFingerprint found = FingerprintOf(documents);
  if (found == *options.expected) return;
  Fail(
      "{}: tokenized, it is not the corpus the run was trained on: found {}, expected {} (the "
      "run's own corpus, unchanged)",
      options.corpus.path, found.Text(), options.expected->Text());
}

// Both LoadCorpusData overloads: `given` is the tokenizer to use, or null to make one from
// options.tokenizer.
CorpusData LoadCorpusDataImpl(const DataOptions& options, const TrainingTokenizer* given) {
  CorpusData out;
  const std::string recipe = given ? std::string("given") : options.tokenizer.Recipe();
  const std::vector<CorpusFile> listing = ListCorpusFiles(options.corpus.path);
  if (options.cache_path) {
    const std::string& path = *options.cache_path;
    std::error_code ec;
    if (fs::exists(path, ec)) {
      const std::optional<uint32_t> version = PeekTokenCacheVersion(path);
      if (!version) {
        Fail(
            "{}: exists and is not a stretch token cache (no \"STKC\" magic): refusing to "
            "overwrite it; expected a token cache file or a path that does not exist",
            path);
      }
      if (*version != kTokenCacheVersion) {
        out.cache_note = fmt::format(
            "rebuilt {}: it is a token cache of version {}, this build "
            "writes version {}",
            path, *version, kTokenCacheVersion);
      } else {
        const TokenCacheMeta meta = ReadTokenCacheMeta(path);
        const std::string fingerprint = Fingerprint(listing, options.corpus.separator);
        std::string reason;
        if (meta.corpus != fingerprint) {
          reason = "the corpus changed: " + FirstDifference(meta.corpus, fingerprint);
        } else if (given) {
          try {
            RequireTokenCacheTokenizer(path, meta, given->kind(), given->model());
          } catch (const Error& e) {
            reason = e.what();
          }
        } else if (meta.recipe != recipe) {
          reason = "the tokenizer recipe changed: " + FirstDifference(meta.recipe, recipe);
        }
        if (reason.empty()) {
          TokenCache cache = ReadTokenCache(path);
          out.tokenizer =
              given ? *given : TrainingTokenizer::Load(meta.tokenizer_kind, meta.tokenizer_model);
          if (out.tokenizer.vocab_size() != meta.vocab_size) {
            Fail(
                "{}: vocab_size={}, but its tokenizer has {} tokens: expected the same "
                "(corrupt cache? delete it to rebuild)",
                path, meta.vocab_size, out.tokenizer.vocab_size());
          }
          int64_t at = 0;
          for (int64_t n : cache.meta.doc_tokens) {
            out.documents.Add(out.tokenizer.bos_id(),
                              std::span<const int32_t>(cache.tokens).subspan(at, n));
            at += n;
          }
          CheckExpectedCorpus(options, out.documents);
          out.files = listing;
          for (const CorpusFile& f : out.files) out.empty_files += f.size == 0 ? 1 : 0;
          out.cache = CacheUse::kReused;
          out.cache_note = fmt::format("reused {}", path);  // its counts are the line's
          return out;
        }
        out.cache_note = fmt::format("rebuilt {}: {}", path, reason);
      }
    } else {
      out.cache_note = fmt::format("built {}: no cache there yet", path);
    }
  }

  Corpus corpus = ReadCorpus(options.corpus);
  out.files = corpus.files;
  out.empty_files = corpus.empty_files;
  out.tokenizer = given ? *given : TrainingTokenizer::Train(corpus.documents, options.tokenizer);
  TokenCache cache;
  cache.meta.vocab_size = out.tokenizer.vocab_size();
  cache.meta.corpus = Fingerprint(corpus.files, options.corpus.separator);
  cache.meta.recipe = recipe;
  cache.meta.tokenizer_kind = std::string(out.tokenizer.kind());
  cache.meta.tokenizer_model = out.tokenizer.model();
  for (std::string& doc : corpus.documents) {
    const std::vector<int32_t> ids = out.tokenizer.Encode(doc);
    cache.meta.doc_tokens.push_back(static_cast<int64_t>(ids.size()));
    cache.tokens.insert(cache.tokens.end(), ids.begin(), ids.end());
    out.documents.Add(out.tokenizer.bos_id(), ids);
    std::string().swap(doc);  // the text is no longer needed
  }
  CheckExpectedCorpus(options, out.documents);
  if (options.cache_path) {
    WriteTokenCache(*options.cache_path, cache);
    out.cache = CacheUse::kBuilt;
  }
  return out;
}

}  // namespace

std::string TokenFingerprint::Text() const {
  return fmt::format("{} documents, {} tokens, fingerprint {:016x}", documents, tokens, hash);
}

TokenFingerprint FingerprintOf(const TokenDocuments& documents) {
  // FNV-1a, 64 bits (offset basis and prime from the FNV reference, Fowler, Noll and Vo).
  uint64_t h = 14695981039346656037ull;
  const auto mix = [&h](uint64_t word) {
    for (int b = 0; b < 8; ++b) {
      h ^= (word >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (int64_t d = 0; d < documents.size(); ++d) {
    const std::span<const int32_t> doc = documents.Document(d);
    mix(doc.size());
    for (const int32_t t : doc) mix(static_cast<uint32_t>(t));
  }
  return {documents.size(), documents.n_tokens(), h};
}

// ---------------------------------------------------------------------------------------------
// Corpus

std::vector<CorpusFile> ListCorpusFiles(const std::string& path) {
  std::vector<CorpusFile> files;
  // A FIFO would block until a writer comes, /dev/zero would be read without end: refused.
  if (CheckRegularInputOrDirectory(path, kCorpusInput)) {
    std::vector<fs::path> names;
    for (const fs::directory_entry& entry : fs::directory_iterator(path)) {
      if (entry.is_regular_file() && entry.path().extension() == ".txt") {
        names.push_back(entry.path());
      }
    }
    std::sort(names.begin(), names.end());
    if (names.empty()) Fail("{}: directory has no *.txt files: expected a corpus", path);
    for (const fs::path& p : names) files.push_back(StatCorpusFile(p));
  } else {
    files.push_back(StatCorpusFile(path));
  }
  return files;
}

std::string CorpusFingerprint(const CorpusOptions& options) {
  return Fingerprint(ListCorpusFiles(options.path), options.separator);
}

Corpus ReadCorpus(const CorpusOptions& options) {
  Corpus corpus;
  corpus.files = ListCorpusFiles(options.path);
  for (size_t i = 0; i < corpus.files.size(); ++i) {
    std::string text = ReadWholeFile(corpus.files[i].path, kCorpusInput);
    if (text.empty()) {
      ++corpus.empty_files;
      continue;
    }
    const size_t before = corpus.documents.size();
    if (options.separator) {
      SplitOnSeparator(text, *options.separator, corpus.documents, corpus.empty_pieces);
    } else {
      corpus.documents.push_back(std::move(text));
    }
    for (size_t d = before; d < corpus.documents.size(); ++d) {
      corpus.document_file.push_back(static_cast<int64_t>(i));
      corpus.bytes += static_cast<int64_t>(corpus.documents[d].size());
    }
  }
  if (corpus.documents.empty()) {
    Fail("{}: no documents: {} file(s), {} of them empty{}", options.path, corpus.files.size(),
         corpus.empty_files, options.separator ? ", the others only separator lines" : "");
  }
  return corpus;
}

// ---------------------------------------------------------------------------------------------
// Documents

void TokenDocuments::Add(int32_t bos, std::span<const int32_t> body) {
  tokens_.push_back(bos);
  tokens_.insert(tokens_.end(), body.begin(), body.end());
  starts_.push_back(static_cast<int64_t>(tokens_.size()));
}

std::span<const int32_t> TokenDocuments::Document(int64_t d) const {
  STRETCH_CHECK(d >= 0 && d < size(), "document {} of {}", d, size());
  const size_t s = static_cast<size_t>(d);
  return std::span<const int32_t>(tokens_).subspan(
      static_cast<size_t>(starts_[s]), static_cast<size_t>(starts_[s + 1] - starts_[s]));
}

CorpusData LoadCorpusData(const DataOptions& options) {
  return LoadCorpusDataImpl(options, nullptr);
}

CorpusData LoadCorpusData(const DataOptions& options, const TrainingTokenizer& tokenizer) {
  return LoadCorpusDataImpl(options, &tokenizer);
}

// ---------------------------------------------------------------------------------------------
// Held-out split

uint64_t UniformIndex(Rng& rng, uint64_t n) {
  STRETCH_CHECK(n >= 1, "UniformIndex over an empty range");
  return UniformBelow(rng, n);
}

DataSplit SplitDocuments(const TokenDocuments& documents, const SplitOptions& options) {
  const int64_t n = documents.size();
  if (n == 1 && !options.valid_documents) {
    // One text file (a book): split by position, as `stretch lab` splits a single file. Its last
    // valid_fraction of tokens (at least one) is held out; each side begins with the BOS.
    const double f = options.valid_fraction;
    if (!(f > 0.0 && f < 1.0)) Fail("valid_fraction={}: expected a fraction in (0, 1)", f);
    const std::span<const int32_t> doc = documents.Document(0);
    const int64_t body = static_cast<int64_t>(doc.size()) - 1;
    if (body < 2) {
      Fail("1 document of {} token(s): too short to hold any of it out for validation", body);
    }
    const int64_t n_valid =
        std::clamp<int64_t>(std::llround(f * static_cast<double>(body)), 1, body - 1);
    DataSplit split;
    split.train.Add(doc[0], doc.subspan(1, static_cast<size_t>(body - n_valid)));
    split.valid.Add(doc[0], doc.subspan(static_cast<size_t>(1 + body - n_valid)));
    split.train_ids = {0};
    split.valid_ids = {0};
    return split;
  }
  if (n < 2) {
    Fail(
        "{} document(s): a held-out split by document needs at least 2 (add files, or split "
        "files into documents with a separator line){}",
        n, n == 1 ? "; without valid_documents a single document is split by position" : "");
  }
  int64_t n_valid = 0;
  if (options.valid_documents) {
    n_valid = *options.valid_documents;
    if (n_valid < 1 || n_valid > n - 1) {
      Fail(
          "valid_documents={}: expected 1..{} (the corpus has {} documents, and training keeps "
          "at least one)",
          n_valid, n - 1, n);
    }
  } else {
    const double f = options.valid_fraction;
    if (!(f > 0.0 && f < 1.0)) Fail("valid_fraction={}: expected a fraction in (0, 1)", f);
    n_valid = std::clamp<int64_t>(std::llround(f * static_cast<double>(n)), 1, n - 1);
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  Rng rng(options.seed);
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(UniformIndex(rng, static_cast<uint64_t>(i + 1)));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  std::vector<uint8_t> held_out(static_cast<size_t>(n), 0);
  for (int64_t k = 0; k < n_valid; ++k)
    held_out[static_cast<size_t>(order[static_cast<size_t>(k)])] = 1;
  DataSplit split;
  for (int64_t d = 0; d < n; ++d) {
    const std::span<const int32_t> doc = documents.Document(d);
    TokenDocuments& side = held_out[static_cast<size_t>(d)] ? split.valid : split.train;
    side.Add(doc[0], doc.subspan(1));
    (held_out[static_cast<size_t>(d)] ? split.valid_ids : split.train_ids).push_back(d);
  }
  return split;
}

// ---------------------------------------------------------------------------------------------
// Windows

WindowSampler::WindowSampler(const TokenDocuments& documents, int64_t seq_len)
    : documents_(&documents), seq_len_(seq_len) {
  if (seq_len < 1) Fail("seq_len={}: expected at least 1", seq_len);
  window_starts_.reserve(static_cast<size_t>(documents.size()) + 1);
  window_starts_.push_back(0);
  int64_t longest = 0;
  for (int64_t d = 0; d < documents.size(); ++d) {
    const int64_t n = static_cast<int64_t>(documents.Document(d).size());
    longest = std::max(longest, n);
    // A window reads seq_len + 1 tokens: starts 0..n - seq_len - 1 fit.
    const int64_t windows = std::max<int64_t>(n - seq_len, 0);
    if (windows == 0) ++skipped_documents_;
    window_starts_.push_back(window_starts_.back() + windows);
  }
  if (window_starts_.back() == 0) {
    Fail(
        "seq_len={}: no document has the {} tokens a training window needs (inputs and "
        "next-token targets); the longest of {} has {}",
        seq_len, seq_len + 1, documents.size(), longest);
  }
}

Window WindowSampler::Sample(Rng& rng) const {
  const int64_t u =
      static_cast<int64_t>(UniformIndex(rng, static_cast<uint64_t>(window_starts_.back())));
  // The document d with window_starts_[d] <= u < window_starts_[d + 1]; documents without windows
  // have equal neighbours and are never chosen.
  const auto it = std::upper_bound(window_starts_.begin(), window_starts_.end(), u);
  const int64_t d = (it - window_starts_.begin()) - 1;
  return Window{d, u - window_starts_[static_cast<size_t>(d)], seq_len_};
}

void CopyWindow(const TokenDocuments& documents, const Window& w, std::span<int32_t> inputs,
                std::span<int32_t> targets) {
  const std::span<const int32_t> doc = documents.Document(w.document);
  STRETCH_CHECK(
      w.offset >= 0 && w.length >= 1 && w.offset + w.length + 1 <= static_cast<int64_t>(doc.size()),
      "window at {}+{} outside document {} of {} tokens", w.offset, w.length, w.document,
      doc.size());
  STRETCH_CHECK(static_cast<int64_t>(inputs.size()) == w.length &&
                    static_cast<int64_t>(targets.size()) == w.length,
                "window of {} into spans of {} and {}", w.length, inputs.size(), targets.size());
  const auto first = doc.begin() + w.offset;
  std::copy(first, first + w.length, inputs.begin());
  std::copy(first + 1, first + w.length + 1, targets.begin());
}

Batch SampleBatch(const TokenDocuments& documents, const WindowSampler& sampler, Rng& rng,
                  int64_t batch_size) {
  if (batch_size < 1) Fail("batch_size={}: expected at least 1", batch_size);
  Batch batch;
  batch.B = batch_size;
  batch.T = sampler.seq_len();
  batch.inputs.resize(static_cast<size_t>(batch.B * batch.T));
  batch.targets.resize(static_cast<size_t>(batch.B * batch.T));
  for (int64_t b = 0; b < batch.B; ++b) {
    const Window w = sampler.Sample(rng);
    const size_t row = static_cast<size_t>(b * batch.T);
    CopyWindow(documents, w, std::span<int32_t>(batch.inputs).subspan(row, batch.T),
               std::span<int32_t>(batch.targets).subspan(row, batch.T));
    batch.windows.push_back(w);
  }
  return batch;
}

std::vector<Window> ValidationWindows(const TokenDocuments& documents, int64_t seq_len,
                                      TailWindow tail) {
  if (seq_len < 1) Fail("seq_len={}: expected at least 1", seq_len);
  std::vector<Window> windows;
  for (int64_t d = 0; d < documents.size(); ++d) {
    const int64_t targets = static_cast<int64_t>(documents.Document(d).size()) - 1;
    int64_t offset = 0;
    for (; offset + seq_len <= targets; offset += seq_len) {
      windows.push_back(Window{d, offset, seq_len});
    }
    if (tail == TailWindow::kKeep && offset < targets) {
      windows.push_back(Window{d, offset, targets - offset});
    }
  }
  return windows;
}

// ---------------------------------------------------------------------------------------------
// Unigram entropy

namespace {
Entropy EntropyOfCounts(const std::vector<int64_t>& counts, int64_t total) {
  Entropy e;
  e.tokens = total;
  if (total == 0) return e;
  // H = -sum (c/N) ln(c/N) = ln N - (1/N) sum c ln c.
  double sum_c_log_c = 0.0;
  for (int64_t c : counts) {
    if (c == 0) continue;
    ++e.distinct;
    sum_c_log_c += static_cast<double>(c) * std::log(static_cast<double>(c));
  }
  const double n = static_cast<double>(total);
  e.nats = std::max(0.0, std::log(n) - sum_c_log_c / n);
  e.bits = e.nats / std::log(2.0);
  return e;
}

void CountTokens(std::span<const int32_t> tokens, int32_t vocab_size,
                 std::vector<int64_t>& counts) {
  for (int32_t t : tokens) {
    STRETCH_CHECK(t >= 0 && t < vocab_size, "token {} outside vocabulary {}", t, vocab_size);
    ++counts[static_cast<size_t>(t)];
  }
}
}  // namespace

Entropy UnigramEntropy(std::span<const int32_t> tokens, int32_t vocab_size) {
  STRETCH_CHECK(vocab_size >= 1, "vocab_size={}", vocab_size);
  std::vector<int64_t> counts(static_cast<size_t>(vocab_size), 0);
  CountTokens(tokens, vocab_size, counts);
  return EntropyOfCounts(counts, static_cast<int64_t>(tokens.size()));
}

Entropy UnigramEntropy(const TokenDocuments& documents, int32_t vocab_size) {
  STRETCH_CHECK(vocab_size >= 1, "vocab_size={}", vocab_size);
  std::vector<int64_t> counts(static_cast<size_t>(vocab_size), 0);
  int64_t total = 0;
  for (int64_t d = 0; d < documents.size(); ++d) {
    const std::span<const int32_t> body = documents.Document(d).subspan(1);
    CountTokens(body, vocab_size, counts);
    total += static_cast<int64_t>(body.size());
  }
  return EntropyOfCounts(counts, total);
}

}  // namespace stretch
