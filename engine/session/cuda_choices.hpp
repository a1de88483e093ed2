// The CUDA backend's options for a run's engine choices (built with PIPETUNE_HAVE_CUDA only).
#pragma once

#include "engine/cuda/cuda_rank_device.hpp"
#include "engine/spec/training_engine.hpp"

namespace pipetune::session {

inline cuda::Precision cuda_precision(const spec::TrainingEngine& engine) {
  return engine.precision == spec::EnginePrecision::bf16 ? cuda::Precision::bf16
                                                         : cuda::Precision::fp32;
}

// The flash kernels of an attention choice (stored runs none; flash is the tiled kernels).
inline cuda::FlashVariant flash_variant(spec::EngineAttention attention) {
  switch (attention) {
    case spec::EngineAttention::flash_tc:
      return cuda::FlashVariant::tensor_cores;
    case spec::EngineAttention::flash_mma:
      return cuda::FlashVariant::tensor_core_registers;
    default:
      return cuda::FlashVariant::tiles;
  }
}

inline cuda::Bf16Operands bf16_operands(const spec::TrainingEngine& engine) {
  return engine.gemm_inputs_in_gemm ? cuda::Bf16Operands::in_gemm : cuda::Bf16Operands::copies;
}

}  // namespace pipetune::session
