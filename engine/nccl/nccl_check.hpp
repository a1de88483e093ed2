// Checked NCCL calls: a failing call throws NcclError, a comm::RankFailure (the run cannot go
// on), naming the call, ncclGetErrorString's text, NCCL's last error message when it has one,
// and the file and line of the call.
#pragma once

#include <nccl.h>

#include <string>

#include "engine/comm/comm_errors.hpp"
#include "engine/nccl/nccl_library.hpp"

namespace pipetune::nccl {

class NcclError : public comm::RankFailure {
 public:
  NcclError(int rank, std::string call, const std::string& message)
      : comm::RankFailure(rank, std::move(call), message) {}
};

namespace detail {

[[noreturn]] void throw_nccl_error(ncclResult_t result, ncclComm_t comm, const char* call,
                                   const char* file, int line);

inline void check_nccl(ncclResult_t result, ncclComm_t comm, const char* call, const char* file,
                       int line) {
  if (result != ncclSuccess) throw_nccl_error(result, comm, call, file, line);
}

}  // namespace detail

}  // namespace pipetune::nccl

// PIPETUNE_NCCL_CHECK(nccl_library().AllReduce(...));  (no communicator to ask for its last error)
#define PIPETUNE_NCCL_CHECK(call) \
  ::pipetune::nccl::detail::check_nccl((call), nullptr, #call, __FILE__, __LINE__)
// PIPETUNE_NCCL_CHECK_COMM(comm, nccl_library().Send(..., comm, stream));  names NCCL's last error
// on comm
#define PIPETUNE_NCCL_CHECK_COMM(comm, call) \
  ::pipetune::nccl::detail::check_nccl((call), (comm), #call, __FILE__, __LINE__)
