// Activation offload (KARMA): what a forward leaves for its backward is copied to host memory
// once the forward is done and copied back before the backward, so the device holds only the
// micro-batches being computed. One ActivationOffload per rank, driven by its runtime between ops:
//
//   after an F        offload(key, buffers)   copies start (the rank's copy stream on a GPU);
//                                             the device buffers stay until they are done
//   between ops       release_done()          frees the device buffers of finished offloads
//   an op before a B  start_reload(key)       allocates the buffers again and starts the copies
//                                             back, so they overlap that op (a GPU prefetch)
//   right before a B  finish_reload(key)      the rank's stream waits for the copies
//
// The copies go through the rank's storage (tensor::DeviceAllocator's offload tier): pinned host
// blocks and copy streams with events on a GPU, synchronous copies on host storage (a CPU rank,
// whose reload therefore happens right before its B, as the simulator's blocking model times
// it). The values come back bit for bit, so a run with offload computes the same gradients.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/model/buffer_cache.hpp"
#include "engine/tensor/device_allocator.hpp"
#include "profiler/recorder/rank_recorder.hpp"

namespace pipetune::runtime {

class ActivationOffload {
 public:
  using Key = std::int64_t;  // the runtime's chunk * microbatches + microbatch

  // `storage`: the rank's (the device allocator of its buffers, or the host's). `recorder` (may
  // be null) gets an offload / reload span per synchronous copy (on a GPU the copies run beside
  // the kernels, and the GPU activity trace times them).
  ActivationOffload(tensor::DeviceAllocator& storage, profiler::RankRecorder* recorder);
  ~ActivationOffload();
  ActivationOffload(const ActivationOffload&) = delete;
  ActivationOffload& operator=(const ActivationOffload&) = delete;

  // Starts copying the non-empty `buffers` of micro-batch `mb`, chunk `chunk` to host blocks.
  // The buffers must stay where they are (not resized, not moved) until finish_reload(key).
  void offload(Key key, int mb, int chunk, const std::vector<model::Buffer*>& buffers);
  bool holds(Key key) const { return entries_.count(key) != 0; }
  // Frees the device buffers of every offload whose copies are done, and the host blocks of
  // every reload that is.
  void release_done();
  // Allocates key's buffers again and starts copying them back (nothing when key is not held
  // or already on its way back). An offload still in flight is waited for first.
  void start_reload(Key key);
  // start_reload if not yet, then the rank's stream waits for the copies: key's buffers hold the
  // forward's values for every kernel issued after this.
  void finish_reload(Key key);
  // Waits for every copy in flight and frees what they held (the iteration's end). Throws
  // std::logic_error when an offloaded micro-batch never came back.
  void drain();

  std::int64_t host_bytes() const { return host_bytes_; }
  std::int64_t peak_host_bytes() const { return peak_host_bytes_; }

 private:
  struct Piece {
    model::Buffer* buffer = nullptr;
    std::size_t count = 0;  // floats
    void* host = nullptr;
  };
  enum class Where : std::uint8_t { offloading, host, reloading };
  struct Entry {
    std::vector<Piece> pieces;
    Where where = Where::offloading;
    tensor::DeviceAllocator::Fence copies;  // the last copy of the entry (copies run in order)
    int mb = 0, chunk = 0;
  };
  struct HostRelease {
    tensor::DeviceAllocator::Fence after;
    std::vector<std::pair<void*, std::size_t>> blocks;
  };

  void release_device(Entry& e);
  // Host blocks are kept for reuse by size (shapes repeat every micro-batch, and pinning memory
  // costs far more than copying it), and freed when the offloader goes.
  void* take_host_block(std::size_t bytes);
  void free_host_blocks(std::vector<std::pair<void*, std::size_t>>& blocks) noexcept;

  tensor::DeviceAllocator* storage_;
  profiler::RankRecorder* recorder_;
  std::map<Key, Entry> entries_;
  std::vector<HostRelease> host_releases_;  // host blocks of reloads still copying
  std::unordered_map<std::size_t, std::vector<void*>> spare_host_blocks_;  // bytes -> blocks
  std::int64_t host_bytes_ = 0, peak_host_bytes_ = 0;
};

}  // namespace pipetune::runtime
