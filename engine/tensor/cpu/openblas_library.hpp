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

// OpenBLAS's idle worker threads spin, yielding, for up to 2^28 cycles (about a tenth of a
// second) after each call before they sleep, so between a training step's GEMMs they compete with
// the engine's own threads for the cores: on 2 cores, 8% of a GPT-2-small step went to
// sched_yield and the kernel, and the step ran 5-6% slower. This sets OPENBLAS_THREAD_TIMEOUT to
// 4 (2^4 cycles, the least OpenBLAS takes) unless the environment sets it already. OpenBLAS reads
// it when it loads. A front end's choice, not the library's (nothing in the engine calls it):
// call it first in main(), before other threads start, as setenv is unsafe beside them.
void set_openblas_thread_timeout();

}  // namespace pipetune::tensor
