// A host emulation of a GPU rank, for checking without a GPU that the engine never touches device
// storage from host code: GuardedAllocator is a DeviceAllocator of kind device whose blocks are
// pages kept PROT_NONE (guarded_arena.hpp), readable and writable only inside its own copies and
// inside the ops of GuardedBackend (a CpuBackend whose every op opens the rank's blocks for its
// duration). Any other host access (a std::fill, a vector copy, a loop over a buffer) is a
// segmentation fault. GuardedRankDevice puts it together with a StagingCommunicator, as the CUDA
// rank device does with cudaMalloc, the CudaBackend and its stream.
//
// With an activity log (GuardedRankDevice(..., log_activity = true)) the device also reports its
// work as CUPTI reports a GPU's: each op a kernel named after it ("linear_forward"), each copy a
// memcpy and each fill a memset, on stream kLogStream, with the call that launched it (the same
// correlation id), in a clock kLogClockAhead ns ahead of the engine's. The work is synchronous,
// so a record spans its call.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/comm/reduction.hpp"
#include "engine/model/buffer_cache.hpp"
#include "engine/runtime/peer_copy_communicator.hpp"
#include "engine/runtime/staging_communicator.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/tensor/cpu/cpu_backend.hpp"
#include "engine/tensor/device_allocator.hpp"
#include "guarded_arena.hpp"
#include "profiler/gpu/gpu_capture.hpp"

namespace pipetune::testing {

class GuardedAllocator final : public tensor::DeviceAllocator {
 public:
  tensor::StorageKind kind() const override { return tensor::StorageKind::device; }
  std::string_view name() const override { return "guarded"; }
  std::size_t alignment() const override { return page(); }

  void copy_to_host(void* host, const void* device, std::size_t bytes) override {
    Open open(*this, "memcpy DtoH", bytes);
    if (bytes > 0) std::memmove(host, device, bytes);
  }
  void copy_from_host(void* device, const void* host, std::size_t bytes) override {
    Open open(*this, "memcpy HtoD", bytes);
    if (bytes > 0) std::memmove(device, host, bytes);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    Open open(*this, "memcpy DtoD", bytes);
    if (bytes > 0) std::memmove(dst, src, bytes);
  }
  void fill_zero(void* dst, std::size_t bytes) override {
    Open open(*this, "memset", bytes);
    if (bytes > 0) std::memset(dst, 0, bytes);
  }
  // Another rank's guarded storage (ranks as streams of one device): both open for the copy.
  void copy_from_peer(void* dst, tensor::DeviceAllocator& peer, const void* src,
                      std::size_t bytes) override {
    auto* other = dynamic_cast<GuardedAllocator*>(&peer);
    if (other == nullptr)
      throw std::logic_error("guarded storage cannot copy from '" + std::string(peer.name()) + "'");
    Open theirs(*other);
    Open mine(*this, "memcpy DtoD", bytes);
    if (bytes > 0) std::memmove(dst, src, bytes);
    ++peer_copies_;
  }
  void combine_from_peer(float* dst, tensor::DeviceAllocator& peer, const float* src,
                         std::size_t count, comm::ReduceOp op) override {
    auto* other = dynamic_cast<GuardedAllocator*>(&peer);
    if (other == nullptr)
      throw std::logic_error("guarded storage cannot combine from '" + std::string(peer.name()) +
                             "'");
    Open theirs(*other);
    Open mine(*this, op == comm::ReduceOp::sum ? "accumulate" : "maximum", count * sizeof(float));
    comm::fold_into(op, dst, src, count);
    ++peer_copies_;
  }
  std::size_t peer_copies() const { return peer_copies_; }

