#include "engine/cuda/cublaslt_library.hpp"

#include <dlfcn.h>

#include <type_traits>

#include "engine/cuda/cuda_check.hpp"

namespace pipetune::cuda {

namespace {

std::string loader_error() {
  const char* e = dlerror();
  return e != nullptr ? e : "no reason given";
}

CublasLtLibrary load() {
  const std::string soname = cublaslt_soname();
  // Never unloaded: the table's pointers live as long as the process.
  void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr)
    throw CudaError("cuBLASLt: cannot load " + soname + " (" + loader_error() +
                    "); the CUDA backend needs the CUDA toolkit's cuBLASLt on the library path");
  CublasLtLibrary lib{};
  const auto resolve = [&](auto& fn, const char* name) {
    dlerror();
    void* symbol = dlsym(handle, name);
    if (symbol == nullptr)
      throw CudaError("cuBLASLt: " + soname + " has no " + name + " (" + loader_error() + ")");
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(symbol);
  };
  resolve(lib.GetVersion, "cublasLtGetVersion");
  resolve(lib.GetStatusName, "cublasLtGetStatusName");
  resolve(lib.GetStatusString, "cublasLtGetStatusString");
  resolve(lib.Create, "cublasLtCreate");
  resolve(lib.Destroy, "cublasLtDestroy");
  resolve(lib.Matmul, "cublasLtMatmul");
  resolve(lib.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  resolve(lib.MatmulDescCreate, "cublasLtMatmulDescCreate");
  resolve(lib.MatmulDescDestroy, "cublasLtMatmulDescDestroy");
  resolve(lib.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  resolve(lib.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
  resolve(lib.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  resolve(lib.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  resolve(lib.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  resolve(lib.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  return lib;
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
