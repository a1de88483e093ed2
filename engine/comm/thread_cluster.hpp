// A virtual cluster: `world` ranks, each a thread of this process with its own communicator.
//
//   ThreadCluster cluster(topology);          // or ThreadCluster(world)
//   cluster.run([&](Communicator& comm) { ... comm.all_reduce(topology.dp_group(comm.rank()), g);
//   });
//
// No hang, ever: when a rank's function throws, every other rank blocked in (or later entering)
// a communication op wakes with RankFailure naming the failed rank and its op; a wait longer than
// the watchdog limit fails the run the same way, naming the ranks that never arrived. run()
// joins every thread and rethrows the first failure as it was thrown. (A rank stuck in endless
// compute cannot be interrupted; Communicator::throw_if_aborted() lets long loops notice.)
#pragma once

#include <functional>

#include "engine/comm/communicator.hpp"
#include "engine/comm/thread_cluster_state.hpp"
#include "engine/comm/topology.hpp"

namespace pipetune::comm {

// One thread per rank; beyond this a machine thrashes long before it computes anything useful.
inline constexpr int kMaxThreadRanks = 1024;

using RankFunction = std::function<void(Communicator&)>;

class ThreadCluster {
 public:
  // Throws InputError for world < 1 or world > kMaxThreadRanks.
  explicit ThreadCluster(int world, ClusterOptions options = {});
  explicit ThreadCluster(const Topology& topology, ClusterOptions options = {});

  int world() const { return world_; }
  const ClusterOptions& options() const { return options_; }

  // Runs `fn` on every rank, each on its own thread with fresh shared state; returns when all
  // have returned, or rethrows the first failure after joining every thread.
  void run(const RankFunction& fn) const;

 private:
  int world_;
  ClusterOptions options_;
};

// ThreadCluster(world, options).run(fn).
void run_threads(int world, const RankFunction& fn, ClusterOptions options = {});

}  // namespace pipetune::comm
