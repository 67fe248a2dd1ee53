// Owning float buffers aligned for SIMD loads (64 bytes: one cache line, any AVX-512 vector).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace stretch {

template <typename T, std::size_t kAlign = 64>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U, kAlign>&) {}
  template <typename U>
  struct rebind {
    using other = AlignedAllocator<U, kAlign>;
  };
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kAlign)));
  }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t(kAlign)); }
  bool operator==(const AlignedAllocator&) const { return true; }
};

template <typename T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace stretch
