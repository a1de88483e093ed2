#include "engine/runtime/reduction_worker.hpp"

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/two_phase_all_to_all.hpp"

namespace pipetune::runtime {

ReductionWorker::ReductionWorker(std::unique_ptr<comm::Communicator> channel,
                                 std::function<std::int64_t()> now_ns)
    : channel_(std::move(channel)), now_ns_(std::move(now_ns)), thread_([this] { run(); }) {}

ReductionWorker::~ReductionWorker() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    queue_.clear();
  }
  changed_.notify_all();
  thread_.join();
}

void ReductionWorker::submit(int chunk, Job job) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({chunk, next_ticket_++, std::move(job)});
  }
  changed_.notify_all();
}

comm::CollectiveStream::Ticket ReductionWorker::submit_awaited(Job job) {
  Ticket ticket = 0;
  {
    std::lock_guard lock(mutex_);
    ticket = next_ticket_++;
    queue_.push_back({kStreamJob, ticket, std::move(job)});
  }
  changed_.notify_all();
  return ticket;
}

comm::CollectiveStream::Ticket ReductionWorker::all_to_all(const comm::ProcessGroup& group,
                                                           std::span<const float> input,
                                                           std::span<float> output) {
  return submit_awaited(
      [group, input, output](comm::Communicator& via) { via.all_to_all(group, input, output); });
}

comm::CollectiveStream::Ticket ReductionWorker::all_to_all_two_phase(
    const comm::ProcessGroup& node, const comm::ProcessGroup& cross, std::span<const float> input,
    std::span<float> output) {
  // The scratch is the worker thread's alone (jobs run one at a time there), kept between jobs.
  return submit_awaited([this, node, cross, input, output](comm::Communicator& via) {
    two_phase_staged_.resize(input.size());
    two_phase_arrived_.resize(input.size());
    comm::two_phase_all_to_all(via, node, cross, input, output, two_phase_staged_,
                               two_phase_arrived_, comm::host_block_copy);
  });
}

comm::CollectiveStream::Ran ReductionWorker::wait(Ticket ticket) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return finished_ > ticket || error_; });
  if (error_) std::rethrow_exception(error_);
  const auto it = stream_ran_.find(ticket);
  if (it == stream_ran_.end())
    throw std::logic_error("collective stream: ticket " + std::to_string(ticket) +
                           " is not an awaited collective, or was waited for already");
  const comm::CollectiveStream::Ran ran = it->second;
  stream_ran_.erase(it);
  return ran;
}

std::vector<ReductionWorker::Ran> ReductionWorker::wait() {
  std::unique_lock lock(mutex_);
  // A failed job empties the queue as it ends, so this also ends on an error.
  changed_.wait(lock, [&] { return queue_.empty() && !running_job_; });
  if (error_) {
    ran_.clear();
    stream_ran_.clear();
    std::rethrow_exception(std::exchange(error_, nullptr));
  }
  stream_ran_.clear();  // collectives nobody waited for: their owner failed or forgot them
  return std::exchange(ran_, {});
}

void ReductionWorker::abandon(std::exception_ptr error) {
  bool busy = false;
  {
    std::lock_guard lock(mutex_);
    busy = running_job_ || !queue_.empty();
    queue_.clear();
  }
  // The job in hand may wait on peers whose matching jobs will never come: failing the run ends
  // that wait (and every other) with RankFailure.
  if (busy) channel_->fail_run(std::move(error));
  // A job in hand may still write into buffers its submitter is about to free.
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return !running_job_; });
}

void ReductionWorker::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !error_); });
    if (stopping_) return;
    Queued q = std::move(queue_.front());
    queue_.pop_front();
    running_job_ = true;
    lock.unlock();
    const int chunk = q.chunk;
    Job& job = q.job;
    Ran ran{chunk, now_ns_(), 0};
    std::exception_ptr failed;
    try {
      job(*channel_);
    } catch (...) {
      failed = std::current_exception();
    }
    ran.end_ns = now_ns_();
    lock.lock();
    running_job_ = false;
    if (failed) {
      error_ = failed;
      queue_.clear();
      finished_ = next_ticket_;
    } else {
      finished_ = q.ticket + 1;
      if (chunk == kStreamJob)
        stream_ran_[q.ticket] = {ran.start_ns, ran.end_ns};
      else
        ran_.push_back(ran);
    }
    changed_.notify_all();
  }
}

}  // namespace pipetune::runtime
