// cuBLASLt, loaded when the first CUDA backend needs it (dlopen), not when pipetune starts. The
// library is over 500 MB: linked, its relocations cost every command, the ones that never touch
// a GPU included, about 140 MB of memory and most of the dynamic loader's time. These
// are the functions pipetune calls, resolved once from the library configure found beside the
// toolkit (PIPETUNE_CUBLASLT_PATH), or else "libcublasLt.so.<major of the headers>", found as the
// loader finds any library (LD_LIBRARY_PATH, the executable's RUNPATH, ld.so.cache).
#pragma once

#include <cublasLt.h>

#include <string>

namespace pipetune::cuda {

struct CublasLtLibrary {
  decltype(&::cublasLtGetVersion) GetVersion;
  decltype(&::cublasLtGetStatusName) GetStatusName;
  decltype(&::cublasLtGetStatusString) GetStatusString;
  decltype(&::cublasLtCreate) Create;
  decltype(&::cublasLtDestroy) Destroy;
  decltype(&::cublasLtMatmul) Matmul;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&::cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&::cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&::cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&::cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&::cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&::cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&::cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
};

// The library's file name: "libcublasLt.so." and the headers' major version.
std::string cublaslt_soname();
// Loads the library and resolves every function on first use (thread-safe), then returns the
// same table. CudaError naming the library, or the missing function, and the loader's reason.
const CublasLtLibrary& cublaslt();

}  // namespace pipetune::cuda
