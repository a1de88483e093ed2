// A rank's layered gradient reductions (the schedule's R ops) on a thread of their own, over a
// channel of the rank's communicator (Communicator::open_channel), so that each overlaps the
// backward compute after it, as the simulator times R on the rank's comm lane. Jobs run one at a
// time in the order submitted, as on one communication stream; every rank of a reduction group
// submits its R ops in the schedule's order, so the channels' collectives match.
//
// The rank's thread submits (R op), carries on computing, and at the iteration's end wait()s for
// every job: then the gradients are whole for the optimizer, and each job's times come back for
// the rank's recorder (which only the rank's thread writes). An error in a job is rethrown by
// wait(). An error on the rank's thread while a job is blocked in a collective must go through
// abandon(), which fails the run through the channel so that every wait ends.
//
// The same thread is the rank's collective stream (comm::CollectiveStream): the chunked
// all-to-all of MoE layers goes through it, each chunk waited for on its own.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/comm/collective_stream.hpp"
#include "engine/comm/communicator.hpp"

namespace pipetune::runtime {

class ReductionWorker : public comm::CollectiveStream {
 public:
  // A job's collectives go to `channel`.
  using Job = std::function<void(comm::Communicator& channel)>;
  // What a job took, on the clock `now_ns` gives (the rank recorder's).
  struct Ran {
    int chunk = -1;
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
  };

  ReductionWorker(std::unique_ptr<comm::Communicator> channel,
                  std::function<std::int64_t()> now_ns);
  // Joins the thread. Jobs not yet started are dropped: the rank is ending on an error (a normal
  // iteration ends in wait()).
  ~ReductionWorker() override;
  ReductionWorker(const ReductionWorker&) = delete;
  ReductionWorker& operator=(const ReductionWorker&) = delete;

  void submit(int chunk, Job job);
  // Blocks until every submitted job has run; returns the times of the R jobs (submit()) in
  // submission order and forgets them. Rethrows the first job's error (the jobs after it are
  // dropped).
  std::vector<Ran> wait();
  // comm::CollectiveStream: a job of its own in the same queue, waited for by its ticket.
  Ticket all_to_all(const comm::ProcessGroup& group, std::span<const float> input,
                    std::span<float> output) override;
  Ticket all_to_all_two_phase(const comm::ProcessGroup& node, const comm::ProcessGroup& cross,
                              std::span<const float> input, std::span<float> output) override;
  comm::CollectiveStream::Ran wait(Ticket ticket) override;
  // The rank's thread met `error`: if a job is queued or running, the run fails with it through
  // the channel (the job's collective then ends with RankFailure), and the queue is dropped.
  // Returns once no job runs.
  void abandon(std::exception_ptr error) override;

 private:
  void run();
  // Queues a collective of the stream, to be waited for by the ticket returned.
  Ticket submit_awaited(Job job);

  std::unique_ptr<comm::Communicator> channel_;
  std::function<std::int64_t()> now_ns_;
  std::mutex mutex_;
  std::condition_variable changed_;
  struct Queued {
    int chunk;  // an R job's chunk; kStreamJob for a collective waited for by ticket
    Ticket ticket;
    Job job;
  };
  static constexpr int kStreamJob = -2;
  std::deque<Queued> queue_;
  bool running_job_ = false;
  bool stopping_ = false;
  Ticket next_ticket_ = 0;
  Ticket finished_ = 0;  // jobs run (or dropped by an error) so far: tickets below it are done
  std::vector<Ran> ran_;
  std::map<Ticket, comm::CollectiveStream::Ran> stream_ran_;  // awaited by wait(ticket)
  std::exception_ptr error_;
  // The two-phase all-to-all's scratch (all_to_all_two_phase), touched on the worker thread only.
  std::vector<float> two_phase_staged_, two_phase_arrived_;
  std::thread thread_;  // last: starts once everything above is built
};

}  // namespace pipetune::runtime
