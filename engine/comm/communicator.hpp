// The communicator a rank uses to talk to the others. The threads implementation
// (thread_cluster.hpp) runs every rank as a thread of one process; the NCCL implementation will
// run one process per GPU behind the same interface.
//
// Semantics every implementation keeps:
// - Every call completes before it returns (blocking); buffers may be reused right after.
// - send() is buffered: it may return before the matching recv() is posted. Messages between one
//   (source, destination, tag) arrive in the order sent; recv() takes the oldest match.
// - Collectives run over a ProcessGroup; every member calls the same collective with the same
//   sizes, reduce op and root, in the same order per group. Groups with the same members but
//   different names are separate streams of collectives.
// - Reductions combine contributions in group-rank order, ((x0 + x1) + x2) + ..., whatever the
//   arrival order, so a result is bit-identical run to run and equals that sequential sum.
// - Input and output buffers may overlap (in-place) unless said otherwise.
// - A failure anywhere ends the run: a blocked or later call throws RankFailure (comm_errors.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string_view>

#include "engine/comm/process_group.hpp"

namespace pipetune::comm {

enum class ReduceOp { sum, max };

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;   // global rank of the caller
  virtual int world() const = 0;  // number of ranks in the run

  // Point to point between global ranks.
  virtual void send(int dst, int tag, std::span<const float> data) = 0;
  // `data.size()` must equal the size sent (else CommMismatch).
  virtual void recv(int src, int tag, std::span<float> data) = 0;

  // data (n) <- reduction over the group of every member's data (n). In place.
  virtual void all_reduce(const ProcessGroup& group, std::span<float> data,
                          ReduceOp op = ReduceOp::sum) = 0;
  // output (n) <- chunk `group rank` of the reduction of every member's input (n * group size).
  virtual void reduce_scatter(const ProcessGroup& group, std::span<const float> input,
                              std::span<float> output, ReduceOp op = ReduceOp::sum) = 0;
  // Uneven splits: input holds counts[j] floats for group rank j, consecutive in group-rank order
  // (counts the same on every member); output (counts[me]) <- the reduction of every member's
  // chunk `me`. In place when output is this member's chunk of input (NCCL's form).
  virtual void reduce_scatter_v(const ProcessGroup& group, std::span<const float> input,
                                std::span<const std::size_t> counts, std::span<float> output,
                                ReduceOp op = ReduceOp::sum) = 0;
  // output (n * group size) <- every member's input (n), in group-rank order.
  virtual void all_gather(const ProcessGroup& group, std::span<const float> input,
                          std::span<float> output) = 0;
  // Equal splits: input (group size * n): chunk j goes to group rank j; output chunk i came from
  // group rank i. Input and output must not overlap.
  virtual void all_to_all(const ProcessGroup& group, std::span<const float> input,
                          std::span<float> output) = 0;
  // Variable splits (MoE dispatch / combine): send_counts[j] floats of input (consecutive, in
  // group-rank order) go to group rank j; recv_counts[i] floats arrive from group rank i into
  // output in the same order. send_counts[j] on rank i must equal recv_counts[i] on rank j.
  // Input and output must not overlap.
  virtual void all_to_all_v(const ProcessGroup& group, std::span<const float> input,
                            std::span<const std::size_t> send_counts, std::span<float> output,
                            std::span<const std::size_t> recv_counts) = 0;
  // data <- root's data; `root` is a group rank (index into group.ranks).
  virtual void broadcast(const ProcessGroup& group, std::span<float> data, int root) = 0;
  virtual void barrier(const ProcessGroup& group) = 0;

  // Throws RankFailure when another rank has failed; for long compute between communication.
  virtual void throw_if_aborted() const = 0;

  // A second communicator of this rank, for collectives on another thread of the rank (the
  // engine's gradient reductions overlapping its compute): it may be called at the same time as
  // this one. Its collectives on a group are a stream of their own, apart from this
  // communicator's on the same group; every member of the group calls them through its channel.
  // It carries collectives only: send and recv on it throw std::logic_error. nullptr (the
  // default): the implementation has no channel (or has given its one), and the caller keeps
  // every call on its one thread. A wrapper (ForwardingCommunicator) has none.
  virtual std::unique_ptr<Communicator> open_channel() { return nullptr; }
  // Ends the run with `error`, met on this rank by a thread other than the one blocked in a
  // channel's collective, so that every wait of the run (that one's too) ends with RankFailure,
  // as when the rank's function ends with it. Only implementations with channels need it.
  virtual void fail_run(std::exception_ptr error) { (void)error; }

  // What the caller computes next: its training step and op ("F", "BW"... a name with static
  // storage, e.g. profiler::span_kind_name) and micro-batch, so that a wait on this rank that
  // times out says which step and op it is stuck in. Implementations whose waits describe their
  // peers keep it (threads); the others ignore it.
  virtual void note_progress(std::int64_t step, std::string_view op, int microbatch) {
    (void)step, (void)op, (void)microbatch;
  }
};

}  // namespace pipetune::comm
