#include "engine/session/session_devices.hpp"

#include <string>

#include "engine/errors.hpp"
#include "engine/session/training_session.hpp"
#ifdef PIPETUNE_HAVE_CUDA
#include "engine/cuda/cuda_devices.hpp"
#include "engine/cuda/cuda_rank_device.hpp"
#include "engine/session/cuda_choices.hpp"
#endif

namespace pipetune::session {

std::string cuda_backend_problem() {
#ifndef PIPETUNE_HAVE_CUDA
  return "this pipetune was built without the CUDA toolkit (nvcc not found at configure time)";
#else
  const cuda::DeviceQuery q = cuda::query_devices();
  return q.devices.empty() ? "no CUDA device is usable (" + q.problem + ")" : std::string();
#endif
}

bool runs_processes() {
  return kBuiltWithMpi;
}

void use_single_gpu([[maybe_unused]] runtime::TrainOptions& o,
                    [[maybe_unused]] const spec::TrainingEngine& engine) {
#ifndef PIPETUNE_HAVE_CUDA
  throw InputError(
      "backend cuda: this pipetune was built without the CUDA toolkit (nvcc not found at "
      "configure time); use the cpu backend");
#else
  const cuda::DeviceQuery q = cuda::query_devices();
  if (q.devices.empty())
    throw InputError("backend cuda: no CUDA device is usable (" + q.problem + ")");
  const cuda::DeviceInfo& gpu = q.devices.front();
  o.rank_device = cuda::single_gpu_rank_devices({.device = gpu.id,
                                                 .precision = cuda_precision(engine),
                                                 .flash = flash_variant(engine.attention),
                                                 .bf16_operands = bf16_operands(engine),
                                                 .gelu_epilogues = engine.gelu_epilogue});
  // Every rank's state lives on this one device: a model that cannot fit is refused up front.
  o.device_memory = runtime::TrainOptions::DeviceMemory{
      "GPU " + std::to_string(gpu.id) + " (" + gpu.name + ")", gpu.total_bytes};
#endif
}

}  // namespace pipetune::session
