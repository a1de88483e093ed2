// CUPTI, loaded when the first GPU activity capture needs it (dlopen), not when pipetune starts
// (engine/tensor/shared_library.hpp says why). These are the functions pipetune calls, resolved
// once from the library configure found beside the toolkit (PIPETUNE_CUPTI_PATH), or else its
// soname.
#pragma once

#include <cupti.h>

namespace pipetune::cuda {

struct CuptiLibrary {
  decltype(&::cuptiGetResultString) GetResultString;
  decltype(&::cuptiGetCallbackName) GetCallbackName;
  decltype(&::cuptiGetTimestamp) GetTimestamp;
  decltype(&::cuptiGetStreamIdEx) GetStreamIdEx;
  decltype(&::cuptiSetThreadIdType) SetThreadIdType;
  decltype(&::cuptiActivityEnable) ActivityEnable;
  decltype(&::cuptiActivityDisable) ActivityDisable;
  decltype(&::cuptiActivityFlushAll) ActivityFlushAll;
  decltype(&::cuptiActivityGetNextRecord) ActivityGetNextRecord;
  decltype(&::cuptiActivityGetNumDroppedRecords) ActivityGetNumDroppedRecords;
  decltype(&::cuptiActivityRegisterCallbacks) ActivityRegisterCallbacks;
  decltype(&::cuptiActivitySetAttribute) ActivitySetAttribute;
  decltype(&::cuptiActivityEnableRuntimeApi) ActivityEnableRuntimeApi;
  decltype(&::cuptiActivityEnableDriverApi) ActivityEnableDriverApi;
};

// Loads the library and resolves every function on first use (thread-safe), then returns the
// same table. CudaError naming the library, or the missing function, and the loader's reason.
const CuptiLibrary& cupti();

}  // namespace pipetune::cuda
