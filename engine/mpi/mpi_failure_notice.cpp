#include "engine/mpi/mpi_failure_notice.hpp"

#include <chrono>
#include <climits>
#include <thread>
#include <vector>

#include "engine/comm/comm_errors.hpp"
#include "engine/mpi/mpi_check.hpp"

namespace pipetune::mpi {

namespace {
constexpr int kNoticeTag = 1;
constexpr std::size_t kMaxReason = 1024;  // longer reasons are cut: the notice stays eager
}  // namespace

MpiFailureNotice::MpiFailureNotice() {
  PIPETUNE_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &process_));
  PIPETUNE_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

MpiFailureNotice::~MpiFailureNotice() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

bool MpiFailureNotice::tell_root(const std::string& reason, double seconds) noexcept {
  if (process_ == 0 || comm_ == MPI_COMM_NULL) return false;
  try {
    sent_.assign(reason, 0, kMaxReason);
  } catch (...) {  // no memory left for the text: nothing is told
    return false;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Isend(sent_.data(), static_cast<int>(sent_.size()), MPI_CHAR, 0, kNoticeTag, comm_,
                &request) != MPI_SUCCESS)
    return false;
  // A small message leaves at once (eager); the bound covers a rank 0 process already gone.
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done != 0) return true;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds)
      return false;  // the request is left pending: the job is about to end
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void MpiFailureNotice::throw_if_told() {
  if (process_ != 0) return;
  std::lock_guard lock(mutex_);
  if (told_by_ < 0) {
    int found = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    PIPETUNE_MPI_CHECK(MPI_Improbe(MPI_ANY_SOURCE, kNoticeTag, comm_, &found, &message, &status));
    if (found == 0) return;
    int count = 0;
    PIPETUNE_MPI_CHECK(MPI_Get_count(&status, MPI_CHAR, &count));
    std::vector<char> text(static_cast<std::size_t>(count > 0 ? count : 0));
    // A notice is small and complete once probed: its receive does not wait on the sender.
    PIPETUNE_MPI_CHECK(MPI_Mrecv(text.data(), count, MPI_CHAR, &message, MPI_STATUS_IGNORE));
    told_by_ = status.MPI_SOURCE;
    reason_.assign(text.begin(), text.end());
  }
  throw comm::RankFailure(-1, "process " + std::to_string(told_by_),
                          "process " + std::to_string(told_by_) + " failed: " + reason_);
}

}  // namespace pipetune::mpi
