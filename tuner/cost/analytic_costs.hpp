// First-order analytic op costs for a (model, cluster, plan): FLOPs of each layer kind divided
// by an assumed fraction of the device's peak, transfers by latency + bytes / bandwidth, and
// activation bytes per micro-batch by the Korthikanti et al. formula. This is what
// `pipetune simulate --config` runs on; the calibrated cost model of the tuner replaces the
// assumed efficiency with fitted curves.
#pragma once

#include <vector>

#include "engine/schedule/costs.hpp"
#include "engine/schedule/schedule.hpp"
#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::tuner {

struct AnalyticAssumptions {
  // Fraction of peak dense FLOP/s that large GEMMs reach (60-95% per Calculon's tables,
  // reference/tuners.md section 4); uncalibrated.
  double matmul_efficiency = 0.7;
  // Fraction of a link's rate that a transfer or collective reaches (NCCL bus bandwidth is
  // ~65% of NVLink and ~90% of IB rate in Calculon's calibrated files).
  double link_efficiency = 0.8;
  bool flash_attention = true;  // no s^2 attention activations are stored
  int bytes_per_value = 2;      // bf16 activations and transfers
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

struct AnalyticCosts {
  schedule::CostTable costs;                            // per pipeline rank, per op (one chunk)
  std::vector<double> activation_bytes_per_microbatch;  // per pipeline rank (all its chunks)
  std::vector<double> stage_forward_flops;              // per rank, one micro-batch, all chunks
};

// Costs for the schedule's placement (which rank holds the embedding and the output layer).
AnalyticCosts analytic_costs(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                             const spec::ParallelPlan& plan, schedule::Placement placement,
                             const AnalyticAssumptions& a = {});

}  // namespace pipetune::tuner
