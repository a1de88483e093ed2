// The page bookkeeping behind the guarded test device (guarded_device.hpp): blocks carved out of
// large ranges reserved PROT_NONE, so that opening and closing the device takes one mprotect per
// run of adjacent live blocks rather than one per block. A block per mapping made every op cost
// two system calls per live block (hundreds), and on a VM where mprotect is slow (a TLB shootdown
// each) the DeviceStorage plan tests spent 90% of their time in the kernel: 255 s of system time
// for one 146 s test.
//
// What the guard promises is unchanged: while the arena is closed every page of it is PROT_NONE;
// while open, exactly the live blocks are readable and writable, so a freed block faults even
// inside an op. A freed block's pages are given back (MADV_DONTNEED), so a block is zero when
// handed out again, as a fresh mapping was. Not thread-safe: the owner locks.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <iterator>
#include <map>
#include <new>
#include <system_error>

namespace pipetune::testing {

class GuardedArena {
 public:
  GuardedArena() = default;
  GuardedArena(const GuardedArena&) = delete;
  GuardedArena& operator=(const GuardedArena&) = delete;
  ~GuardedArena() {
    for (const auto& [base, chunk] : chunks_) ::munmap(base, chunk.size);
  }

  static std::size_t page() { return static_cast<std::size_t>(::sysconf(_SC_PAGE_SIZE)); }

  // A block of at least `bytes` (one page for 0), page-aligned, zero, and accessible iff `open`.
  void* allocate(std::size_t bytes, bool open) {
    const std::size_t size = rounded(bytes);
    char* block = take_hole(size);
    if (block == nullptr) block = take_top(size);
    live_[block] = size;
    if (open) protect(block, size, PROT_READ | PROT_WRITE);
    return block;
  }

  void deallocate(void* p, bool open) {
    auto it = live_.find(static_cast<char*>(p));
    if (it == live_.end()) return;
    const auto [block, size] = *it;
    live_.erase(it);
    if (open) protect(block, size, PROT_NONE);
    ::madvise(block, size, MADV_DONTNEED);
    give_back(block, size);
  }

  // Every live block readable and writable (open) or nothing (closed): one call per run.
  void set_open(bool open) {
    const int prot = open ? PROT_READ | PROT_WRITE : PROT_NONE;
    char* run = nullptr;
    std::size_t run_size = 0;
    for (const auto& [block, size] : live_) {
      if (run != nullptr && run + run_size == block) {
        run_size += size;
        continue;
      }
      if (run != nullptr) protect(run, run_size, prot);
      run = block;
      run_size = size;
    }
    if (run != nullptr) protect(run, run_size, prot);
  }

  std::size_t live_blocks() const { return live_.size(); }

 private:
  struct Chunk {
    std::size_t size = 0;  // reserved
    std::size_t top = 0;   // bytes handed out from the start at least once
  };
  static constexpr std::size_t kChunkBytes = std::size_t{1} << 30;  // address space, not memory

  static std::size_t rounded(std::size_t bytes) {
    const std::size_t p = page();
    return std::max<std::size_t>(1, (bytes + p - 1) / p) * p;
  }
  // A failure here (ENOMEM: the process ran out of mappings) ends the test with errno's words:
  // it comes from noexcept paths (a close, a free), where std::terminate prints what().
  static void protect(char* p, std::size_t bytes, int prot) {
    if (::mprotect(p, bytes, prot) != 0)
      throw std::system_error(errno, std::generic_category(), "guarded arena: mprotect");
  }

  // First fit among the holes below the chunks' tops.
  char* take_hole(std::size_t size) {
    for (auto it = holes_.begin(); it != holes_.end(); ++it) {
      if (it->second < size) continue;
      auto [start, hole] = *it;
      holes_.erase(it);
      if (hole > size) holes_[start + size] = hole - size;
      return start;
    }
    return nullptr;
  }

  char* take_top(std::size_t size) {
    for (auto& [base, chunk] : chunks_) {
      if (chunk.size - chunk.top < size) continue;
      char* block = base + chunk.top;
      chunk.top += size;
      return block;
    }
    const std::size_t reserve = std::max(kChunkBytes, size);
    void* p =
        ::mmap(nullptr, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    auto& chunk = chunks_[static_cast<char*>(p)];
    chunk.size = reserve;
    chunk.top = size;
    return static_cast<char*>(p);
  }

  // The chunk holding `p` (it must hold it).
  std::map<char*, Chunk>::iterator chunk_of(char* p) { return std::prev(chunks_.upper_bound(p)); }

  // A freed block becomes a hole, merged with its neighbours in the same chunk; a hole that
  // reaches its chunk's top lowers the top instead.
  void give_back(char* block, std::size_t size) {
    auto chunk = chunk_of(block);
    char* const base = chunk->first;
    auto next = holes_.lower_bound(block);
    if (next != holes_.end() && block + size == next->first && chunk_of(next->first) == chunk) {
      size += next->second;
      next = holes_.erase(next);
    }
    if (next != holes_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == block && chunk_of(prev->first) == chunk) {
        block = prev->first;
        size += prev->second;
        holes_.erase(prev);
      }
    }
    if (block + size == base + chunk->second.top)
      chunk->second.top = static_cast<std::size_t>(block - base);
    else
      holes_[block] = size;
  }

  std::map<char*, Chunk> chunks_;       // reserved ranges, by base
  std::map<char*, std::size_t> live_;   // handed-out blocks, by address
  std::map<char*, std::size_t> holes_;  // freed ranges below their chunk's top, by address
};

}  // namespace pipetune::testing
