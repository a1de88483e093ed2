// The threads implementation of Communicator: one object per rank thread of a ThreadCluster run,
// all sharing one ClusterState.
//
// A collective is a rendezvous in a Slot of its group, keyed by the call's position in that
// group's stream (every member counts its own calls):
//   1. arrive: publish buffer pointers and the call's signature (a different signature from a
//      member already there is a CommMismatch); wait until every member has arrived.
//   2. read: each member reads the others' buffers directly (no copy to a shared staging area);
//      an all-reduce splits the vector so each member reduces one chunk, in group-rank order, and
//      writes it into every member's buffer (no member touches another's chunk).
//   3. fence: wait until every member is done reading, so no buffer is written or freed early.
//   4. write: copy results that could not be written in place; the last member out frees the slot.
// Only step 1 can be interrupted (abort, watchdog); a member leaving it withdraws its arrival
// under the lock, so once all have arrived every member completes steps 2-4, which cannot block
// on anything but memory copies. That is what keeps an abort from freeing a buffer under a reader.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/comm/thread_cluster_state.hpp"

namespace pipetune::comm {

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(threads::ClusterState& state, int rank)
      : state_(state), rank_(rank), activity_(&state.activity(rank)) {}

  int rank() const override { return rank_; }
  int world() const override { return state_.world(); }

  void send(int dst, int tag, std::span<const float> data) override;
  void recv(int src, int tag, std::span<float> data) override;
  void all_reduce(const ProcessGroup& group, std::span<float> data,
                  ReduceOp op = ReduceOp::sum) override;
  void reduce_scatter(const ProcessGroup& group, std::span<const float> input,
                      std::span<float> output, ReduceOp op = ReduceOp::sum) override;
  void reduce_scatter_v(const ProcessGroup& group, std::span<const float> input,
                        std::span<const std::size_t> counts, std::span<float> output,
                        ReduceOp op = ReduceOp::sum) override;
  void all_gather(const ProcessGroup& group, std::span<const float> input,
                  std::span<float> output) override;
  void all_to_all(const ProcessGroup& group, std::span<const float> input,
                  std::span<float> output) override;
  void all_to_all_v(const ProcessGroup& group, std::span<const float> input,
                    std::span<const std::size_t> send_counts, std::span<float> output,
                    std::span<const std::size_t> recv_counts) override;
  void broadcast(const ProcessGroup& group, std::span<float> data, int root) override;
  void barrier(const ProcessGroup& group) override;
  void throw_if_aborted() const override;
  void note_progress(std::int64_t step, std::string_view op, int microbatch) override;
  // A ThreadCommunicator of the same rank with group handles and staging of its own. Its calls
  // are not the rank's activity in failure messages (that stays the main thread's).
  std::unique_ptr<Communicator> open_channel() override;
  void fail_run(std::exception_ptr error) override;

 private:
  struct GroupHandle {
    threads::GroupState* state = nullptr;
    int index = -1;  // the caller's group rank
    std::uint64_t next_seq = 0;
  };
  enum class WaitEnd { ready, aborted, timed_out };

  GroupHandle& handle(const ProcessGroup& group);
  threads::OpCall collective_call(GroupHandle& h, threads::OpKind kind) const;

  // Step 1: publishes `mine` in the call's slot and waits, under `lock` (the group's), until every
  // member has arrived. Withdraws and throws on a mismatch, an abort or the watchdog.
  threads::Slot& arrive(GroupHandle& h, const threads::OpCall& call,
                        const threads::Contribution& mine, std::unique_lock<std::mutex>& lock);

  // Runs steps 1-4 (see the header comment). `read(slot)` runs after every member has arrived;
  // `write(slot)` after every member is done reading.
  template <class Read, class Write>
  void rendezvous(GroupHandle& h, const threads::OpCall& call, const threads::Contribution& mine,
                  Read read, Write write);

  // The reduce-scatters' rendezvous: output <- the reduction of every member's input at
  // [offset, offset + output size), this member's chunk.
  void reduce_own_chunk(GroupHandle& h, const threads::OpCall& call,
                        const threads::Contribution& mine, std::size_t offset,
                        std::span<const float> input, std::span<float> output, ReduceOp op);

  template <class Ready>
  WaitEnd wait(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, Ready ready);

  // Fails the run with an Error (this rank is the failed one) and throws it. `held` is the group
  // or mailbox lock, released after the failure is recorded and before everyone is woken.
  template <class Error>
  [[noreturn]] void fail_and_throw(const threads::OpCall& call, const std::string& message);
  template <class Error>
  [[noreturn]] void fail_and_throw(const threads::OpCall& call, const std::string& message,
                                   std::unique_lock<std::mutex>& held);
  [[noreturn]] void throw_woken(const threads::OpCall& call) const;
  std::string missing_members(const threads::Slot& slot, const threads::GroupState& g);

  struct ChannelTag {};
  ThreadCommunicator(threads::ClusterState& state, int rank, ChannelTag);
  void refuse_on_channel(const char* op) const;

  threads::ClusterState& state_;
  const int rank_;
  std::unique_ptr<threads::RankActivity> own_activity_;  // a channel's
  threads::RankActivity* activity_;  // the rank's (state_.activity), or a channel's own
  std::map<ProcessGroup, GroupHandle, ProcessGroupLess> groups_;
  std::vector<float> staging_;  // results that cannot be written until the fence
};

}  // namespace pipetune::comm
