// The MPI implementation of Communicator: one rank per process, global rank = MPI world rank.
// It keeps every promise of communicator.hpp, so the engine runs unchanged over it:
//  - send() is buffered: the data is copied and sent with MPI_Isend, so two ranks sending to
//    each other before receiving (a 1F1B pipeline's activations and gradients) never deadlock;
//    completed sends are reaped on later calls and all are awaited at destruction.
//  - one MPI communicator per process group, made at construction by MPI_Comm_split over the
//    world in one fixed order (collective on every process, so no process can wait on a split
//    another makes later); group rank = position in ProcessGroup::ranks.
//  - reductions fold contributions in group-rank order, exactly as the thread communicator does
//    (reduction.hpp), not with MPI_Allreduce whose order is the library's: each member gathers
//    its chunk of every contribution (all-to-all), folds it in order and all-gathers the chunks.
//    Threads and processes give bit-identical results, at ring-like traffic (2 (P-1)/P of the
//    data per member).
// Point-to-point messages go over a duplicate of MPI_COMM_WORLD, collectives over the groups'
// communicators, so no tag or collective of one can match the other.
#pragma once

#include <mpi.h>

#include <atomic>
#include <exception>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/mpi/mpi_failure_notice.hpp"

namespace pipetune::mpi {

class MpiCommunicator final : public comm::Communicator {
 public:
  // Collective over MPI_COMM_WORLD: every process passes the same groups in the same order
  // (e.g. every group of a Topology). The world group is always available. A wait longer than
  // timeout_seconds (> 0) throws comm::WatchdogTimeout naming the op: a stuck peer must not
  // hang the run (the caller then aborts the job).
  // With with_channel, every group also gets a second communicator, split after the first
  // ones, for the one channel open_channel() gives (a collective on every process too).
  explicit MpiCommunicator(const std::vector<comm::ProcessGroup>& groups,
                           double timeout_seconds = 0.0, bool with_channel = false);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world() const override { return world_; }

  // Every wait that goes on past its first polls also asks `notice` whether another process
  // failed, and throws its cause if one did (mpi_failure_notice.hpp). Not owned; may be null.
  void watch_failures(MpiFailureNotice* notice) { notice_ = notice; }

  void send(int dst, int tag, std::span<const float> data) override;
  void recv(int src, int tag, std::span<float> data) override;
  void all_reduce(const comm::ProcessGroup& group, std::span<float> data,
                  comm::ReduceOp op = comm::ReduceOp::sum) override;
  void reduce_scatter(const comm::ProcessGroup& group, std::span<const float> input,
                      std::span<float> output, comm::ReduceOp op = comm::ReduceOp::sum) override;
  void reduce_scatter_v(const comm::ProcessGroup& group, std::span<const float> input,
                        std::span<const std::size_t> counts, std::span<float> output,
                        comm::ReduceOp op = comm::ReduceOp::sum) override;
  void all_gather(const comm::ProcessGroup& group, std::span<const float> input,
                  std::span<float> output) override;
  void all_to_all(const comm::ProcessGroup& group, std::span<const float> input,
                  std::span<float> output) override;
  void all_to_all_v(const comm::ProcessGroup& group, std::span<const float> input,
                    std::span<const std::size_t> send_counts, std::span<float> output,
                    std::span<const std::size_t> recv_counts) override;
  void broadcast(const comm::ProcessGroup& group, std::span<float> data, int root) override;
  void barrier(const comm::ProcessGroup& group) override;
  // Collective over the world: every process's bytes, in rank order, on `root` (empty
  // elsewhere), under the watchdog (the engine's per-step reports and trace parts).
  std::vector<std::string> gather_bytes(const std::string& bytes, int root);
  // MPI reports a failed peer through the launcher, which ends the job (mpirun, srun): nothing
  // to poll here.
  void throw_if_aborted() const override {}
  // The channel (communicator.hpp) over the second communicators of with_channel, once;
  // nullptr without them or after the first call. It keeps this one's watchdog and failure
  // notice, and MPI_THREAD_MULTIPLE (mpi_session.hpp) lets the two be called at once.
  std::unique_ptr<comm::Communicator> open_channel() override;
  // On a channel: its waits end with comm::RankFailure from now on (the process then ends the
  // job, as it does for any failure).
  void fail_run(std::exception_ptr error) override;

 private:
  struct PendingSend {
    std::vector<float> data;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  using GroupComms = std::map<comm::ProcessGroup, MPI_Comm, comm::ProcessGroupLess>;
  struct ChannelTag {};
  MpiCommunicator(ChannelTag, const MpiCommunicator& of, GroupComms groups);
  // One communicator per group of `all` (MPI_COMM_NULL where this rank is not a member).
  GroupComms split(const std::vector<comm::ProcessGroup>& all) const;
  void refuse_on_channel(const char* op) const;

  MPI_Comm comm_of(const comm::ProcessGroup& group) const;
  // Polls `done` with growing sleeps until it is true or the watchdog expires.
  void wait_or_watchdog(const std::function<bool()>& done, const std::function<std::string()>& what,
                        int peer) const;
  // Waits for a non-blocking operation under the watchdog.
  void complete(MPI_Request& request, const std::string& op) const;
  void reap_sends(bool wait_all);

  double timeout_seconds_ = 0.0;
  MpiFailureNotice* notice_ = nullptr;
  int rank_ = 0, world_ = 1;
  MPI_Comm p2p_ = MPI_COMM_NULL;
  GroupComms groups_;
  GroupComms channel_groups_;  // with_channel, until open_channel() hands them over
  bool is_channel_ = false;
  std::atomic<bool> abandoned_{false};  // a channel's fail_run
  std::list<PendingSend> sends_;
  // Reductions' receive buffer, kept between calls: a fresh one per call pays a page fault per
  // 4 KiB on every large all-reduce (64 MiB: 0.3 s instead of 15 ms here).
  std::vector<float> scratch_;
};

}  // namespace pipetune::mpi
