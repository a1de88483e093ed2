#include "engine/cuda/gpu_activity_hub.hpp"

#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

#include <unistd.h>  // gettid

namespace pipetune::cuda {

bool GpuActivityHub::join(std::int32_t rank, cudaStream_t stream, Clock::time_point epoch,
                          cudaStream_t second_stream) {
  std::lock_guard lock(mutex_);
  if (members_ > 0 && epoch != epoch_)
    throw std::logic_error("GpuActivityHub: rank " + std::to_string(rank) +
                           " joins with another run's clock while " + std::to_string(members_) +
                           " rank(s) of a run are still members");
  try {
    if (!collector_) {
      CuptiCollectorOptions options;
      options.api_calls_kept = ApiCallsKept::launches;  // the router would drop the others
      collector_.emplace(epoch, options);
      epoch_ = epoch;
      last_flush_ = {};
      latest_flush_ns_ = 0;
      router_ = profiler::CaptureRouter();
    } else if (!one_rank_per_process_) {
      // The rank's set-up records, if CUPTI caught any, go to no rank (see join's comment). The
      // rank's stream is idle, so they are complete: a flush of completed buffers brings them
      // without cutting short the records of another rank's running kernels.
      last_flush_ = Clock::now();
      collector_->flush(FlushKind::completed);
      router_.add(collector_->take());
    }
    if (one_rank_per_process_) {
      router_.set_sole_rank(rank);  // every record is the rank's: its stream's id is not needed
    } else {
      // CUPTI's id of the stream (unique within its context; one device here).
      for (cudaStream_t s : {stream, second_stream}) {
        if (s == nullptr) continue;
        std::uint32_t id = 0;
        PIPETUNE_CUPTI_CHECK(cupti().GetStreamIdEx(nullptr, s, 0, &id));
        router_.assign_stream(id, rank);
      }
    }
  } catch (const CudaError& e) {
    if (members_ == 0) collector_.reset();
    if (!std::exchange(said_unavailable_, true))
      std::fprintf(stderr, "pipetune: GPU activity capture is off (NVTX ranges only): %s\n",
                   e.what());
    return false;
  }
  ++members_;
  return true;
}

void GpuActivityHub::leave(std::int32_t /*rank*/) noexcept {
  std::lock_guard lock(mutex_);
  if (members_ == 0) return;
  if (--members_ > 0 || !collector_) return;
  if (const std::size_t incomplete = collector_->incomplete_records(); incomplete > 0)
    std::fprintf(stderr,
                 "pipetune: %zu GPU activity records came without their times (flushed while "
                 "another rank's work ran on the GPU) and were left out of the trace\n",
                 incomplete);
  collector_.reset();  // disables the activity kinds: nothing is captured between runs
}

runtime::RankDevice::GpuActivity GpuActivityHub::take(std::int32_t rank) {
  const Clock::time_point synchronised = Clock::now();  // the caller's stream is idle by now
  std::lock_guard lock(mutex_);
  if (!collector_) throw std::logic_error("GpuActivityHub::take before any rank joined");
  // A flush that began after this rank's stream went idle had every record of it to hand over:
  // ranks ending their steps together share one flush instead of one each. Whether a completed-
  // only flush (this rank's or another's) did hand them over is then checked.
  const bool checked =
      flush_policy_ == FlushPolicy::completed_checked && collector_->system_thread_ids();
  runtime::RankDevice::GpuActivity out;
  const auto since = [](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count();
  };
  const auto flush = [&](FlushKind kind) {
    last_flush_ = Clock::now();
    collector_->flush(kind);  // the buffers' records are read in here (CuptiCollector::consume)
    profiler::GpuCapture arrived = collector_->take();
    out.flush_ns += since(last_flush_);
    ++out.flushes;
    if (kind == FlushKind::forced) ++out.forced_flushes;
    const Clock::time_point routing = Clock::now();
    router_.add(std::move(arrived));
    out.route_ns += since(routing);
  };
  if (!flushed_since(synchronised)) flush(checked ? FlushKind::completed : FlushKind::forced);
  const auto has_step = [&] {
    const Clock::time_point checking = Clock::now();
    const bool held = router_.holds_newest_launch(rank, static_cast<std::uint32_t>(::gettid()));
    out.route_ns += since(checking);
    return held;
  };
  if (checked && !has_step()) flush(FlushKind::forced);
  if (out.flushes > 0) latest_flush_ns_ = out.flush_ns;
  out.serving_flush_ns = latest_flush_ns_;
  const Clock::time_point taking = Clock::now();
  out.capture = router_.take(rank);
  out.route_ns += since(taking);
  out.waiting_launch_calls = router_.waiting_calls();
  out.clock_offset_ns = collector_->clock_offset_ns();
  return out;
}

}  // namespace pipetune::cuda
