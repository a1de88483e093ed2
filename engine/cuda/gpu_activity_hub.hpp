// The process's CUPTI capture as the ranks of one run share it. CUPTI collects process-wide (one
// CuptiCollector per process), while the trainer asks each rank for its own activity at the end
// of each of its steps (RankDevice::take_gpu_activity). The hub starts the collector when the
// first rank of a run joins (with the run's clock epoch), tells the router which CUPTI stream is
// whose, and on each take flushes CUPTI and routes what arrived (profiler::CaptureRouter): device
// records by stream, launch calls with their records.
//
// The step-end flush hands over completed buffers only, and forces a flush only when that did not
// bring the rank's step (FlushPolicy::completed_checked): the record of the newest kernel launch
// of the rank's thread is the check (CaptureRouter::holds_newest_launch; CUPTI 13 keeps each
// thread's records in buffers of its own, CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER). A forced
// flush cost 0.29 ms a step more on an H200's capture benchmark, and it hands over other ranks'
// kernels that still run, without their times; a completed-only flush leaves those for a later
// take.
//
// When the last rank leaves, the collector is destroyed, so nothing is captured between runs. A
// run that joins with another epoch while ranks of an earlier run are still members is a logic
// error.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "engine/cuda/cupti_collector.hpp"
#include "engine/runtime/trainer.hpp"
#include "profiler/gpu/capture_router.hpp"

namespace pipetune::cuda {

class GpuActivityHub {
 public:
  using Clock = std::chrono::steady_clock;

  // How a take flushes: always forced, or completed buffers first and forced only when the
  // rank's step did not all come (see above).
  enum class FlushPolicy { forced, completed_checked };

  // `one_rank_per_process`: the process's only rank gets every record, whatever its stream
  // (ranks as processes: NCCL launches on streams of its own); CUPTI is not asked for the id of
  // the rank's stream.
  explicit GpuActivityHub(bool one_rank_per_process = false,
                          FlushPolicy flush = FlushPolicy::completed_checked)
      : one_rank_per_process_(one_rank_per_process), flush_policy_(flush) {}

  // Rank `rank` launches its work on `stream` (and `second_stream`). Starts CUPTI for the run
  // on the first join. The caller's streams must be idle: what ran on them before the join (the
  // rank's set-up) is no step's, and CUPTI records it only when another rank joined first, as
  // the threads happen to run. So a later join flushes CUPTI's completed buffers before it
  // names the streams, and the router drops those records, as it drops any of a stream no rank
  // has named: a run's capture is the same whichever rank joins first.
  // False when CUPTI cannot start or name the stream (a profiler such as Nsight Systems holds
  // it, or the driver has none): the rank runs without capture, and the hub says why on stderr
  // once.
  // `second_stream`: another stream of the rank's (CudaBackend::second_stream), or null.
  bool join(std::int32_t rank, cudaStream_t stream, Clock::time_point epoch,
            cudaStream_t second_stream = nullptr);
  // Leaves; the last rank out stops CUPTI. Never throws.
  void leave(std::int32_t rank) noexcept;
  // Flushes CUPTI (unless another rank's flush began after this call, and so after the rank's
  // stream went idle) and returns what arrived for `rank` since its last take, with the flushes
  // this take made (GpuActivity::flushes, forced_flushes), the host time of those flushes and of
  // the routing, that of the latest flush made by any rank's take (serving_flush_ns: this one's
  // when it flushed), and the launch calls still waiting for their record. Called on the thread
  // that launched the rank's work, after synchronising the rank's stream (so its records are
  // complete).
  runtime::RankDevice::GpuActivity take(std::int32_t rank);

 private:
  mutable std::mutex mutex_;
  bool flushed_since(Clock::time_point t) const { return last_flush_ >= t; }

  std::optional<CuptiCollector> collector_;
  Clock::time_point epoch_{};
  Clock::time_point last_flush_{};    // when the latest flush of this collector began ({}: none)
  std::int64_t latest_flush_ns_ = 0;  // host time of the flushes of the latest take that flushed
  profiler::CaptureRouter router_;
  int members_ = 0;
  bool said_unavailable_ = false;
  bool one_rank_per_process_;
  FlushPolicy flush_policy_;
};

}  // namespace pipetune::cuda
