// NCCL, loaded when the first NCCL communicator needs it (dlopen), not when pipetune starts
// (engine/tensor/shared_library.hpp says why: libnccl is over 200 MB). These are the functions
// pipetune calls, resolved once from the library configure found (PIPETUNE_NCCL_PATH), or else
// its soname.
#pragma once

#include <nccl.h>

namespace pipetune::nccl {

struct NcclLibrary {
  decltype(&::ncclGetErrorString) GetErrorString;
  decltype(&::ncclGetLastError) GetLastError;
  decltype(&::ncclGetUniqueId) GetUniqueId;
  decltype(&::ncclCommInitRank) CommInitRank;
  decltype(&::ncclCommDestroy) CommDestroy;
  decltype(&::ncclCommAbort) CommAbort;
  decltype(&::ncclCommGetAsyncError) CommGetAsyncError;
  decltype(&::ncclGroupStart) GroupStart;
  decltype(&::ncclGroupEnd) GroupEnd;
  decltype(&::ncclSend) Send;
  decltype(&::ncclRecv) Recv;
  decltype(&::ncclAllReduce) AllReduce;
  decltype(&::ncclReduceScatter) ReduceScatter;
  decltype(&::ncclReduce) Reduce;
  decltype(&::ncclAllGather) AllGather;
  decltype(&::ncclBroadcast) Broadcast;
};

// Loads the library and resolves every function on first use (thread-safe), then returns the
// same table. tensor::LibraryLoadError naming the library, or the missing function, and the
// loader's reason.
const NcclLibrary& nccl_library();

}  // namespace pipetune::nccl
