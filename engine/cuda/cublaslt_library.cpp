#include "engine/cuda/cublaslt_library.hpp"

#include "engine/cuda/cuda_check.hpp"
#include "engine/tensor/shared_library.hpp"

namespace pipetune::cuda {

namespace {

CublasLtLibrary load() {
  try {
    const tensor::SharedLibrary library({PIPETUNE_CUBLASLT_PATH, cublaslt_soname()});
    CublasLtLibrary lib{};
    library.resolve(lib.GetVersion, "cublasLtGetVersion");
    library.resolve(lib.GetStatusName, "cublasLtGetStatusName");
    library.resolve(lib.GetStatusString, "cublasLtGetStatusString");
    library.resolve(lib.Create, "cublasLtCreate");
    library.resolve(lib.Destroy, "cublasLtDestroy");
    library.resolve(lib.Matmul, "cublasLtMatmul");
    library.resolve(lib.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
    library.resolve(lib.MatmulDescCreate, "cublasLtMatmulDescCreate");
    library.resolve(lib.MatmulDescDestroy, "cublasLtMatmulDescDestroy");
    library.resolve(lib.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
    library.resolve(lib.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
    library.resolve(lib.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
    library.resolve(lib.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
    library.resolve(lib.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
    library.resolve(lib.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
    return lib;
  } catch (const tensor::LibraryLoadError& e) {
    throw CudaError(std::string("cuBLASLt: ") + e.what() +
                    "; the CUDA backend needs the CUDA toolkit's cuBLASLt on the library path");
  }
}

}  // namespace

std::string cublaslt_soname() {
  return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
}

const CublasLtLibrary& cublaslt() {
  static const CublasLtLibrary lib = load();  // a failed load throws, and the next call retries
  return lib;
}

}  // namespace pipetune::cuda
