#include "tuner/cost/execution.hpp"

namespace pipetune::tuner {

double MoeImbalance::at(int ep) const {
  if (ep <= 1) return 1.0;
  const auto it = by_ep.find(ep);
  return it != by_ep.end() ? it->second : any_ep;
}

ExecutionOptions cpu_engine_execution() {
  ExecutionOptions x;
  x.flash_attention = true;  // causal half only, timed by the attention efficiency
  x.stores_attention_probabilities = true;
  x.dense_embedding_gradient = false;
  x.tp_comm_overlap = false;
  x.overlap_grad_reduce = false;
  x.overlap_param_gather = false;
  x.overlap_sharded_comm = false;
  x.pp_scatter_gather = false;
  x.activation_bytes = 4;
  x.gradient_reduce_bytes = 4;
  x.copies_block_compute = true;
  x.host_update_bandwidth = 0.0;  // the device is the host
  return x;
}

ExecutionOptions cuda_engine_execution(bool bf16_gemms, spec::EngineAttention attention) {
  ExecutionOptions x = cpu_engine_execution();
  x.stores_attention_probabilities = attention == spec::EngineAttention::stored;
  x.fp32_gemms = !bf16_gemms;
  // Timed at the fp32 peak even for flash-tc: its WMMA tiles measured at fp32-unit rates on an
  // H200 (GPT-2 shape, T = 1024: 19.6 TFLOP/s forward, 13.1 backward, against the fp32 tiles'
  // 18.3 and 11.6), nowhere near the tensor cores' peak; calibration fits the rest. flash-mma
  // too, until its kernels are measured.
  x.fp32_attention = true;
  const ExecutionOptions gpu;
  x.copies_block_compute = gpu.copies_block_compute;
  x.host_update_bandwidth = gpu.host_update_bandwidth;
  return x;
}

std::optional<ExecutionOptions> engine_execution(spec::EngineBackend backend,
                                                 spec::EnginePrecision precision,
                                                 spec::EngineAttention attention) {
  if (backend != spec::EngineBackend::cuda) return std::nullopt;
  return cuda_engine_execution(precision == spec::EnginePrecision::bf16, attention);
}

ExecutionOptions default_execution(const spec::HardwareSpec& hardware) {
  return hardware.device == spec::DeviceKind::Cpu ? cpu_engine_execution() : ExecutionOptions{};
}

}  // namespace pipetune::tuner
