// Bytes in use on one rank by category: current and peak per category, the peak of the total,
// and a MemorySample (timestamped in steady-clock ns since the run's epoch, like spans) on every
// change. One ledger per rank, used by that rank's thread only: no locks. Balances are always
// kept; samples only when recording is on (a disabled recorder records nothing).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "profiler/trace.hpp"

namespace pipetune::profiler {

class MemoryLedger {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kDefaultReserve = std::size_t{1} << 12;

  MemoryLedger(std::int32_t rank, Clock::time_point epoch, bool record_samples = true,
               std::size_t reserve_samples = kDefaultReserve);
  // TrackedBuffers point at their ledger: it stays where it was made.
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  // bytes >= 0 (std::invalid_argument otherwise); 0 changes nothing and records no sample.
  void allocate(MemoryCategory category, std::int64_t bytes);
  // Throws std::logic_error naming the rank and category when bytes exceeds what is allocated.
  void release(MemoryCategory category, std::int64_t bytes);

  std::int64_t current(MemoryCategory category) const {
    return current_[static_cast<std::size_t>(category)];
  }
  std::int64_t peak(MemoryCategory category) const {
    return peak_[static_cast<std::size_t>(category)];
  }
  std::int64_t current_total() const { return current_total_; }
  // Highest sum over categories at any one time (not the sum of the per-category peaks).
  std::int64_t peak_total() const { return peak_total_; }
  // Starts new peaks from the current balances (for example per step).
  void reset_peaks();

  std::int32_t rank() const { return rank_; }
  bool records_samples() const { return record_samples_; }
  // One sample per change: the category's bytes from t_ns on. In time order.
  const std::vector<MemorySample>& samples() const { return samples_; }
  // Drops the samples (keeps balances, peaks and capacity).
  void clear_samples() { samples_.clear(); }

 private:
  // Appends the sample "category holds bytes from now on"; the only step that can throw
  // (std::bad_alloc), so callers do it before changing a balance.
  void record(MemoryCategory category, std::int64_t bytes);

  std::int32_t rank_;
  Clock::time_point epoch_;
  bool record_samples_;
  std::array<std::int64_t, kMemoryCategoryCount> current_{};
  std::array<std::int64_t, kMemoryCategoryCount> peak_{};
  std::int64_t current_total_ = 0;
  std::int64_t peak_total_ = 0;
  std::vector<MemorySample> samples_;
};

}  // namespace pipetune::profiler
