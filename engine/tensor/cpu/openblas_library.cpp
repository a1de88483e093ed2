#include "engine/tensor/cpu/openblas_library.hpp"

#include <cstdlib>

#include "engine/tensor/shared_library.hpp"

namespace pipetune::tensor {

namespace {

OpenBlasLibrary load() {
  try {
    const SharedLibrary library({PIPETUNE_OPENBLAS_PATH, PIPETUNE_OPENBLAS_SONAME});
    OpenBlasLibrary lib{};
    library.resolve(lib.sgemm, "cblas_sgemm");
    library.resolve(lib.set_num_threads, "openblas_set_num_threads");
    library.resolve(lib.get_num_threads, "openblas_get_num_threads");
    return lib;
  } catch (const LibraryLoadError& e) {
    throw LibraryLoadError(std::string("OpenBLAS: ") + e.what() +
                           "; the CPU backend needs it (libopenblas0, scripts/setup)");
  }
}

}  // namespace

void set_openblas_thread_timeout() {
  setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);  // 0: the user's value stays
}

const OpenBlasLibrary& openblas() {
  static const OpenBlasLibrary lib = load();  // a failed load throws, and the next call retries
  return lib;
}

}  // namespace pipetune::tensor
