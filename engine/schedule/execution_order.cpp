#include "engine/schedule/execution_order.hpp"

#include "engine/schedule/executor.hpp"
#include "engine/schedule/planned_time.hpp"

namespace pipetune::schedule {

namespace {

// Timeless hooks that note each op as the executor runs it.
class RecordingHooks {
 public:
  RecordingHooks(const Schedule& s, ExecutionOrder& out)
      : s_(s), out_(out), events_(s), joined_(static_cast<std::size_t>(s.stages), -1) {
    out_.steps.reserve(s.op_count());
    out_.events = events_.size();
  }

  double op(int rank, std::size_t, const Op& op, const Requirement& req, double) {
    ExecutionStep st;
    st.rank = rank;
    st.kind = op.kind;
    if (req.present) {
      st.input = index(req.event);
      if (req.transfer) st.flags |= ExecutionStep::kTransfer;
    }
    const Production prod = production_of(s_, rank, op);
    if (prod.present) {
      st.output = index(prod.event);
      if (prod.joins_barrier) st.flags |= ExecutionStep::kJoinsBarrier;
      if (prod.waits_for_barrier) joined_[static_cast<std::size_t>(rank)] = st.output;
    }
    if (op.overlaps_previous) out_.has_pairs = true;
    out_.steps.push_back(st);
    return 0.0;  // produced: any time >= 0
  }

  double barrier(const Event& e, double) {
    // The last arrival is among the ops just run (an overlapped pair publishes after both).
    const std::int32_t at = index(e);
    for (auto it = out_.steps.rbegin(); it != out_.steps.rend(); ++it)
      if (it->output == at && (it->flags & ExecutionStep::kJoinsBarrier) != 0) {
        it->flags |= ExecutionStep::kCompletesBarrier;
        break;
      }
    return 0.0;
  }

  void wait(int rank, double) {
    ExecutionStep st;
    st.rank = rank;
    st.input = joined_[static_cast<std::size_t>(rank)];
    st.flags = ExecutionStep::kWait;
    out_.steps.push_back(st);
  }

 private:
  std::int32_t index(const Event& e) const { return static_cast<std::int32_t>(events_.index(e)); }

  const Schedule& s_;
  ExecutionOrder& out_;
  EventTimes events_;                 // for its indices only
  std::vector<std::int32_t> joined_;  // per rank, the barrier it last joined and waits for
};

}  // namespace

ExecutionOrder record_execution_order(const Schedule& s) {
  ExecutionOrder out;
  RecordingHooks hooks(s, out);
  execute(s, hooks);
  out.fingerprint = op_fingerprint(s);
  return out;
}

}  // namespace pipetune::schedule
