// Layered gradient reduction on a rank (the schedule's R ops): each on the rank's reduction
// thread when it has one (reduction_worker.hpp), else in place on the rank's thread.
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/runtime/rank_runtime.hpp"
#include "engine/schedule/span_kinds.hpp"

namespace pipetune::runtime {

ReductionWorker::Job RankRuntime::group_reduction(int chunk) const {
  if (!reduce_group_)
    throw std::logic_error("rank " + std::to_string(rank_) + ": the schedule reduces chunk " +
                           std::to_string(chunk) +
                           "'s gradients (R), and no group reduction is set");
  return reduce_group_(chunk);
}

bool RankRuntime::submit_reduction(int chunk) {
  if (!reductions_) return false;
  // Held gradients (ZeRO-2 and 3): the earlier R's full buffers are freed before this one's are
  // handed out, so at most one held reduction is in flight (group_holds.hpp).
  if (holds_gradients_) wait_for_reductions();
  reductions_->submit(chunk, group_reduction(chunk));
  return true;
}

void RankRuntime::wait_for_reductions() {
  if (reductions_) {
    // The iteration ends when its reductions do; each is a span on the rank's comm lane, as long
    // as it took on its thread.
    const std::vector<ReductionWorker::Ran> ran = reductions_->wait();
    if (recorder_ != nullptr)
      for (const ReductionWorker::Ran& r : ran)
        recorder_->add_timed(schedule::span_kind_of(schedule::OpKind::R), profiler::Stream::Comm,
                             -1, r.chunk, 0, r.start_ns, r.end_ns);
  }
  release_reduced_units();
}

void RankRuntime::abandon_reductions(std::exception_ptr error) {
  // A reduction in flight may wait on peers this rank's error will stop: end the run with it.
  if (reductions_) reductions_->abandon(std::move(error));
}

}  // namespace pipetune::runtime
