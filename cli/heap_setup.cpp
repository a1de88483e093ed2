#include "cli/heap_setup.hpp"

#include <cstdint>
#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

// AddressSanitizer, ThreadSanitizer and MemorySanitizer replace malloc with their own allocator,
// which neither mallopt nor the heap's break governs.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PIPETUNE_SANITIZER_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define PIPETUNE_SANITIZER_HEAP 1
#endif
#endif

namespace pipetune::cli {

bool set_up_heap() {
#if defined(__GLIBC__) && !defined(PIPETUNE_SANITIZER_HEAP)
  constexpr std::size_t kHugePage = std::size_t{2} << 20;
  constexpr int kTopPad = 64 << 20;
  // glibc's largest mmap threshold on 64-bit: a larger one is refused.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
  mallopt(M_TOP_PAD, kTopPad);
  // Grow the heap now (by the pad) and mark the whole huge pages of what it grew by.
  const auto before = reinterpret_cast<std::uintptr_t>(sbrk(0));
  void* volatile grow = std::malloc(1 << 20);  // volatile: the compiler must not elide it
  std::free(grow);
  const auto after = reinterpret_cast<std::uintptr_t>(sbrk(0));
  const std::uintptr_t first = (before + kHugePage - 1) & ~(kHugePage - 1);
  const std::uintptr_t end = after & ~(kHugePage - 1);
  // A kernel without THP refuses the advice: the heap then stays in 4 KB pages, as before.
  if (end > first) madvise(reinterpret_cast<void*>(first), end - first, MADV_HUGEPAGE);
  return true;
#else
  return false;
#endif
}

}  // namespace pipetune::cli
