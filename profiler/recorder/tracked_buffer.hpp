// An owning float buffer (a std::vector<float> inside) whose heap bytes are accounted in a
// MemoryLedger under one category: capacity * sizeof(float) is allocated in the ledger when the
// storage grows, released when it shrinks or the buffer dies, and carried along by a move (the
// moved-from buffer is left empty, still bound to its ledger, and reports nothing). Copies are
// not implicit (they would double the bytes silently): use clone(). The engine allocates
// activations and temporaries through it. The ledger must outlive its buffers; a buffer is used
// by its rank's thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "profiler/recorder/memory_ledger.hpp"

namespace pipetune::profiler {

class TrackedBuffer {
 public:
  using value_type = float;
  using size_type = std::size_t;
  using iterator = float*;
  using const_iterator = const float*;

  // Untracked and empty; becomes useful by move-assigning a tracked buffer into it.
  TrackedBuffer() noexcept = default;
  TrackedBuffer(MemoryLedger& ledger, MemoryCategory category) noexcept;
  // count elements set to value (one allocation, reported once).
  TrackedBuffer(MemoryLedger& ledger, MemoryCategory category, std::size_t count,
                float value = 0.0f);

  TrackedBuffer(TrackedBuffer&& other) noexcept;
  TrackedBuffer& operator=(TrackedBuffer&& other) noexcept;
  TrackedBuffer(const TrackedBuffer&) = delete;
  TrackedBuffer& operator=(const TrackedBuffer&) = delete;
  ~TrackedBuffer();

  // A copy of the elements, accounted in the same ledger and category.
  TrackedBuffer clone() const;

  std::size_t size() const noexcept { return data_.size(); }
  std::size_t capacity() const noexcept { return data_.capacity(); }
  bool empty() const noexcept { return data_.empty(); }
  float* data() noexcept { return data_.data(); }
  const float* data() const noexcept { return data_.data(); }
  float& operator[](std::size_t i) noexcept { return data_[i]; }
  const float& operator[](std::size_t i) const noexcept { return data_[i]; }
  float* begin() noexcept { return data_.data(); }
  float* end() noexcept { return data_.data() + data_.size(); }
  const float* begin() const noexcept { return data_.data(); }
  const float* end() const noexcept { return data_.data() + data_.size(); }
  std::span<float> span() noexcept { return data_; }
  std::span<const float> span() const noexcept { return data_; }
  operator std::span<float>() noexcept { return data_; }
  operator std::span<const float>() const noexcept { return data_; }
  // Read-only view of the storage for code that takes const std::vector<float>&.
  const std::vector<float>& vector() const noexcept { return data_; }

  // As std::vector; the ledger sees every change of capacity.
  void resize(std::size_t count);
  void resize(std::size_t count, float value);
  void assign(std::size_t count, float value);
  void reserve(std::size_t count);
  void shrink_to_fit();
  void clear() noexcept { data_.clear(); }  // keeps the storage (and its bytes)
  // Frees the storage and releases its bytes; the buffer stays bound to its ledger.
  void release() noexcept;

  // Bytes this buffer has reported to its ledger (capacity * sizeof(float) when tracked).
  std::int64_t bytes() const noexcept { return reported_; }
  MemoryCategory category() const noexcept { return category_; }
  MemoryLedger* ledger() const noexcept { return ledger_; }

 private:
  // Brings the ledger in line with the current capacity.
  void sync();
  // Releases everything reported; only fails (terminates) if the ledger was over-released by
  // someone else, which is a logic error in the caller.
  void give_back() noexcept;

  std::vector<float> data_;
  MemoryLedger* ledger_ = nullptr;
  MemoryCategory category_ = MemoryCategory::Temporaries;
  std::int64_t reported_ = 0;
};

}  // namespace pipetune::profiler
