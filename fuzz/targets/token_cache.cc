// The token cache (src/io/token_cache.h): a run's tokenized corpus, read back on every start.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_target.h"
#include "src/io/token_cache.h"

namespace stretch::fuzz {

int FuzzTokenCache(const uint8_t* data, size_t size) {
  const std::string path = WriteScratch("tokens.cache", data, size);
  ExpectErrorOrSuccess([&] { (void)PeekTokenCacheVersion(path); });
  ExpectErrorOrSuccess([&] {
    const TokenCacheMeta meta = ReadTokenCacheMeta(path);
    (void)meta.n_tokens();
    RequireTokenCacheTokenizer(path, meta, meta.tokenizer_kind, meta.tokenizer_model);
  });
  ExpectErrorOrSuccess([&] { ReadTokenCache(path); });
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzTokenCache)