  // The offload tier as a GPU's copy streams run it: later than issued. A copy is queued, and
  // runs (with every copy queued before it) when its fence is waited for (wait_for, wait_host)
  // or polled a second time (fence_done: the first poll always finds it still running). A block
  // freed while a queued copy still reads or writes it is an offload hazard: counted, and the
  // copy dropped, so the values it should have moved are lost (tests check both).
  Fence offload_to_host(void* host, const void* device, std::size_t bytes) override {
    return queue_copy(host, device, bytes, "memcpy DtoH");
  }
  Fence reload_from_host(void* device, const void* host, std::size_t bytes) override {
    return queue_copy(device, host, bytes, "memcpy HtoD");
  }
  bool fence_done(const Fence& fence) override {
    const QueuedCopy* c = ours(fence);
    if (c == nullptr) return true;
    std::lock_guard lock(state_);
    if (c->sequence <= copies_done_) return true;
    if (c->polls++ == 0) return false;
    run_copies_through(c->sequence);
    return true;
  }
  void wait_host(const Fence& fence) override {
    if (const QueuedCopy* c = ours(fence)) {
      std::lock_guard lock(state_);
      run_copies_through(c->sequence);
    }
  }
  void wait_for(const Fence& fence) override { wait_host(fence); }
  void free_host_tier(void* block, std::size_t bytes) noexcept override {
    {
      std::lock_guard lock(state_);
      drop_copies_touching(block, bytes);
    }
    tensor::DeviceAllocator::free_host_tier(block, bytes);
  }
  std::size_t offload_copies() const { return offload_copies_; }
  std::size_t offload_hazards() const { return offload_hazards_; }

  // Opens every block for reading and writing while alive (nested opens allowed); with a name,
  // and the activity log on, logs the outermost one as device work.
  class Open {
   public:
    explicit Open(GuardedAllocator& a, const char* work = nullptr, std::size_t bytes = 0)
        : a_(a), work_(work), bytes_(bytes) {
      a_.open();
      if (work_ != nullptr && a_.logging_ && a_.log_depth_++ == 0)
        start_ = a_.log_now();
      else
        work_ = nullptr;
    }
    ~Open() {
      if (work_ != nullptr) {
        --a_.log_depth_;
        a_.log(work_, bytes_, start_);
      }
      a_.close();
    }
    Open(const Open&) = delete;
    Open& operator=(const Open&) = delete;

   private:
    GuardedAllocator& a_;
    const char* work_;
    std::size_t bytes_;
    std::int64_t start_ = 0;
  };

  static constexpr std::uint32_t kLogStream = 7;
  static constexpr std::int64_t kLogClockAhead = 5'000'000;
  void start_log(std::chrono::steady_clock::time_point epoch) {
    logging_ = true;
    epoch_ = epoch;
  }
  profiler::GpuCapture take_log() { return std::exchange(log_, {}); }

 protected:
  // The live blocks are kept here, under the same lock as the open depth: the base class
  // registers a block only after do_allocate returns, and another rank's thread opening this
  // allocator for a peer copy in between would leave it closed while this rank's next op (a
  // nested open, which protects nothing) wrote to it.
  void* do_allocate(std::size_t bytes) override {
    std::lock_guard lock(state_);
    return arena_.allocate(bytes, depth_ > 0);
  }
  void do_deallocate(void* block, std::size_t bytes) noexcept override {
    std::lock_guard lock(state_);
    drop_copies_touching(block, bytes);
    arena_.deallocate(block, depth_ > 0);
  }

 private:
  static std::size_t page() { return GuardedArena::page(); }
  void open() {
    std::lock_guard lock(state_);
    if (depth_++ == 0) arena_.set_open(true);
  }
  void close() {
    std::lock_guard lock(state_);
    if (--depth_ == 0) arena_.set_open(false);
  }

