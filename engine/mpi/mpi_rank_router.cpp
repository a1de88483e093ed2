#include "engine/mpi/mpi_rank_router.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "engine/comm/comm_errors.hpp"
#include "engine/mpi/mpi_check.hpp"

namespace pipetune::mpi {

namespace {

constexpr int kMessageTag = 0;  // every message: the header says what it is

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

MpiRankRouter::MpiRankRouter(int ranks_per_process, double timeout_seconds)
    : ranks_per_process_(ranks_per_process), timeout_seconds_(timeout_seconds) {
  if (ranks_per_process < 1)
    throw std::invalid_argument("MPI rank router: ranks per process must be at least 1, not " +
                                std::to_string(ranks_per_process));
  PIPETUNE_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &process_));
  PIPETUNE_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &processes_));
  if (processes_ > INT_MAX / ranks_per_process)
    throw std::invalid_argument("MPI rank router: " + std::to_string(processes_) + " x " +
                                std::to_string(ranks_per_process) + " ranks overflow");
  PIPETUNE_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

MpiRankRouter::~MpiRankRouter() {
  try {
    std::lock_guard lock(mutex_);
    reap_sends_locked(true);
  } catch (...) {
    // A failed run: the launcher ends the job; freeing what we can is all that is left.
  }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiRankRouter::throw_if_failed_locked() const {
  if (failed_rank_ >= 0)
    throw comm::RankFailure(failed_rank_, "rank thread",
                            "rank " + std::to_string(failed_rank_) + " failed: " + failure_);
}

void MpiRankRouter::fail(int rank, const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (failed_rank_ >= 0) return;  // the first failure is the cause
  failed_rank_ = rank;
  failure_ = reason;
  arrived_.notify_all();
}

void MpiRankRouter::post(int src, int dst, Channel channel, int tag, const void* bytes,
                         std::size_t size) {
  if (dst < 0 || dst >= world())
    throw std::invalid_argument("MPI rank router: rank " + std::to_string(src) + " sends to rank " +
                                std::to_string(dst) + " of a world of " + std::to_string(world()));
  const auto* first = static_cast<const std::byte*>(bytes);
  if (process_of(dst) == process_) {
    std::vector<std::byte> payload(first, first + size);
    std::lock_guard lock(mutex_);
    mailboxes_[{dst, src, static_cast<int>(channel), tag}].push_back(std::move(payload));
    arrived_.notify_all();
    return;
  }
  if (size > static_cast<std::size_t>(INT_MAX) - sizeof(Header))
    throw std::invalid_argument("MPI rank router: a message of " + std::to_string(size) +
                                " bytes exceeds MPI's int count");
  // Header and payload in one buffer, copied once, before taking the lock.
  std::vector<std::byte> message(sizeof(Header) + size);
  const Header h{dst, src, static_cast<std::int32_t>(channel), tag};
  std::memcpy(message.data(), &h, sizeof h);
  if (size > 0) std::memcpy(message.data() + sizeof h, first, size);
  std::lock_guard lock(mutex_);
  reap_sends_locked(false);
  PendingSend& s = sends_.emplace_back();
  s.bytes = std::move(message);
  PIPETUNE_MPI_CHECK(MPI_Isend(s.bytes.data(), static_cast<int>(s.bytes.size()), MPI_BYTE,
                               process_of(dst), kMessageTag, comm_, &s.request));
}

void MpiRankRouter::put_back(int dst, int src, Channel channel, int tag,
                             std::vector<std::byte> bytes) {
  std::lock_guard lock(mutex_);
  mailboxes_[{dst, src, static_cast<int>(channel), tag}].push_front(std::move(bytes));
}

void MpiRankRouter::drain_locked() {
  for (;;) {
    int found = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    PIPETUNE_MPI_CHECK(MPI_Improbe(MPI_ANY_SOURCE, kMessageTag, comm_, &found, &message, &status));
    if (found == 0) return;
    int count = 0;
    PIPETUNE_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &count));
    if (count < static_cast<int>(sizeof(Header)))
      throw std::logic_error("MPI rank router: a message of " + std::to_string(count) +
                             " bytes has no header");
    std::vector<std::byte> bytes(static_cast<std::size_t>(count));
    MPI_Request request = MPI_REQUEST_NULL;
    PIPETUNE_MPI_CHECK(MPI_Imrecv(bytes.data(), count, MPI_BYTE, &message, &request));
    // A sender stopped in the middle of a large message must not hang this process.
    const auto start = Clock::now();
    for (int done = 0;;) {
      PIPETUNE_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
      if (done != 0) break;
      if (timeout_seconds_ > 0.0 && seconds_since(start) > timeout_seconds_)
        throw comm::WatchdogTimeout(status.MPI_SOURCE, "receive",
                                    "process " + std::to_string(process_) + " waited more than " +
                                        std::to_string(static_cast<int>(timeout_seconds_)) +
                                        " s for the rest of a message from process " +
                                        std::to_string(status.MPI_SOURCE) + " (watchdog)");
      std::this_thread::yield();
    }
    Header h;
    std::memcpy(&h, bytes.data(), sizeof h);
    if (process_of(h.dst) != process_)
      throw std::logic_error("MPI rank router: process " + std::to_string(process_) +
                             " received a message for rank " + std::to_string(h.dst));
    bytes.erase(bytes.begin(), bytes.begin() + sizeof h);
    mailboxes_[{h.dst, h.src, h.channel, h.tag}].push_back(std::move(bytes));
    arrived_.notify_all();
  }
}

