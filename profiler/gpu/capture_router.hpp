// Splits one process's GPU capture among the ranks that share the process. CUPTI collects
// process-wide, but in single-GPU mode every rank of a run is a thread of one process with a
// stream of its own; each rank's Trace must get its own device work. Device records (kernels,
// copies, memsets) go to the rank whose stream they ran on; the API call that launched a record
// goes with it (same correlation id). A process with one rank gives it everything, whatever the
// stream (NCCL launches on streams of its own).
//
// Records arrive out of step: a launch call is recorded when it returns, its kernel when the
// kernel completes, and one rank's take may come while another rank's kernels still run. So
// launch calls wait for their record across takes. Only calls that create device work are kept
// (launches, copies, memsets: is_launch_call); one whose record never comes (CUPTI dropped it) is
// evicted and counted at the first add after it is older than max_call_age_ns (one that arrived
// after a younger call, with that call). Pure host logic: tested without a GPU.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "profiler/gpu/gpu_capture.hpp"

namespace pipetune::profiler {

// Whether a CUDA runtime or driver call creates device work that CUPTI records as a kernel, copy
// or memset: cudaLaunchKernel, cuLaunchKernelEx, cudaGraphLaunch, cudaMemcpyAsync, cuMemsetD8...
bool is_launch_call(std::string_view api_name);
// Of those, the calls that launch kernels (cudaLaunchKernel, cuLaunchKernelEx, cudaGraphLaunch...):
// each has a kernel record for sure, where a host function (cudaLaunchHostFunc) has none.
bool is_kernel_launch_call(std::string_view api_name);

struct RouterCounts {
  std::size_t routed = 0;          // device records handed to a rank
  std::size_t unknown_stream = 0;  // device records on a stream of no rank (dropped, with calls)
  std::size_t evicted_calls = 0;   // launch calls whose record never came
  std::size_t other_calls = 0;     // API calls that launch nothing (dropped on arrival)
};

class CaptureRouter {
 public:
  explicit CaptureRouter(std::int64_t max_call_age_ns = std::int64_t{120} * 1'000'000'000)
      : max_call_age_ns_(max_call_age_ns) {}

  // The rank whose work runs on `stream` (CUPTI's stream id). A stream has one rank; assigning
  // it again to another rank throws std::invalid_argument.
  void assign_stream(std::uint32_t stream, std::int32_t rank);
  // Every record to `rank` (a process of one rank).
  void set_sole_rank(std::int32_t rank) { sole_rank_ = rank; }

  // Routes a capture's records (what a collector's take() returned).
  void add(GpuCapture capture);
  // What has been routed to `rank` since its last take: its device records and the launch calls
  // of those that have arrived (a call comes no later than its record when both were flushed
  // together; a record without one is counted by add_gpu_capture as without launch).
  GpuCapture take(std::int32_t rank);

  // Whether `rank`'s pending records hold a record of the newest kernel launch `thread` made
  // (CUPTI's thread id; is_kernel_launch_call, so a call that never has a record, such as a host
  // function, cannot fail the check every step). A check that a flush of completed buffers only
  // brought a rank's step: CUPTI keeps each thread's API and device records in buffers of that
  // thread, filled in launch order, so once the record of the thread's latest launch is here the
  // rest came with it. False when no kernel launch of `thread` arrived yet, or its record has not
  // come or was taken already (the flush brought nothing new of the thread): the caller then
  // forces a flush.
  bool holds_newest_launch(std::int32_t rank, std::uint32_t thread) const;

  const RouterCounts& counts() const { return counts_; }
  std::size_t waiting_calls() const { return calls_.size(); }

 private:
  std::int32_t rank_of_stream(std::int32_t stream) const;
  void evict_aged_calls();

  std::int64_t max_call_age_ns_;
  std::int32_t sole_rank_ = -1;
  std::unordered_map<std::uint32_t, std::int32_t> stream_rank_;
  std::map<std::int32_t, GpuCapture> pending_;  // by rank
  // Launch calls waiting for their device record, by correlation id.
  std::unordered_map<std::uint32_t, ApiCallRecord> calls_;
  std::int64_t newest_call_ns_ = 0;
  struct CallAt {  // a launch call by its start and correlation id
    std::int64_t start_ns = 0;
    std::uint32_t correlation = 0;
  };
  // The launch calls in the order they arrived (captures come in time order, each call once),
  // taken ones included until they reach the front: what evict_aged_calls walks instead of
  // calls_.
  std::deque<CallAt> by_arrival_;
  std::unordered_map<std::uint32_t, CallAt> newest_of_thread_;  // kernel launches, by thread
  RouterCounts counts_;
};

}  // namespace pipetune::profiler
