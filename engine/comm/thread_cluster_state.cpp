#include "engine/comm/thread_cluster_state.hpp"

#include <string>

namespace pipetune::comm::threads {

namespace {

const char* kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::send:
      return "send";
    case OpKind::recv:
      return "recv";
    case OpKind::all_reduce:
      return "all_reduce";
    case OpKind::reduce_scatter:
      return "reduce_scatter";
    case OpKind::reduce_scatter_v:
      return "reduce_scatter_v";
    case OpKind::all_gather:
      return "all_gather";
    case OpKind::all_to_all:
      return "all_to_all";
    case OpKind::all_to_all_v:
      return "all_to_all_v";
    case OpKind::broadcast:
      return "broadcast";
    case OpKind::barrier:
      return "barrier";
  }
  return "?";
}

std::string floats(std::size_t n) {
  return std::to_string(n) + (n == 1 ? " float" : " floats");
}

std::string describe_signature(const OpCall& c) {
  const std::string reduce = c.reduce == ReduceOp::sum ? "sum" : "max";
  std::string args;
  switch (c.kind) {
    case OpKind::send:
      return std::string("send(to rank ") + std::to_string(c.peer) + ", tag " +
             std::to_string(c.tag) + ", " + floats(c.count) + ")";
    case OpKind::recv:
      return std::string("recv(from rank ") + std::to_string(c.peer) + ", tag " +
             std::to_string(c.tag) + ", " + floats(c.count) + ")";
    case OpKind::all_reduce:
      args = reduce + ", " + floats(c.count);
      break;
    case OpKind::reduce_scatter:
    case OpKind::reduce_scatter_v:
      args = reduce + ", " + floats(c.count) + " -> " + floats(c.out_count);
      break;
    case OpKind::all_gather:
    case OpKind::all_to_all:
    case OpKind::all_to_all_v:
      args = floats(c.count) + " -> " + floats(c.out_count);
      break;
    case OpKind::broadcast:
      args = "root " + std::to_string(c.root) + ", " + floats(c.count);
      break;
    case OpKind::barrier:
      break;
  }
  return std::string(kind_name(c.kind)) + "(" + args + ")";
}

}  // namespace

std::string describe(const OpCall& call) {
  std::string s = describe_signature(call);
  if (call.group != nullptr)
    s += " on " + call.group->description + " (call #" + std::to_string(call.seq) + ")";
  return s;
}

bool same_signature(const OpCall& a, const OpCall& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case OpKind::all_reduce:
      return a.reduce == b.reduce && a.count == b.count;
    case OpKind::reduce_scatter:
      return a.reduce == b.reduce && a.count == b.count && a.out_count == b.out_count;
    case OpKind::all_gather:
    case OpKind::all_to_all:
      return a.count == b.count && a.out_count == b.out_count;
    // The counts themselves are compared once everyone has arrived.
    case OpKind::reduce_scatter_v:
      return a.reduce == b.reduce && a.count == b.count;
    case OpKind::broadcast:
      return a.root == b.root && a.count == b.count;
    // Variable splits are checked pairwise once everyone has arrived.
    case OpKind::all_to_all_v:
    case OpKind::barrier:
    case OpKind::send:
    case OpKind::recv:
      return true;
  }
  return false;
}

ClusterState::ClusterState(int world, ClusterOptions options)
    : world_(world),
      options_(options),
      mailboxes_(static_cast<std::size_t>(world)),
      activities_(static_cast<std::size_t>(world)) {}

GroupState& ClusterState::group(const ProcessGroup& g) {
  std::lock_guard lock(registry_mutex_);
  auto it = groups_.find(g);
  if (it == groups_.end()) it = groups_.emplace(g, std::make_unique<GroupState>(g)).first;
  return *it->second;
}

std::string ClusterState::describe_activity(int rank) {
  RankActivity& a = activity(rank);
  std::lock_guard lock(a.mutex);
  if (a.finished) return "finished its function";
  const std::string at = a.step >= 0
                             ? " at step " + std::to_string(a.step) + ", " + std::string(a.op) +
                                   " of micro-batch " + std::to_string(a.microbatch)
                             : "";
  if (a.in_op) return "in " + describe(a.current) + at;
  if (a.has_last) return "computing" + at + " (last op: " + describe(a.last) + ")";
  return "computing" + at + " (no communication yet)";
}

std::string ClusterState::describe_waited_on(int rank) {
  std::string s = describe_activity(rank);
  const GroupState* group = nullptr;
  std::uint64_t seq = 0;
  {
    RankActivity& a = activity(rank);
    std::lock_guard lock(a.mutex);
    if (a.in_op && a.current.group != nullptr) {
      group = a.current.group;
      seq = a.current.seq;
    }
  }
  if (group == nullptr) return s;
  // One activity lock at a time (never two): the group's members are fixed at its creation.
  for (int r : group->group.ranks) {
    if (r == rank) continue;
    bool joined = false;
    {
      RankActivity& b = activity(r);
      std::lock_guard lock(b.mutex);
      joined = b.in_op && b.current.group == group && b.current.seq == seq;
    }
    if (!joined) s += "; rank " + std::to_string(r) + ": " + describe_activity(r);
  }
  return s;
}

bool ClusterState::fail(int rank, const std::string& op, const std::string& where,
                        const std::string& what, std::exception_ptr error) {
  if (!record(rank, op, where, what, std::move(error))) return false;
  wake_everyone();
  return true;
}

bool ClusterState::record(int rank, const std::string& op, const std::string& where,
                          const std::string& what, std::exception_ptr error) {
  std::lock_guard lock(failure_mutex_);
  if (aborted_.load(std::memory_order_relaxed)) return false;
  failure_.rank = rank;
  failure_.op = op;
  failure_.summary = "rank " + std::to_string(rank) + " failed " + where + ": " + what;
  failure_.error = std::move(error);
  aborted_.store(true, std::memory_order_release);
  return true;
}

Failure ClusterState::failure() const {
  std::lock_guard lock(failure_mutex_);
  return failure_;
}

void ClusterState::wake_everyone() {
  // Taking each mutex before notifying closes the window between a waiter's check of aborted()
  // and its sleep: it either sees the flag or is asleep and gets the notification.
  {
    std::lock_guard registry(registry_mutex_);
    for (auto& [key, group] : groups_) {
      std::lock_guard lock(group->mutex);
      group->cv.notify_all();
    }
  }
  for (Mailbox& box : mailboxes_) {
    std::lock_guard lock(box.mutex);
    box.cv.notify_all();
  }
}

}  // namespace pipetune::comm::threads
