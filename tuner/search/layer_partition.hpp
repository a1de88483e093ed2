// Automatic layer partitioning (Merak): the transformer layers, in model order, cut into one
// contiguous group per pipeline stage so that the slowest stage is as fast as it can be, while
// every stage fits its device's memory at its peak. A stage's time is its layers' costs plus what
// else it runs (the input embedding on the first, the output layer and loss on the last); its
// memory is its layers' static bytes (weights, gradients, optimizer state) plus their activations
// times the micro-batches the schedule keeps in flight there at its peak (the first stages of
// 1F1B hold the most), plus what else it holds (vocabulary tables, framework overhead).
//
// Two exact solvers:
//  - partition_layers: any per-layer costs and bytes. Dynamic programming over (stages, layers):
//    best[s][i] = min over j of max(best[s-1][j], time of layers j..i-1 on stage s-1), over the
//    j whose group fits stage s-1's memory. O(S * L^2) time, O(S * L) memory for S stages and
//    L layers (S = 64, L = 128: about a million steps). Where a stage holds at least one layer
//    at most, and its bytes (and per-stage layer costs) go by its layer count (the tuner's
//    problems), before[j] only grows and stage s-1's time only falls with j: binary searches
//    find the crossing, O(S L log L).
//  - partition_uniform_layers: every layer the same (pipetune's model specs). The optimum is some
//    stage's time at some layer count (E * L values for E distinct extra costs, 3 at most in a
//    pipeline: the first, middle and last stages); binary search over them, a bound being
//    feasible when the most layers each stage can take under it (time and memory) cover the
//    layers. O(E L log(E L) + S log(E L)).
// Both return the same optimum on uniform layers (tests/tuner/layer_partition_test.cpp checks
// both against an exhaustive search of every split on small cases).
#pragma once

#include <limits>
#include <vector>

namespace pipetune::tuner {

struct PartitionProblem {
  int stages = 1;
  std::vector<double> layer_cost;              // per transformer layer, model order (any unit)
  std::vector<double> stage_extra_cost;        // per stage, besides its layers; empty: none
  std::vector<double> layer_static_bytes;      // per layer; empty: no memory limit
  std::vector<double> layer_activation_bytes;  // per layer, per micro-batch in flight
  std::vector<double> stage_in_flight;         // per stage: micro-batches held at its peak
  std::vector<double> stage_extra_bytes;       // per stage, besides its layers
  // Per stage, when the stages differ in what a layer costs or keeps (per-stage recomputation):
  // on stage s, layer i costs stage_layer_cost[s][i] and keeps stage_layer_activation_bytes[s][i]
  // instead of layer_cost[i] and layer_activation_bytes[i]. Empty: the same on every stage.
  // partition_layers and split_cost only (partition_uniform_layers refuses them).
  std::vector<std::vector<double>> stage_layer_cost;
  std::vector<std::vector<double>> stage_layer_activation_bytes;
  double capacity_bytes = 0.0;   // per device; <= 0: no memory limit
  int min_layers_per_stage = 1;  // 0 lets a stage hold no transformer layer
  // Solve by scanning every start of every stage, O(S L^2), even where partition_layers's
  // binary searches apply (at most one layer per stage at least, bytes and per-stage costs by
  // layer count): the reference the tests hold those to.
  bool scan = false;
};

struct LayerPartition {
  bool feasible = false;                                     // some split fits every stage's memory
  std::vector<int> layers;                                   // per stage; sums to the layer count
  double slowest = std::numeric_limits<double>::infinity();  // the slowest stage's time
};

// Throws InputError for sizes that disagree (a per-stage list not `stages` long, per-layer lists
// not the same length) or negative costs or bytes.
LayerPartition partition_layers(const PartitionProblem& problem);

// The same problem with every layer alike: `layers` layers of `layer_cost`, `layer_static_bytes`
// and `layer_activation_bytes` each (the per-layer vectors of `problem` are ignored).
LayerPartition partition_uniform_layers(const PartitionProblem& problem, int layers,
                                        double layer_cost, double layer_static_bytes,
                                        double layer_activation_bytes);

// A split's slowest stage time and whether it fits, for checking a split against the problem.
struct SplitCost {
  bool fits = false;
  double slowest = 0.0;
};
SplitCost split_cost(const PartitionProblem& problem, const std::vector<int>& split);

}  // namespace pipetune::tuner
