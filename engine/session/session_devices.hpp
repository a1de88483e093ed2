// What this build can run a session's ranks on, and the single-GPU rank devices: the session's
// one place that knows which of the engine's optional parts (CUDA, MPI, NCCL) were built.
#pragma once

#include "engine/runtime/trainer.hpp"
#include "engine/spec/training_engine.hpp"

namespace pipetune::session {

#ifdef PIPETUNE_HAVE_MPI
inline constexpr bool kBuiltWithMpi = true;
#else
inline constexpr bool kBuiltWithMpi = false;
#endif
#ifdef PIPETUNE_HAVE_NCCL
inline constexpr bool kBuiltWithNccl = true;
#else
inline constexpr bool kBuiltWithNccl = false;
#endif

// Every rank of the run as a stream of this machine's first usable GPU, with the device's memory
// as the bound the run's state must fit in. InputError when this build has no CUDA backend or
// no device is usable, naming why.
void use_single_gpu(runtime::TrainOptions& o, const spec::TrainingEngine& engine);

}  // namespace pipetune::session
