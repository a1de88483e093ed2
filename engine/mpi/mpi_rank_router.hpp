// The messages of a process that runs several ranks as threads (hybrid: `--ranks-per-process
// K`). MPI has one member per process in a communicator, so K ranks of one process cannot each
// be a member of a group's MPI communicator, and the engine's 31-bit tags leave no room to name
// the ranks in MPI tags. Instead every message carries a small header (destination and source
// rank, channel, tag) and goes over one duplicate of MPI_COMM_WORLD; whichever rank thread of
// the receiving process is waiting drains MPI and files each arrival in its destination rank's
// mailbox. Messages between two ranks of the same process never touch MPI.
//
// Order: one rank's sends leave from one thread in program order, MPI keeps the order between
// two processes on one communicator and tag, and one thread at a time drains, so the messages
// from a rank to a rank under one key arrive in the order sent (what communicator.hpp promises).
//
// Rank r lives in process r / K as its local rank r % K, so a process holds consecutive ranks
// (a tensor-parallel group shares a machine, as in Megatron-LM's placement).
#pragma once

#include <mpi.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "engine/mpi/mpi_failure_notice.hpp"

namespace pipetune::mpi {

// What a message is for: the engine's point-to-point tags, a collective of one group (tag = the
// group's index in the communicator's declaration order), or bytes gathered to a root.
enum class Channel : std::int32_t { point_to_point = 0, collective = 1, bytes = 2 };

class MpiRankRouter {
 public:
  // Collective over MPI_COMM_WORLD (it duplicates it). The run has world size * K ranks. A wait
  // longer than timeout_seconds (> 0) throws comm::WatchdogTimeout.
  MpiRankRouter(int ranks_per_process, double timeout_seconds);
  ~MpiRankRouter();
  MpiRankRouter(const MpiRankRouter&) = delete;
  MpiRankRouter& operator=(const MpiRankRouter&) = delete;

  int ranks_per_process() const { return ranks_per_process_; }
  int world() const { return processes_ * ranks_per_process_; }     // ranks of the run
  int first_rank() const { return process_ * ranks_per_process_; }  // this process's first
  int process_of(int rank) const { return rank / ranks_per_process_; }
  double timeout_seconds() const { return timeout_seconds_; }

  // Buffered: copies `bytes` and returns.
  void post(int src, int dst, Channel channel, int tag, const void* bytes, std::size_t size);
  // The oldest message from `src` to `dst` (a rank of this process) under (channel, tag); waits
  // under the watchdog, `what` naming the wait in its error. Throws comm::RankFailure once a
  // rank of this process has failed (fail()).
  std::vector<std::byte> take(int dst, int src, Channel channel, int tag, const std::string& what);

  // Returns a message take() gave to the front of its queue (a receive of the wrong size).
  void put_back(int dst, int src, Channel channel, int tag, std::vector<std::byte> bytes);

  // A rank thread of this process failed: every wait of the others throws instead of waiting
  // for messages that will never come (the process then ends the job).
  void fail(int rank, const std::string& reason);

  // Every wait that goes on past its first polls also asks `notice` whether another process
  // failed, and fails this process's ranks with its cause if one did. Not owned; may be null.
  void watch_failures(MpiFailureNotice* notice) { notice_ = notice; }

 private:
  struct Header {
    std::int32_t dst, src, channel, tag;
  };
  using Key = std::tuple<int, int, int, int>;  // dst, src, channel, tag
  struct PendingSend {
    std::vector<std::byte> bytes;  // header then payload
    MPI_Request request = MPI_REQUEST_NULL;
  };

  // Under mutex_: files every message MPI has for this process into its mailbox.
  void drain_locked();
  void reap_sends_locked(bool wait_all);
  void throw_if_failed_locked() const;

  int ranks_per_process_ = 1, process_ = 0, processes_ = 1;
  double timeout_seconds_ = 0.0;
  MpiFailureNotice* notice_ = nullptr;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::mutex mutex_;  // guards everything below, and every MPI call of the router
  std::map<Key, std::deque<std::vector<std::byte>>> mailboxes_;
  std::list<PendingSend> sends_;
  std::condition_variable arrived_;  // a message was filed, or a rank failed
  int failed_rank_ = -1;
  std::string failure_;
};

}  // namespace pipetune::mpi
