#include "profiler/recorder/memory_ledger.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pipetune::profiler {

namespace {

std::string context(std::int32_t rank, MemoryCategory category) {
  return "memory ledger (rank " + std::to_string(rank) + ", " +
         std::string(memory_category_name(category)) + ")";
}

}  // namespace

MemoryLedger::MemoryLedger(std::int32_t rank, Clock::time_point epoch, bool record_samples,
                           std::size_t reserve_samples)
    : rank_(rank), epoch_(epoch), record_samples_(record_samples) {
  if (record_samples_) samples_.reserve(reserve_samples);
}

void MemoryLedger::allocate(MemoryCategory category, std::int64_t bytes) {
  if (bytes < 0)
    throw std::invalid_argument(context(rank_, category) + ": allocate of negative bytes (" +
                                std::to_string(bytes) + ")");
  if (bytes == 0) return;
  const auto i = static_cast<std::size_t>(category);
  if (record_samples_) record(category, current_[i] + bytes);  // may throw: before any change
  current_[i] += bytes;
  peak_[i] = std::max(peak_[i], current_[i]);
  current_total_ += bytes;
  peak_total_ = std::max(peak_total_, current_total_);
}

void MemoryLedger::release(MemoryCategory category, std::int64_t bytes) {
  const auto i = static_cast<std::size_t>(category);
  if (bytes < 0)
    throw std::invalid_argument(context(rank_, category) + ": release of negative bytes (" +
                                std::to_string(bytes) + ")");
  if (bytes > current_[i])
    throw std::logic_error(context(rank_, category) + ": release of " + std::to_string(bytes) +
                           " bytes exceeds the " + std::to_string(current_[i]) +
                           " bytes allocated");
  if (bytes == 0) return;
  if (record_samples_) record(category, current_[i] - bytes);
  current_[i] -= bytes;
  current_total_ -= bytes;
}

void MemoryLedger::reset_peaks() {
  peak_ = current_;
  peak_total_ = current_total_;
}

void MemoryLedger::record(MemoryCategory category, std::int64_t bytes) {
  const auto t = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - epoch_);
  samples_.push_back(MemorySample{rank_, category, t.count(), bytes});
}

}  // namespace pipetune::profiler
