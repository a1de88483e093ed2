// Checked MPI calls: a failing call throws comm::RankFailure naming the call, the MPI error
// string, file and line (communicators use MPI_ERRORS_RETURN, so failures come back as codes).
#pragma once

#include <mpi.h>

#include <string>

#include "engine/comm/comm_errors.hpp"

namespace pipetune::mpi {

inline std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

[[noreturn]] inline void throw_mpi_error(int code, const char* call, const char* file, int line) {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  throw comm::RankFailure(rank, call,
                          std::string(call) + " failed on rank " + std::to_string(rank) + ": " +
                              mpi_error_string(code) + " (" + file + ":" + std::to_string(line) +
                              ")");
}

}  // namespace pipetune::mpi

#define PIPETUNE_MPI_CHECK(call)                                                       \
  do {                                                                                 \
    const int pipetune_mpi_code_ = (call);                                             \
    if (pipetune_mpi_code_ != MPI_SUCCESS)                                             \
      ::pipetune::mpi::throw_mpi_error(pipetune_mpi_code_, #call, __FILE__, __LINE__); \
  } while (false)
