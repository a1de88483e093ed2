// The per-layer closed forms the cost model (op_costs.hpp) is built on: FLOPs of one transformer
// layer per pass (Megatron's model FLOPs with causal halving, plus the recomputation a plan asks
// for) and the activation bytes a layer keeps for its backward (Korthikanti et al.).
#pragma once

#include <vector>

#include "engine/schedule/costs.hpp"
#include "engine/schedule/schedule.hpp"
#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::tuner {

// What the activation formula assumes about the kernels.
struct AnalyticAssumptions {
  bool flash_attention = true;                  // no s^2 attention activations are stored...
  bool stores_attention_probabilities = false;  // ...but for the softmax output (CPU engine)
  int bytes_per_value = 2;                      // bf16 activations and transfers
};

// FLOPs of one micro-batch through one transformer layer of this model on one TP rank.
struct LayerFlops {
  double forward = 0.0;      // F
  double input_grad = 0.0;   // B (incl. recomputation the plan asks for)
  double weight_grad = 0.0;  // W
};
LayerFlops layer_flops(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                       std::int64_t layer);

// Bytes of activations one micro-batch keeps for the backward of one layer on one TP rank.
double layer_activation_bytes(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                              const AnalyticAssumptions& a = {});

}  // namespace pipetune::tuner
