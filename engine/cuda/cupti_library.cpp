#include "engine/cuda/cupti_library.hpp"

#include "engine/cuda/cuda_check.hpp"
#include "engine/tensor/shared_library.hpp"

namespace pipetune::cuda {

namespace {

CuptiLibrary load() {
  try {
    const tensor::SharedLibrary library({PIPETUNE_CUPTI_PATH, PIPETUNE_CUPTI_SONAME});
    CuptiLibrary lib{};
    library.resolve(lib.GetResultString, "cuptiGetResultString");
    library.resolve(lib.GetCallbackName, "cuptiGetCallbackName");
    library.resolve(lib.GetTimestamp, "cuptiGetTimestamp");
    library.resolve(lib.GetStreamIdEx, "cuptiGetStreamIdEx");
    library.resolve(lib.SetThreadIdType, "cuptiSetThreadIdType");
    library.resolve(lib.ActivityEnable, "cuptiActivityEnable");
    library.resolve(lib.ActivityDisable, "cuptiActivityDisable");
    library.resolve(lib.ActivityFlushAll, "cuptiActivityFlushAll");
    library.resolve(lib.ActivityGetNextRecord, "cuptiActivityGetNextRecord");
    library.resolve(lib.ActivityGetNumDroppedRecords, "cuptiActivityGetNumDroppedRecords");
    library.resolve(lib.ActivityRegisterCallbacks, "cuptiActivityRegisterCallbacks");
    library.resolve(lib.ActivitySetAttribute, "cuptiActivitySetAttribute");
    library.resolve(lib.ActivityEnableRuntimeApi, "cuptiActivityEnableRuntimeApi");
    library.resolve(lib.ActivityEnableDriverApi, "cuptiActivityEnableDriverApi");
    return lib;
  } catch (const tensor::LibraryLoadError& e) {
    throw CudaError(std::string("CUPTI: ") + e.what() +
                    "; GPU activity capture needs the CUDA toolkit's CUPTI on the library path");
  }
}

}  // namespace

const CuptiLibrary& cupti() {
  static const CuptiLibrary lib = load();  // a failed load throws, and the next call retries
  return lib;
}

}  // namespace pipetune::cuda