  // The log is the rank thread's alone (its ops and copies).
  std::int64_t log_now() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                epoch_)
               .count() +
           kLogClockAhead;
  }
  void log(const char* work, std::size_t bytes, std::int64_t start) {
    const std::int64_t end = log_now();
    const auto correlation = ++correlation_;
    profiler::KernelRecord r;
    r.stream = static_cast<std::int32_t>(kLogStream);
    r.correlation = correlation;
    r.start_ns = start;
    r.end_ns = end;
    r.name = work;
    r.bytes = static_cast<std::int64_t>(bytes);
    if (std::strncmp(work, "mem", 3) != 0) r.grid = r.block = {1, 1, 1};
    log_.activities.push_back(std::move(r));
    const bool copy = std::strncmp(work, "memcpy", 6) == 0, set = std::strcmp(work, "memset") == 0;
    log_.api_calls.push_back({correlation, 1, start, start + 1,
                              copy  ? "cudaMemcpyAsync"
                              : set ? "cudaMemsetAsync"
                                    : "cudaLaunchKernel"});
  }

  struct QueuedCopy {
    const GuardedAllocator* owner = nullptr;
    std::uint64_t sequence = 0;
    mutable int polls = 0;
  };
  struct PendingCopy {
    std::uint64_t sequence = 0;
    void* dst = nullptr;
    const void* src = nullptr;
    std::size_t bytes = 0;
    const char* work = "";
  };
  Fence queue_copy(void* dst, const void* src, std::size_t bytes, const char* work) {
    std::lock_guard lock(state_);
    const std::uint64_t sequence = ++copies_queued_;
    pending_.push_back({sequence, dst, src, bytes, work});
    ++offload_copies_;
    return std::make_shared<const QueuedCopy>(QueuedCopy{this, sequence, 0});
  }
  const QueuedCopy* ours(const Fence& fence) const {
    // Only this allocator's queue makes fences here (record_fence gives none).
    const auto* c = static_cast<const QueuedCopy*>(fence.get());
    return c != nullptr && c->owner == this ? c : nullptr;
  }
  void run_copies_through(std::uint64_t sequence) {
    while (!pending_.empty() && pending_.front().sequence <= sequence) {
      const PendingCopy c = pending_.front();
      pending_.pop_front();
      Open open(*this, c.work, c.bytes);
      if (c.bytes > 0) std::memmove(c.dst, c.src, c.bytes);
    }
    copies_done_ = std::max(copies_done_, sequence);
  }
  void drop_copies_touching(const void* block, std::size_t bytes) noexcept {
    const auto lo = reinterpret_cast<std::uintptr_t>(block), hi = lo + bytes;
    const auto touches = [&](const void* p, std::size_t n) {
      const auto a = reinterpret_cast<std::uintptr_t>(p);
      return a < hi && lo < a + n;
    };
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (touches(it->dst, it->bytes) || touches(it->src, it->bytes)) {
        ++offload_hazards_;
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }

  std::recursive_mutex state_;
  std::deque<PendingCopy> pending_;
  std::uint64_t copies_queued_ = 0, copies_done_ = 0;
  std::size_t offload_copies_ = 0, offload_hazards_ = 0;
  int depth_ = 0;
  GuardedArena arena_;  // every live block
  std::size_t peer_copies_ = 0;
  bool logging_ = false;
  int log_depth_ = 0;
  std::chrono::steady_clock::time_point epoch_;
  std::uint32_t correlation_ = 0;
  profiler::GpuCapture log_;
};

// CpuBackend with the rank's guarded blocks open during each op.
class GuardedBackend final : public tensor::Backend {
 public:
  GuardedBackend(GuardedAllocator& storage, int threads) : storage_(storage), cpu_(threads) {}
  std::string_view name() const override { return "guarded-cpu"; }

 protected:
  using CV = tensor::ConstTensorView;
  using TV = tensor::TensorView;
  using Ids = std::span<const std::int32_t>;
  // Shard ops forward through the public API with a vocabulary no token id reaches.
  static constexpr std::int64_t kAnyVocab = std::numeric_limits<std::int32_t>::max() + 1LL;

