#include "engine/nccl/nccl_library.hpp"

#include <string>

#include "engine/tensor/shared_library.hpp"

namespace pipetune::nccl {

namespace {

NcclLibrary load() {
  try {
    const tensor::SharedLibrary library({PIPETUNE_NCCL_PATH, PIPETUNE_NCCL_SONAME});
    NcclLibrary lib{};
    library.resolve(lib.GetErrorString, "ncclGetErrorString");
    library.resolve(lib.GetLastError, "ncclGetLastError");
    library.resolve(lib.GetUniqueId, "ncclGetUniqueId");
    library.resolve(lib.CommInitRank, "ncclCommInitRank");
    library.resolve(lib.CommDestroy, "ncclCommDestroy");
    library.resolve(lib.CommAbort, "ncclCommAbort");
    library.resolve(lib.CommGetAsyncError, "ncclCommGetAsyncError");
    library.resolve(lib.GroupStart, "ncclGroupStart");
    library.resolve(lib.GroupEnd, "ncclGroupEnd");
    library.resolve(lib.Send, "ncclSend");
    library.resolve(lib.Recv, "ncclRecv");
    library.resolve(lib.AllReduce, "ncclAllReduce");
    library.resolve(lib.ReduceScatter, "ncclReduceScatter");
    library.resolve(lib.Reduce, "ncclReduce");
    library.resolve(lib.AllGather, "ncclAllGather");
    library.resolve(lib.Broadcast, "ncclBroadcast");
    return lib;
  } catch (const tensor::LibraryLoadError& e) {
    throw tensor::LibraryLoadError(std::string("NCCL: ") + e.what() +
                                   "; backend cuda with ranks as processes needs it");
  }
}

}  // namespace

const NcclLibrary& nccl_library() {
  static const NcclLibrary lib = load();  // a failed load throws, and the next call retries
  return lib;
}

}  // namespace pipetune::nccl
