// OpenBLAS, loaded when the CPU backend first multiplies or sets its threads, not when pipetune
// starts (engine/tensor/shared_library.hpp says why). These are the functions pipetune calls,
// resolved once from the library configure found (PIPETUNE_OPENBLAS_PATH), or else its soname.
#pragma once

#include <cblas.h>

namespace pipetune::tensor {

struct OpenBlasLibrary {
  decltype(&::cblas_sgemm) sgemm;
  decltype(&::openblas_set_num_threads) set_num_threads;
  decltype(&::openblas_get_num_threads) get_num_threads;
};

// Loads the library and resolves every function on first use (thread-safe), then returns the
// same table. std::runtime_error naming the library and the loader's reason when it cannot.
const OpenBlasLibrary& openblas();

}  // namespace pipetune::tensor
