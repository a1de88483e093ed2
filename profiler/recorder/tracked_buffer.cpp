#include "profiler/recorder/tracked_buffer.hpp"

#include <utility>

namespace pipetune::profiler {

TrackedBuffer::TrackedBuffer(MemoryLedger& ledger, MemoryCategory category) noexcept
    : ledger_(&ledger), category_(category) {}

TrackedBuffer::TrackedBuffer(MemoryLedger& ledger, MemoryCategory category, std::size_t count,
                             float value)
    : data_(count, value), ledger_(&ledger), category_(category) {
  sync();
}

TrackedBuffer::TrackedBuffer(TrackedBuffer&& other) noexcept
    : data_(std::move(other.data_)),
      ledger_(other.ledger_),
      category_(other.category_),
      reported_(std::exchange(other.reported_, 0)) {
  std::vector<float>().swap(other.data_);  // a moved-from vector is empty in practice; make sure
}

TrackedBuffer& TrackedBuffer::operator=(TrackedBuffer&& other) noexcept {
  if (this == &other) return *this;
  give_back();
  data_ = std::move(other.data_);
  std::vector<float>().swap(other.data_);
  ledger_ = other.ledger_;
  category_ = other.category_;
  reported_ = std::exchange(other.reported_, 0);
  return *this;
}

TrackedBuffer::~TrackedBuffer() {
  give_back();
}

TrackedBuffer TrackedBuffer::clone() const {
  TrackedBuffer copy;
  copy.ledger_ = ledger_;
  copy.category_ = category_;
  copy.data_ = data_;
  copy.sync();
  return copy;
}

void TrackedBuffer::resize(std::size_t count) {
  data_.resize(count);
  sync();
}

void TrackedBuffer::resize(std::size_t count, float value) {
  data_.resize(count, value);
  sync();
}

void TrackedBuffer::assign(std::size_t count, float value) {
  data_.assign(count, value);
  sync();
}

void TrackedBuffer::reserve(std::size_t count) {
  data_.reserve(count);
  sync();
}

void TrackedBuffer::shrink_to_fit() {
  data_.shrink_to_fit();
  sync();
}

void TrackedBuffer::release() noexcept {
  std::vector<float>().swap(data_);
  give_back();
}

void TrackedBuffer::sync() {
  if (ledger_ == nullptr) return;
  const auto now = static_cast<std::int64_t>(data_.capacity() * sizeof(float));
  if (now > reported_) {
    ledger_->allocate(category_, now - reported_);
  } else if (now < reported_) {
    ledger_->release(category_, reported_ - now);
  }
  reported_ = now;
}

void TrackedBuffer::give_back() noexcept {
  if (ledger_ != nullptr && reported_ > 0) ledger_->release(category_, reported_);
  reported_ = 0;
}

}  // namespace pipetune::profiler
