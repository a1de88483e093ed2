// Shared state of one run of a ThreadCluster: rendezvous slots per process group, a mailbox per
// rank for point-to-point messages, what each rank is doing (for error messages), and the first
// failure. Internal to the threads communicator; one instance per run, owned by the launcher.
//
// Locking: each GroupState and each Mailbox has its own mutex and condition variable. Abort takes
// the registry mutex, then each group / mailbox mutex in turn, to wake every waiter. A rank's
// RankActivity mutex and the failure mutex are innermost: they may be taken while holding a group
// or mailbox mutex (a watchdog records its failure before letting go of the group, so the first
// rank to time out names the ranks missing at that moment), never the other way round.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/comm/process_group.hpp"

namespace pipetune::comm {

struct ClusterOptions {
  // Longest time any communication wait may take before the watchdog fails the run. Generous by
  // default (a slow rank computing a big layer is not a hang); tests use ~100 ms.
  std::chrono::milliseconds watchdog_timeout{60'000};
};

namespace threads {

enum class OpKind : std::uint8_t {
  send,
  recv,
  all_reduce,
  reduce_scatter,
  reduce_scatter_v,
  all_gather,
  all_to_all,
  all_to_all_v,
  broadcast,
  barrier
};

struct GroupState;

// One call as a rank made it: enough to match the members' calls and to describe it in errors.
struct OpCall {
  OpKind kind = OpKind::barrier;
  const GroupState* group = nullptr;  // collectives only
  int peer = -1;                      // send / recv: the other global rank
  int tag = 0;
  ReduceOp reduce = ReduceOp::sum;
  std::size_t count = 0;      // floats in the caller's input (or data)
  std::size_t out_count = 0;  // floats in the caller's output, where it has one
  int root = -1;              // broadcast: group rank
  std::uint64_t seq = 0;      // position in the group's stream of collectives
};

// "all_reduce(sum, 4 floats) on dp group [0, 2]", "recv(from rank 1, tag 3, 8 floats)".
std::string describe(const OpCall& call);
// What members of one collective must agree on: kind, sizes, reduce op, root.
bool same_signature(const OpCall& a, const OpCall& b);

// What one member brings to a collective; pointers stay valid while it waits in the op.
struct Contribution {
  bool present = false;
  OpCall call;
  const float* input = nullptr;
  float* output = nullptr;  // all_reduce: where the member's result goes (its data)
  std::span<const std::size_t> send_counts;  // all_to_all_v; reduce_scatter_v's counts
  std::span<const std::size_t> recv_counts;
};

// One collective in flight on a group, from first arrival to last departure.
struct Slot {
  std::vector<Contribution> members;  // by group rank
  int arrived = 0;
  int computed = 0;  // members done reading the others' buffers
  int departed = 0;
};

struct GroupState {
  GroupState(ProcessGroup group_) : group(std::move(group_)), description(group.describe()) {}
  const ProcessGroup group;
  const std::string description;
  std::mutex mutex;
  std::condition_variable cv;
  std::map<std::uint64_t, Slot> slots;  // at most two alive at once
};

struct Message {
  int src = -1;
  int tag = 0;
  std::vector<float> data;
};

struct Mailbox {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<Message> messages;
};

// What a rank is doing, read by others when a wait on it times out.
struct RankActivity {
  std::mutex mutex;
  bool in_op = false;
  bool has_last = false;
  bool finished = false;
  OpCall current;
  OpCall last;
  // Communicator::note_progress: the step and op the rank computes (-1: not said).
  std::int64_t step = -1;
  std::string_view op;
  int microbatch = -1;
};

struct Failure {
  int rank = -1;
  std::string op;       // the op the failed rank was in ("" outside communication)
  std::string summary;  // "rank 3 failed in all_reduce(...) on dp group [1, 3]: boom"
  std::exception_ptr error;
};

class ClusterState {
 public:
  ClusterState(int world, ClusterOptions options);

  int world() const { return world_; }
  const ClusterOptions& options() const { return options_; }

  // The shared state of a group, registered on first use by any member.
  GroupState& group(const ProcessGroup& g);
  Mailbox& mailbox(int rank) { return mailboxes_[static_cast<std::size_t>(rank)]; }
  RankActivity& activity(int rank) { return activities_[static_cast<std::size_t>(rank)]; }
  // "in all_reduce(...) on tp group [0, 1]", "computing (last op: ...)", "finished its function".
  std::string describe_activity(int rank);
  // describe_activity, and when the rank is inside a collective, the activity of the members
  // of its group that have not joined that call: who a wait on it is really waiting for.
  std::string describe_waited_on(int rank);

  // Records the first failure and wakes every waiting rank. `where` reads "in <op>" or
  // "outside communication ...". Returns false when a failure was already recorded.
  bool fail(int rank, const std::string& op, const std::string& where, const std::string& what,
            std::exception_ptr error);
  // fail() in two steps, for callers that hold a group or mailbox mutex while they record:
  // record() takes only the failure mutex; wake_everyone() must follow once that mutex is free.
  bool record(int rank, const std::string& op, const std::string& where, const std::string& what,
              std::exception_ptr error);
  void wake_everyone();
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  Failure failure() const;

 private:
  const int world_;
  const ClusterOptions options_;
  std::mutex registry_mutex_;
  std::map<ProcessGroup, std::unique_ptr<GroupState>, ProcessGroupLess> groups_;
  std::vector<Mailbox> mailboxes_;
  std::vector<RankActivity> activities_;
  mutable std::mutex failure_mutex_;
  Failure failure_;
  std::atomic<bool> aborted_{false};
};

}  // namespace threads
}  // namespace pipetune::comm
