#include "engine/runtime/activation_offload.hpp"

#include <optional>
#include <stdexcept>
#include <string>

#include "engine/model/buffers.hpp"

namespace pipetune::runtime {

ActivationOffload::ActivationOffload(tensor::DeviceAllocator& storage,
                                     profiler::RankRecorder* recorder)
    : storage_(&storage), recorder_(recorder) {}

ActivationOffload::~ActivationOffload() {
  // After an error mid-iteration: wait for what is in flight (a copy must not outlive its
  // blocks), then free the host blocks. The device buffers belong to the runtime's state.
  for (auto& [key, e] : entries_) {
    try {
      storage_->wait_host(e.copies);
    } catch (...) {  // a lost device: nothing more can be done for its copies
    }
    for (Piece& p : e.pieces) storage_->free_host_tier(p.host, p.count * sizeof(float));
  }
  for (HostRelease& r : host_releases_) {
    try {
      storage_->wait_host(r.after);
    } catch (...) {
    }
    free_host_blocks(r.blocks);
  }
  for (auto& [bytes, blocks] : spare_host_blocks_)
    for (void* block : blocks) storage_->free_host_tier(block, bytes);
}

void ActivationOffload::offload(Key key, int mb, int chunk,
                                const std::vector<model::Buffer*>& buffers) {
  if (entries_.count(key) != 0)
    throw std::logic_error("activation offload: micro-batch " + std::to_string(mb) + " chunk " +
                           std::to_string(chunk) + " offloaded twice");
  // In the map first: after an error midway, the destructor frees the blocks already made.
  Entry& e = entries_[key];
  e.mb = mb;
  e.chunk = chunk;
  // A span where the copies are the host's own work (they block the rank's thread).
  std::optional<profiler::ScopedSpan> span;
  if (!storage_->on_device())
    span.emplace(recorder_, profiler::SpanKind::Offload, profiler::Stream::Offload, mb, chunk);
  for (model::Buffer* b : buffers) {
    if (b->empty()) continue;
    Piece p{b, b->size(), nullptr};
    const std::size_t bytes = p.count * sizeof(float);
    p.host = take_host_block(bytes);
    e.pieces.push_back(p);  // before the copy, so an error still frees the block
    e.copies = storage_->offload_to_host(p.host, b->data(), bytes);
    host_bytes_ += static_cast<std::int64_t>(bytes);
  }
  if (host_bytes_ > peak_host_bytes_) peak_host_bytes_ = host_bytes_;
  if (storage_->fence_done(e.copies)) release_device(e);
}

void ActivationOffload::release_device(Entry& e) {
  for (Piece& p : e.pieces) model::release(*p.buffer);
  e.where = Where::host;
  e.copies = nullptr;
}

void* ActivationOffload::take_host_block(std::size_t bytes) {
  const auto it = spare_host_blocks_.find(bytes);
  if (it == spare_host_blocks_.end() || it->second.empty())
    return storage_->allocate_host_tier(bytes);
  void* block = it->second.back();
  it->second.pop_back();
  return block;
}

void ActivationOffload::free_host_blocks(
    std::vector<std::pair<void*, std::size_t>>& blocks) noexcept {
  for (auto& [block, bytes] : blocks) {
    try {
      spare_host_blocks_[bytes].push_back(block);
    } catch (...) {  // no memory to keep it: free it
      storage_->free_host_tier(block, bytes);
    }
    host_bytes_ -= static_cast<std::int64_t>(bytes);
  }
  blocks.clear();
}

void ActivationOffload::release_done() {
  for (auto& [key, e] : entries_)
    if (e.where == Where::offloading && storage_->fence_done(e.copies)) release_device(e);
  std::size_t kept = 0;
  for (HostRelease& r : host_releases_) {
    if (storage_->fence_done(r.after))
      free_host_blocks(r.blocks);
    else
      host_releases_[kept++] = std::move(r);
  }
  host_releases_.resize(kept);
}

void ActivationOffload::start_reload(Key key) {
  const auto it = entries_.find(key);
  if (it == entries_.end() || it->second.where == Where::reloading) return;
  Entry& e = it->second;
  if (e.where == Where::offloading) {  // its B came before its offload finished
    storage_->wait_host(e.copies);
    release_device(e);
  }
  std::optional<profiler::ScopedSpan> span;
  if (!storage_->on_device())
    span.emplace(recorder_, profiler::SpanKind::Reload, profiler::Stream::Offload, e.mb, e.chunk);
  for (Piece& p : e.pieces) {
    tensor::TensorView dst =
        model::sized(*p.buffer, tensor::Shape{static_cast<std::int64_t>(p.count)});
    e.copies = storage_->reload_from_host(dst.data, p.host, p.count * sizeof(float));
  }
  e.where = Where::reloading;
}

void ActivationOffload::finish_reload(Key key) {
  start_reload(key);
  const auto it = entries_.find(key);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  storage_->wait_for(e.copies);
  HostRelease r{std::move(e.copies), {}};
  for (Piece& p : e.pieces) r.blocks.emplace_back(p.host, p.count * sizeof(float));
  entries_.erase(it);
  // The host blocks are read until the copies are done.
  if (storage_->fence_done(r.after))
    free_host_blocks(r.blocks);
  else
    host_releases_.push_back(std::move(r));
}

void ActivationOffload::drain() {
  if (!entries_.empty()) {
    const Entry& e = entries_.begin()->second;
    throw std::logic_error("activation offload: micro-batch " + std::to_string(e.mb) + " chunk " +
                           std::to_string(e.chunk) + " was offloaded and never reloaded");
  }
  for (HostRelease& r : host_releases_) {
    storage_->wait_host(r.after);
    free_host_blocks(r.blocks);
  }
  host_releases_.clear();
}

}  // namespace pipetune::runtime
