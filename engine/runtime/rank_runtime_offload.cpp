// RankRuntime's activation offload (activation_offload.hpp): when the copies start and when
// the rank waits for them, around each op of the rank's list.
#include "engine/runtime/rank_runtime.hpp"

#include "engine/model/buffers.hpp"
#include "engine/runtime/rank_runtime_state.hpp"

namespace pipetune::runtime {

using schedule::Op;
using schedule::OpKind;

namespace {

bool is_backward(OpKind k) {
  return k == OpKind::B || k == OpKind::BW;
}

}  // namespace

void RankRuntime::offload_before_op(std::size_t i) {
  const std::vector<Op>& ops = schedule_->ranks[static_cast<std::size_t>(pp_rank_)];
  const auto key = [&](const Op& op) {
    return static_cast<std::int64_t>(op.chunk) * schedule_->microbatches + op.microbatch;
  };
  offload_->release_done();
  // Prefetch only where copies run beside the computation; on host storage they are the
  // thread's own work, done right before the backward.
  if (model::device_storage() != nullptr && i + 1 < ops.size() && is_backward(ops[i + 1].kind))
    offload_->start_reload(key(ops[i + 1]));
  if (is_backward(ops[i].kind)) offload_->finish_reload(key(ops[i]));
}

void RankRuntime::offload_after_op(std::size_t i) {
  const std::vector<Op>& ops = schedule_->ranks[static_cast<std::size_t>(pp_rank_)];
  const Op& op = ops[i];
  if (op.kind != OpKind::F) return;
  if (i + 1 < ops.size() && is_backward(ops[i + 1].kind) && ops[i + 1].chunk == op.chunk &&
      ops[i + 1].microbatch == op.microbatch)
    return;
  ChunkState& s = chunk_state(op.chunk, op.microbatch);
  std::vector<model::Buffer*> buffers;
  s.for_each_buffer([&](model::Buffer& b) { buffers.push_back(&b); });
  offload_->offload(static_cast<std::int64_t>(op.chunk) * schedule_->microbatches + op.microbatch,
                    op.microbatch, op.chunk, buffers);
}

}  // namespace pipetune::runtime
