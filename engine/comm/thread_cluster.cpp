#include "engine/comm/thread_cluster.hpp"

#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/thread_communicator.hpp"
#include "engine/errors.hpp"

namespace pipetune::comm {

namespace {

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

// Records a failure that escaped a rank's function, phrased by where the rank was.
void record_failure(threads::ClusterState& state, int rank, std::exception_ptr error) {
  std::string op;
  std::string where;
  {
    threads::RankActivity& a = state.activity(rank);
    std::lock_guard lock(a.mutex);
    if (a.in_op) {
      op = threads::describe(a.current);
      where = "in " + op;
    } else if (a.has_last) {
      where = "outside communication (last op: " + threads::describe(a.last) + ")";
    } else {
      where = "before any communication";
    }
  }
  const std::string what = message_of(error);  // before `error` is moved into fail()
  state.fail(rank, op, where, what, std::move(error));
}

void run_rank(threads::ClusterState& state, ThreadCommunicator& comm, const RankFunction& fn) {
  try {
    fn(comm);
  } catch (...) {
    record_failure(state, comm.rank(), std::current_exception());
  }
  threads::RankActivity& a = state.activity(comm.rank());
  std::lock_guard lock(a.mutex);
  a.finished = true;
}

}  // namespace

ThreadCluster::ThreadCluster(int world, ClusterOptions options) : world_(world), options_(options) {
  if (world < 1) throw InputError("world=" + std::to_string(world) + " must be at least 1");
  if (world > kMaxThreadRanks)
    throw InputError("world=" + std::to_string(world) + " exceeds the thread limit of " +
                     std::to_string(kMaxThreadRanks) +
                     " (a virtual cluster runs one thread per rank)");
  if (options.watchdog_timeout.count() <= 0)
    throw InputError("watchdog timeout must be positive, got " +
                     std::to_string(options.watchdog_timeout.count()) + " ms");
}

ThreadCluster::ThreadCluster(const Topology& topology, ClusterOptions options)
    : ThreadCluster(topology.world(), options) {}

void ThreadCluster::run(const RankFunction& fn) const {
  threads::ClusterState state(world_, options_);
  std::vector<std::unique_ptr<ThreadCommunicator>> comms;
  comms.reserve(static_cast<std::size_t>(world_));
  for (int r = 0; r < world_; ++r) comms.push_back(std::make_unique<ThreadCommunicator>(state, r));

  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(world_));
  try {
    for (int r = 0; r < world_; ++r)
      threads.emplace_back(run_rank, std::ref(state), std::ref(*comms[static_cast<std::size_t>(r)]),
                           std::cref(fn));
  } catch (...) {
    // Could not start every rank: the started ones would wait forever for the missing ones.
    record_failure(state, static_cast<int>(threads.size()), std::current_exception());
  }
  for (std::thread& t : threads) t.join();

  if (state.aborted()) std::rethrow_exception(state.failure().error);
}

void run_threads(int world, const RankFunction& fn, ClusterOptions options) {
  ThreadCluster(world, options).run(fn);
}

}  // namespace pipetune::comm
