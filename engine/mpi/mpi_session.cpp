#include "engine/mpi/mpi_session.hpp"

#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <stdexcept>

#include "engine/mpi/mpi_check.hpp"

namespace pipetune::mpi {

bool launched_by_mpi() {
  // Open MPI's mpirun, PMIx launchers (srun --mpi=pmix, prterun), and PMI-1/2 (MPICH, srun).
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = MPI_THREAD_SINGLE;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    throw std::runtime_error("MPI_Init_thread failed");
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    throw std::runtime_error("the MPI library does not support MPI_THREAD_MULTIPLE");
  }
  // Errors come back as codes so they become typed exceptions with a message (mpi_check.hpp).
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  PIPETUNE_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  PIPETUNE_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::string MpiSession::processor_name() const {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  PIPETUNE_MPI_CHECK(MPI_Get_processor_name(name, &length));
  return std::string(name, static_cast<std::size_t>(length));
}

void MpiSession::broadcast_bytes(std::span<std::uint8_t> bytes, int root) const {
  PIPETUNE_MPI_CHECK(
      MPI_Bcast(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, root, MPI_COMM_WORLD));
}

void MpiSession::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

}  // namespace pipetune::mpi
