// The MPI start-up of a process (Open MPI): one object in main() of a process launched by mpirun
// or srun, alive while the process uses MPI. It is the one place that calls MPI_Init_thread and
// MPI_Finalize, and where the GPU engine will exchange its NCCL unique id (broadcast_bytes), so
// a multi-process run needs no launcher of its own.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pipetune::mpi {

// Whether this process was started by an MPI launcher (mpirun, srun with PMIx): the
// environment it sets, read without initialising MPI.
bool launched_by_mpi();

class MpiSession {
 public:
  // Initialises MPI with MPI_THREAD_MULTIPLE (hybrid runs: several rank threads per process).
  // Throws std::runtime_error when MPI cannot start or lacks thread support.
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::string processor_name() const;

  // Root's bytes to every process (the NCCL unique id of the GPU engine). Sizes must agree.
  void broadcast_bytes(std::span<std::uint8_t> bytes, int root) const;
  // Ends every process of the job (a failed rank must not leave the others waiting).
  [[noreturn]] void abort(int code) const;

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace pipetune::mpi
