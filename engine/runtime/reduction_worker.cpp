#include "engine/runtime/reduction_worker.hpp"

#include <utility>

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
    queue_.emplace_back(chunk, std::move(job));
  }
  changed_.notify_all();
}

std::vector<ReductionWorker::Ran> ReductionWorker::wait() {
  std::unique_lock lock(mutex_);
  // A failed job empties the queue as it ends, so this also ends on an error.
  changed_.wait(lock, [&] { return queue_.empty() && !running_job_; });
  if (error_) {
    ran_.clear();
    std::rethrow_exception(std::exchange(error_, nullptr));
  }
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
}

void ReductionWorker::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !error_); });
    if (stopping_) return;
    auto [chunk, job] = std::move(queue_.front());
    queue_.pop_front();
    running_job_ = true;
    lock.unlock();
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
    } else {
      ran_.push_back(ran);
    }
    changed_.notify_all();
  }
}

}  // namespace pipetune::runtime
