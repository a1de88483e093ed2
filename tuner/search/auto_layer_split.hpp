// The tuner's "auto" layer split (Merak's automatic partitioning) for one plan: the split that
// minimises the slowest pipeline stage under each stage's memory (layer_partition.hpp), with the
// plan's own costs and bytes:
//  - time: each transformer layer's FLOPs for the plan (forward, input and weight gradients with
//    its recomputation: analytic_costs.hpp layer_flops, so MoE layers weigh what they compute);
//    the last stage also runs the output layer (output_layer_in_layers of a layer); the input
//    embedding is a lookup (about nothing);
//  - memory: a layer's weights, gradients and optimizer state on one device (the memory model's
//    per-stage parameters and bytes per parameter for the plan's ZeRO stage), its activations per
//    micro-batch (layer_activation_bytes, with the plan's recomputation) times the micro-batches
//    the schedule holds in flight at the stage's peak (schedule::least_peak_in_flight: exact for
//    gpipe, 1f1b and zb-h1, a lower bound for zb-h2), the vocabulary tables on the first and last
//    stages and the framework overhead, within the device's memory.
// With per-stage recomputation (ParallelPlan::stage_recompute) each stage's layers cost and keep
// what its own mode makes them (layer_partition.hpp's per-stage lists, the general solver).
// For schedules with one layer group per stage and no vocabulary parallelism (the V and
// interleaved schedules place several groups per rank: their split is not one group a stage).
#pragma once

#include <cstddef>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::tuner {

// Layers per stage; nullopt when no split fits every stage's memory. Throws InputError for a plan
// with more than one layer group per stage or vocabulary parallelism.
std::optional<std::vector<int>> auto_layer_split(const spec::ModelSpec& model,
                                                 const spec::ClusterSpec& cluster,
                                                 const spec::ParallelPlan& plan);

// auto_layer_split through the splits of the partition problems seen before: plans that differ
// only in what the problem does not read (offload, layered reduction, schedules with the same
// warm-up) share one solve. The key is the whole problem,
// every cost and byte, so a shared split is the one a solve would give. Not thread-safe: one per
// enumerating thread. Keeps at most `capacity` problems (then starts over).
class AutoLayerSplitter {
 public:
  explicit AutoLayerSplitter(std::size_t capacity = 1024) : capacity_(capacity) {}
  std::optional<std::vector<int>> split(const spec::ModelSpec& model,
                                        const spec::ClusterSpec& cluster,
                                        const spec::ParallelPlan& plan);
  std::size_t solves() const { return solves_; }  // problems solved, not found

 private:
  std::size_t capacity_;
  std::size_t solves_ = 0;
  // By the problem's hash: each entry's problem (flattened) and its split.
  std::unordered_multimap<std::size_t,
                          std::pair<std::vector<double>, std::optional<std::vector<int>>>>
      splits_;
};

}  // namespace pipetune::tuner
