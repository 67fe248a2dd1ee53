// A 64-bit hash of a byte stream, to tell a file's content from a damaged copy of it (checkpoint
// checksums). Not cryptographic: it guards against flipped bits and torn writes, not forgery.
//
// The stream is taken 8 bytes at a time, little-endian (the tail zero-padded, and the length
// mixed in at the end), and each word w updates the state h <- rotl((h ^ w) * K1, 31) * K2 with
// odd K1, K2. Every step is a bijection of h for a fixed w, and a bijection of w for a fixed h,
// so changing any one word (any bit flip, any number of flips within 8 aligned bytes) always
// changes the result; other damage collides with probability about 2^-64. The result does not
// depend on how the stream is cut into Update calls. It runs at memory speed: one multiply-xor
// round per 8 bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace stretch {

class ContentHash {
 public:
  void Update(std::span<const std::byte> bytes) {
    const std::byte* p = bytes.data();
    size_t n = bytes.size();
    length_ += n;
    while (n > 0 && fill_ > 0) {  // complete a word begun by an earlier call
      pending_[fill_++] = *p++;
      --n;
      if (fill_ == 8) {
        Mix(Load(pending_));
        fill_ = 0;
      }
    }
    for (; n >= 8; p += 8, n -= 8) Mix(Load(p));
    for (; n > 0; --n) pending_[fill_++] = *p++;
  }
  void Update(std::string_view text) { Update(std::as_bytes(std::span(text.data(), text.size()))); }

  // The hash of everything given so far (the object may go on taking bytes).
  uint64_t Digest() const {
    uint64_t h = h_;
    if (fill_ > 0) {
      std::byte tail[8] = {};
      std::memcpy(tail, pending_, fill_);
      h = Round(h, Load(tail));
    }
    h = Round(h, length_);
    return h ^ (h >> 29);
  }

 private:
  static constexpr uint64_t kK1 = 0x9E3779B97F4A7C15ull;  // odd: 2^64 / golden ratio
  static constexpr uint64_t kK2 = 0xC2B2AE3D27D4EB4Full;  // odd
  static uint64_t Load(const std::byte* p) {
    uint64_t w = 0;
    for (int i = 7; i >= 0; --i) w = (w << 8) | static_cast<uint64_t>(p[i]);
    return w;
  }
  static uint64_t Round(uint64_t h, uint64_t w) {
    const uint64_t x = (h ^ w) * kK1;
    return ((x << 31) | (x >> 33)) * kK2;
  }
  void Mix(uint64_t w) { h_ = Round(h_, w); }

  uint64_t h_ = 0x243F6A8885A308D3ull;  // any start; pi's first fraction digits in hex
  uint64_t length_ = 0;
  std::byte pending_[8] = {};
  size_t fill_ = 0;
};

}  // namespace stretch