  void do_zero(TV t) override {
    G g(storage_, &__func__[3]);
    cpu_.zero(t);
  }
  void do_scale(TV t, float s) override {
    G g(storage_, &__func__[3]);
    cpu_.scale(t, s);
  }
  void do_add(CV a, CV b, TV out) override {
    G g(storage_, &__func__[3]);
    cpu_.add(a, b, out);
  }
  void do_accumulate(TV d, CV s) override {
    G g(storage_, &__func__[3]);
    cpu_.accumulate(d, s);
  }
  void do_fill_columns(TV t, std::int64_t col_lo, float value) override {
    G g(storage_, &__func__[3]);
    cpu_.fill_columns(t, col_lo, value);
  }
  void do_linear_forward(CV x, CV w, CV b, TV y) override {
    G g(storage_, &__func__[3]);
    cpu_.linear_forward(x, w, b, y);
  }
  void do_linear_backward_input(CV dy, CV w, TV dx, tensor::GradientWrite write) override {
    G g(storage_, &__func__[3]);
    cpu_.linear_backward_input(dy, w, dx, write);
  }
  void do_linear_backward_weight(CV dy, CV x, TV dw, TV db) override {
    G g(storage_, &__func__[3]);
    cpu_.linear_backward_weight(dy, x, dw, db);
  }
  void do_embedding_forward(Ids t, CV wte, std::int64_t lo, CV wpe, TV out) override {
    G g(storage_, &__func__[3]);
    cpu_.embedding_shard_forward(t, wte, lo, kAnyVocab, wpe, out);
  }
  void do_embedding_backward_weight(Ids t, CV dout, std::int64_t lo, TV dwte, TV dwpe) override {
    G g(storage_, &__func__[3]);
    cpu_.embedding_shard_backward_weight(t, dout, lo, kAnyVocab, dwte, dwpe);
  }
  void do_layernorm_forward(CV x, CV w, CV b, TV y, TV mean, TV rstd) override {
    G g(storage_, &__func__[3]);
    cpu_.layernorm_forward(x, w, b, y, mean, rstd);
  }
  void do_layernorm_backward_input(CV dy, CV x, CV w, CV mean, CV rstd, CV residual,
                                   TV dx) override {
    G g(storage_, &__func__[3]);
    cpu_.layernorm_backward_input(dy, x, w, mean, rstd, dx, residual);
  }
  void do_layernorm_backward_weight(CV dy, CV x, CV mean, CV rstd, TV dw, TV db) override {
    G g(storage_, &__func__[3]);
    cpu_.layernorm_backward_weight(dy, x, mean, rstd, dw, db);
  }
  void do_gelu_forward(CV x, TV y) override {
    G g(storage_, &__func__[3]);
    cpu_.gelu_forward(x, y);
  }
  void do_gelu_backward_input(CV dy, CV x, TV dx, tensor::GradientWrite write) override {
    G g(storage_, &__func__[3]);
    cpu_.gelu_backward_input(dy, x, dx, write);
  }
  void do_attention_forward(CV qkv, std::int64_t nh, TV out, TV att) override {
    G g(storage_, &__func__[3]);
    cpu_.attention_forward(qkv, nh, out, att);
  }
  void do_attention_backward_input(CV dout, CV qkv, CV att, std::int64_t nh, TV dqkv) override {
    G g(storage_, &__func__[3]);
    cpu_.attention_backward_input(dout, qkv, att, nh, dqkv);
  }
  void do_attention_flash_forward(CV qkv, std::int64_t nh, TV out, TV lse) override {
    G g(storage_, &__func__[3]);
    cpu_.attention_flash_forward(qkv, nh, out, lse);
  }
  void do_attention_flash_backward_input(CV dout, CV qkv, CV out, CV lse, std::int64_t nh, TV dqkv,
                                         tensor::GradientWrite write) override {
    G g(storage_, &__func__[3]);
    cpu_.attention_flash_backward_input(dout, qkv, out, lse, nh, dqkv, write);
  }
  void do_attention_flash_forward_rows(CV qkv, std::int64_t q_begin, std::int64_t nh, TV out,
                                       TV lse) override {
    G g(storage_, &__func__[3]);
    cpu_.attention_flash_forward_rows(qkv, q_begin, nh, out, lse);
  }
  void do_attention_flash_backward_input_rows(CV dout, CV qkv, CV out, CV lse, std::int64_t q_begin,
                                              std::int64_t nh, TV dqkv) override {
    G g(storage_, &__func__[3]);
    cpu_.attention_flash_backward_input_rows(dout, qkv, out, lse, q_begin, nh, dqkv);
  }
  float do_cross_entropy_forward(CV logits, Ids targets, TV losses) override {
    G g(storage_, &__func__[3]);
    return cpu_.cross_entropy_forward(logits, targets, losses);
  }
  void do_cross_entropy_backward(CV logits, Ids targets, float scale, TV dlogits) override {
    G g(storage_, &__func__[3]);
    cpu_.cross_entropy_backward(logits, targets, scale, dlogits);
  }
  void do_vocab_ce_local_stats(CV l, Ids t, std::int64_t lo, TV mx, TV sm, TV tl) override {
    G g(storage_, &__func__[3]);
    cpu_.vocab_ce_local_stats(l, t, lo, mx, sm, tl);
  }
  void do_vocab_ce_rescale_sum(CV lm, CV gm, TV ls) override {
    G g(storage_, &__func__[3]);
    cpu_.vocab_ce_rescale_sum(lm, gm, ls);
  }
  float do_vocab_ce_loss(CV gm, CV gs, CV tl, TV losses) override {
    G g(storage_, &__func__[3]);
    return cpu_.vocab_ce_loss(gm, gs, tl, losses);
  }
  void do_vocab_ce_numerators(CV l, CV mx, TV p) override {
    G g(storage_, &__func__[3]);
    cpu_.vocab_ce_numerators(l, mx, p);
  }
  void do_vocab_ce_input_grad(CV sm, CV gm, CV gs, CV w, CV wt, float scale, TV dx) override {
    G g(storage_, &__func__[3]);
    cpu_.vocab_ce_input_grad(sm, gm, gs, w, wt, scale, dx);
  }
  void do_vocab_ce_backward(CV l, Ids t, std::int64_t lo, CV gm, CV gs, float scale, TV dl,
                            tensor::GradientWrite write) override {
    G g(storage_, &__func__[3]);
    cpu_.vocab_ce_backward(l, t, lo, gm, gs, scale, dl, write);
  }
  void do_moe_router_forward(CV logits, std::int64_t k, std::int64_t cap, TV probs,
                             tensor::MoeRouting& r) override {
    G g(storage_, &__func__[3]);
    cpu_.moe_router_forward(logits, k, cap, probs, r);
  }
  void do_moe_router_backward(CV probs, CV dprobs, TV dlogits) override {
    G g(storage_, &__func__[3]);
    cpu_.moe_router_backward(probs, dprobs, dlogits);
  }
  float do_moe_aux_loss(CV probs, const tensor::MoeRouting& r) override {
    G g(storage_, &__func__[3]);
    return cpu_.moe_aux_loss(probs, r);
  }
  void do_moe_aux_loss_backward(const tensor::MoeRouting& r, float s, TV dprobs) override {
    G g(storage_, &__func__[3]);
    cpu_.moe_aux_loss_backward(r, s, dprobs);
  }
  void do_moe_dispatch(CV x, const tensor::MoeRouting& r, TV in) override {
    G g(storage_, &__func__[3]);
    cpu_.moe_dispatch(x, r, in);
  }
  void do_moe_dispatch_backward(CV din, const tensor::MoeRouting& r, TV dx) override {
    G g(storage_, &__func__[3]);
    cpu_.moe_dispatch_backward(din, r, dx);
  }
  void do_moe_combine(CV out, CV probs, const tensor::MoeRouting& r, TV y) override {
    G g(storage_, &__func__[3]);
    cpu_.moe_combine(out, probs, r, y);
  }
  void do_moe_combine_backward(CV dy, CV out, CV probs, const tensor::MoeRouting& r, TV dout,
                               TV dprobs) override {
    G g(storage_, &__func__[3]);
    cpu_.moe_combine_backward(dy, out, probs, r, dout, dprobs);
  }
  void do_adamw_step(TV p, CV gr, TV m, TV v, const tensor::AdamWConfig& c,
                     std::int64_t step) override {
    G g(storage_, &__func__[3]);
    cpu_.adamw_step(p, gr, m, v, c, step);
  }
  double do_grad_sum_squares(CV gr) override {
    G g(storage_, &__func__[3]);
    return cpu_.grad_sum_squares(gr);
  }
  void do_adamw_step_segments(TV p, CV gr, TV m, TV v, std::span<const tensor::AdamWSegment> segs,
                              const tensor::AdamWConfig& c, std::int64_t step,
                              float grad_scale) override {
    G g(storage_, &__func__[3]);
    cpu_.adamw_step_segments(p, gr, m, v, segs, c, step, grad_scale);
  }
  double do_grad_sum_squares_segments(CV gr, std::span<const tensor::FlatSegment> segs) override {
    G g(storage_, &__func__[3]);
    return cpu_.grad_sum_squares_segments(gr, segs);
  }

