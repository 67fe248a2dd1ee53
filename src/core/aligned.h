// Owning float buffers aligned for SIMD loads (64 bytes: one cache line, any AVX-512 vector).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

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

// For large buffers read end to end again and again (the KV cache, read whole at every decoded
// token): one of at least 2 MiB is aligned to 2 MiB and asked for in huge pages
// (madvise(MADV_HUGEPAGE), before anything touches it), which the kernel grants where
// transparent huge pages are "always" or "madvise" (Debian's default) and memory allows; a
// refusal leaves ordinary pages. Fewer TLB misses when a stream crosses a page every 4 KiB.
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr std::size_t kHuge = std::size_t{2} << 20;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}
  template <typename U>
  struct rebind {
    using other = HugePageAllocator<U>;
  };
  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < kHuge) return static_cast<T*>(::operator new(bytes, std::align_val_t(64)));
    void* p = ::operator new(bytes, std::align_val_t(kHuge));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(p, bytes / kHuge * kHuge, MADV_HUGEPAGE);  // advice only: a refusal changes nothing
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) {
    if (n * sizeof(T) < kHuge) {
      ::operator delete(p, std::align_val_t(64));
    } else {
      ::operator delete(p, std::align_val_t(kHuge));
    }
  }
  bool operator==(const HugePageAllocator&) const { return true; }
};

template <typename T>
using HugePageVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace stretch
