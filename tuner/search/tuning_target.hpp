// The target of a tuning (what `tune`, `predict`, `export` and the GUI's Tune page ask for): a
// model preset at a sequence length on N GPUs of one hardware preset, trained at a global batch;
// its resolution into specs, and the one-line summary of a plan both front ends print.
#pragma once

#include <cstdint>
#include <string>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::tuner {

// As the user gave it (preset names or TOML paths); stored with each trial of a search.
struct TuningTarget {
  std::string model;
  std::string hardware;
  int gpus = 0;
  int nodes_of = 0;  // GPUs per node; 0 = the hardware's
  std::int64_t global_batch = 0;
  std::int64_t seq = 0;  // 0 = the model's
  // A cluster preset or TOML file: its hardware, GPUs, nodes and node groups (NICs that differ
  // between groups). Given instead of hardware, gpus and nodes_of.
  std::string cluster;
};

struct ResolvedTarget {
  spec::ModelSpec model;
  spec::ClusterSpec cluster;
  std::int64_t global_batch = 0;
};

// Loads the presets and checks the numbers and the model and cluster they make (8 GPUs in nodes
// of 3...); InputError naming the field ("gpus must be positive (got 0)").
ResolvedTarget resolve_target(const TuningTarget& target);

// "tp=8 pp=4 dp=32 mbs=1 1f1b vocab=none recompute=selective zero=1" (ep and v when > 1; the
// layer split, "split=19/21/21/19", when the plan gives one; per-stage recomputation as one
// letter a stage, "recompute=f/f/s/n"; what is offloaded to host memory, "offload=act", "opt" or
// "act+opt", when the plan offloads).
std::string plan_summary(const spec::ParallelPlan& plan, const std::string& vocab_label);

}  // namespace pipetune::tuner