 private:
  using G = GuardedAllocator::Open;
  GuardedAllocator& storage_;
  tensor::CpuBackend cpu_;
};

class GuardedRankDevice final : public runtime::RankDevice {
 public:
  // `peers`: the run's exchange for device-to-device transfers (as single-GPU mode has one).
  // `takes_late`: each take hands over what the device logged that many takes earlier, as a
  // record comes a take late when another rank's kernels still ran at the flush (0: its own).
  GuardedRankDevice(comm::Communicator& comm, int threads, bool log_activity = false,
                    runtime::PeerExchange* peers = nullptr, std::size_t takes_late = 0)
      : backend_(storage_, threads),
        comm_(comm, storage_),
        log_activity_(log_activity),
        takes_late_(takes_late) {
    if (peers != nullptr) peers_.emplace(comm, comm_, storage_, *peers);
  }
  bool start_gpu_capture(std::chrono::steady_clock::time_point epoch) override {
    if (log_activity_) storage_.start_log(epoch);
    return log_activity_;
  }
  // Each take's serving flush (GpuActivity::serving_flush_ns) costs `ns` instead of its own
  // flush's time: what a take costs as the trainer weighs it against its steps.
  void set_serving_flush_ns(std::int64_t ns) { serving_flush_ns_ = ns; }
  // One flush a take, the rank's first forced (as a profiler's first flush may be), take k's
  // flush 1000 * k ns and routing k ns, and k launch calls left waiting: what the run's capture
  // counts must add up to.
  GpuActivity take_gpu_activity() override {
    const std::size_t k = ++takes_;
    const auto ns = static_cast<std::int64_t>(k);
    held_.push_back(storage_.take_log());
    profiler::GpuCapture handed;
    if (held_.size() > takes_late_) {
      handed = std::move(held_.front());
      held_.pop_front();
    }
    GpuActivity a;
    a.capture = std::move(handed);
    a.clock_offset_ns = -GuardedAllocator::kLogClockAhead;
    a.flushes = 1;
    a.forced_flushes = k == 1 ? 1u : 0u;
    a.flush_ns = 1000 * ns;
    a.route_ns = ns;
    a.serving_flush_ns = serving_flush_ns_ ? *serving_flush_ns_ : a.flush_ns;
    a.waiting_launch_calls = k;
    return a;
  }
  tensor::Backend& backend() override { return backend_; }
  tensor::DeviceAllocator* storage() override { return &storage_; }
  comm::Communicator& communicator() override {
    return peers_ ? static_cast<comm::Communicator&>(*peers_) : comm_;
  }

