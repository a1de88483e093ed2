#include "tuner/cost/execution.hpp"

namespace pipetune::tuner {

ExecutionOptions cpu_engine_execution() {
  ExecutionOptions x;
  x.flash_attention = true;  // causal half only, timed by the attention efficiency
  x.stores_attention_probabilities = true;
  x.dense_embedding_gradient = false;
  x.tp_comm_overlap = false;
  x.overlap_grad_reduce = false;
  x.overlap_param_gather = false;
  x.pp_scatter_gather = false;
  x.activation_bytes = 4;
  x.gradient_reduce_bytes = 4;
  return x;
}

ExecutionOptions default_execution(const spec::HardwareSpec& hardware) {
  return hardware.device == spec::DeviceKind::Cpu ? cpu_engine_execution() : ExecutionOptions{};
}

}  // namespace pipetune::tuner