void MpiRankRouter::reap_sends_locked(bool wait_all) {
  const auto start = Clock::now();
  for (auto it = sends_.begin(); it != sends_.end();) {
    int done = 0;
    PIPETUNE_MPI_CHECK(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE));
    if (done != 0) {
      it = sends_.erase(it);
      continue;
    }
    if (!wait_all) {
      ++it;
      continue;
    }
    if (timeout_seconds_ > 0.0 && seconds_since(start) > timeout_seconds_)
      throw comm::WatchdogTimeout(
          -1, "delivery of a buffered send",
          "process " + std::to_string(process_) + " could not deliver its sends (watchdog)");
    drain_locked();  // a peer's rendezvous may need this process to take its messages too
    std::this_thread::yield();
  }
}

std::vector<std::byte> MpiRankRouter::take(int dst, int src, Channel channel, int tag,
                                           const std::string& what) {
  const Key key{dst, src, static_cast<int>(channel), tag};
  const auto start = Clock::now();
  auto pause = std::chrono::microseconds(1);
  std::unique_lock lock(mutex_);
  for (int polls = 0;; ++polls) {
    throw_if_failed_locked();
    for (int attempt = 0; attempt < 2; ++attempt) {
      const auto it = mailboxes_.find(key);
      if (it != mailboxes_.end() && !it->second.empty()) {
        std::vector<std::byte> out = std::move(it->second.front());
        it->second.pop_front();
        if (it->second.empty()) mailboxes_.erase(it);
        return out;
      }
      if (attempt == 0) drain_locked();
    }
    reap_sends_locked(false);
    if (timeout_seconds_ > 0.0 && seconds_since(start) > timeout_seconds_)
      throw comm::WatchdogTimeout(src, what,
                                  "rank " + std::to_string(dst) + " waited more than " +
                                      std::to_string(static_cast<int>(timeout_seconds_)) +
                                      " s in " + what +
                                      ": another process is stuck or gone (watchdog)");
    // Spin briefly (small messages arrive here), then wait in growing steps (to 0.1 ms: a
    // message from another process is seen only by polling, and 1 ms cost a 4-rank tiny run
    // 5 % here) so that waiting ranks leave the cores to the ones computing; a message filed
    // for a rank of this process wakes its waiter at once.
    if (polls > 64) {
      if (notice_ != nullptr) notice_->throw_if_told();  // every waiting rank thread throws
      arrived_.wait_for(lock, pause);
      pause = std::min(pause * 2, std::chrono::microseconds(100));
    } else {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    }
  }
}

}  // namespace pipetune::mpi