  // Overlapped pairs as a GPU rank with a second stream is asked to run them (the CUDA rank
  // device's begin / second / end), for checking the runtime's side without a GPU: the calls come
  // in that order, one pair at a time, and from the second op to the pair's end the rank's buffer
  // cache holds what is freed (another stream may still use it). The work itself stays
  // synchronous, so the results are the one-stream run's. Any other order throws (the run fails).
  void accept_pairs(bool on) { pairs_ = on; }
  bool overlaps_pairs() const override { return pairs_; }
  void begin_pair() override { advance(PairState::idle, PairState::first, "begin_pair"); }
  void second_of_pair() override {
    advance(PairState::first, PairState::second, "second_of_pair");
    expect_holding("second_of_pair");
  }
  void end_pair() override {
    expect_holding("end_pair");
    advance(PairState::second, PairState::idle, "end_pair");
  }

  const GuardedAllocator& allocator() const { return storage_; }
  const runtime::StagingCommunicator& staging() const { return comm_; }

 private:
  enum class PairState { idle, first, second };
  void advance(PairState from, PairState to, const char* call) {
    if (pair_state_ != from)
      throw std::logic_error(std::string("guarded device: ") + call + " out of order");
    pair_state_ = to;
  }
  static void expect_holding(const char* call) {
    const model::BufferCache* cache = model::BufferCache::current();
    if (cache == nullptr || !cache->holding())
      throw std::logic_error(std::string("guarded device: ") + call +
                             " while the rank's buffer cache reuses freed blocks");
  }

  bool pairs_ = false;
  PairState pair_state_ = PairState::idle;
  GuardedAllocator storage_;
  GuardedBackend backend_;
  runtime::StagingCommunicator comm_;
  std::optional<runtime::PeerCopyCommunicator> peers_;
  bool log_activity_;
  std::size_t takes_late_;
  std::optional<std::int64_t> serving_flush_ns_;
  std::deque<profiler::GpuCapture> held_;  // logged, not yet handed over
  std::size_t takes_ = 0;
};

// Guarded rank devices that hand each rank's allocator to `report` when the rank is done with it
// (its tensors freed, its peaks final), for tests of what a rank's storage held. `report` runs
// on the rank's thread.
using AllocatorReport = std::function<void(int rank, const tensor::DeviceAllocator& allocator)>;
inline runtime::RankDeviceFactory reporting_rank_devices(AllocatorReport report) {
  class Reporting final : public runtime::RankDevice {
   public:
    Reporting(comm::Communicator& comm, int threads, AllocatorReport report)
        : device_(comm, threads), report_(std::move(report)), rank_(comm.rank()) {}
    ~Reporting() override { report_(rank_, device_.allocator()); }
    tensor::Backend& backend() override { return device_.backend(); }
    tensor::DeviceAllocator* storage() override { return device_.storage(); }
    comm::Communicator& communicator() override { return device_.communicator(); }

   private:
    GuardedRankDevice device_;
    AllocatorReport report_;
    int rank_;
  };
  return [report = std::move(report)](comm::Communicator& comm,
                                      int threads) -> std::unique_ptr<runtime::RankDevice> {
    return std::make_unique<Reporting>(comm, threads, report);
  };
}

}  // namespace pipetune::testing
