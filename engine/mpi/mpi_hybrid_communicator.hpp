// The communicator of one rank of a hybrid run: K ranks as threads in each process, the
// processes over MPI (`mpirun -np N pipetune train --ranks-per-process K`, N * K ranks). Every
// operation is built from the router's point-to-point messages (mpi_rank_router.hpp), so it
// keeps every promise of communicator.hpp whatever the placement of a group's members:
//  - reductions: each member sends chunk j of its data to member j, which folds the chunks in
//    group-rank order (reduction.hpp, as the thread communicator does) and sends the folded chunk
//    to every member; results are bit-identical to threads and to one rank per process.
//  - gathers, all-to-all(v), broadcast: direct messages; barrier: in to member 0 and out again.
// One object per rank thread, all sharing their process's router.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/mpi/mpi_rank_router.hpp"

namespace pipetune::mpi {

class MpiHybridCommunicator final : public comm::Communicator {
 public:
  // `rank` must live in this process (router.first_rank() ... + K - 1). Every rank of the run
  // passes the same groups in the same order (the group's position names its messages).
  MpiHybridCommunicator(MpiRankRouter& router, int rank,
                        const std::vector<comm::ProcessGroup>& groups);

  int rank() const override { return rank_; }
  int world() const override { return router_->world(); }

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
  // Collective over every rank of the run: every rank's bytes, in rank order, on global rank
  // `root` (empty elsewhere).
  std::vector<std::string> gather_bytes(const std::string& bytes, int root);
  // A failed rank of this process is reported by the router's waits; other processes' failures
  // end the job through the launcher.
  void throw_if_aborted() const override {}

 private:
  // The group's channel tag; throws when undeclared or when this rank is not a member.
  int tag_of(const comm::ProcessGroup& group) const;
  void post_floats(int dst, int tag, const float* data, std::size_t n);
  // Receives exactly `out.size()` floats of a collective message from `src`.
  void take_floats(int src, int tag, std::span<float> out, const std::string& op);
  // Both reduce-scatters: counts[j] floats at at[j] go to group rank j; output <- the reduction
  // of every member's chunk for this one, in group-rank order.
  void reduce_chunks(const comm::ProcessGroup& group, std::span<const float> input,
                     std::span<const std::size_t> counts, std::span<const std::size_t> at,
                     std::span<float> output, comm::ReduceOp op, const std::string& what);

  MpiRankRouter* router_;
  int rank_;
  std::map<comm::ProcessGroup, int, comm::ProcessGroupLess> tags_;
};

}  // namespace pipetune::mpi
