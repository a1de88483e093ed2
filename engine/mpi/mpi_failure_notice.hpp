// How rank 0's process learns that another process failed. A failing process ends the MPI job
// (MPI_Abort), which kills rank 0's process too, so without a word first the workspace run that
// rank 0 writes is left `interrupted` instead of `failed`, as the same failure with ranks as
// threads leaves it. The failing process tells rank 0's process (tell_root), which polls for the
// notice in every wait of its communicators (throw_if_told) and fails its run with the cause;
// it then ends the job itself. If rank 0's process never comes to a wait (stuck in a long op),
// the failing process ends the job after a grace period and the run stays `interrupted`.
#pragma once

#include <mpi.h>

#include <mutex>
#include <string>

namespace pipetune::mpi {

class MpiFailureNotice {
 public:
  // Collective over MPI_COMM_WORLD (it duplicates it): every process makes one at the same point.
  MpiFailureNotice();
  ~MpiFailureNotice();
  MpiFailureNotice(const MpiFailureNotice&) = delete;
  MpiFailureNotice& operator=(const MpiFailureNotice&) = delete;

  // From a process other than rank 0's: sends `reason` to rank 0's process, waiting at most
  // `seconds` for the send to leave. Never throws (it runs on the way out of a failure); false
  // when the notice could not be sent.
  bool tell_root(const std::string& reason, double seconds) noexcept;

  // In rank 0's process (a no-op elsewhere): throws comm::RankFailure naming the process that
  // told of its failure and why, once one has. Thread-safe (a hybrid process's rank threads all
  // poll); every caller after the first notice throws the same failure.
  void throw_if_told();

 private:
  int process_ = 0;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string sent_;  // tell_root's text, kept: a send left pending still reads it
  std::mutex mutex_;  // guards what follows and the receive of a notice
  int told_by_ = -1;  // the process that told, -1 while none has
  std::string reason_;
};

}  // namespace pipetune::mpi
