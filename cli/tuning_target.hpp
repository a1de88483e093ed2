// The target of `tune`, `predict` and `export`: a model preset at a sequence length on N GPUs
// of one hardware preset, trained at a global batch. Shared flags and their checks.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::cli {

struct TargetArgs {
  std::string model;
  std::string hardware;
  int gpus = 0;
  int nodes_of = 0;  // GPUs per node; 0 = the hardware's
  std::int64_t global_batch = 0;
  std::int64_t seq = 0;  // 0 = the model's
};

struct Target {
  spec::ModelSpec model;
  spec::ClusterSpec cluster;
  std::int64_t global_batch = 0;
};

// --model --hardware --gpus --nodes-of --global-batch --seq
void add_target_options(CLI::App* cmd, TargetArgs& args);
// Loads the presets and checks the numbers; throws InputError naming the flag.
Target resolve_target(const TargetArgs& args);

// The plan as JSON: tp, pp, dp, ep, chunks, micro_batch_size, microbatches, global_batch,
// schedule, vocab, layer_split, recompute, sequence_parallel, zero_stage.
nlohmann::json plan_to_json(const spec::ParallelPlan& plan, const std::string& vocab_label);
// The inverse of plan_to_json; InputError naming the field that is missing or wrong. Returns the
// plan and sets vocab_label.
spec::ParallelPlan plan_from_json(const nlohmann::json& j, std::string& vocab_label);

// What a stored tuner trial keeps: the target as the user gave it and the plan.
nlohmann::json trial_json(const TargetArgs& target, const spec::ParallelPlan& plan,
                          const std::string& vocab_label);
// Reads it back: the target's arguments (reloaded with resolve_target) and the plan.
void read_trial_json(const nlohmann::json& j, TargetArgs& target, spec::ParallelPlan& plan,
                     std::string& vocab_label);

// "tp=8 pp=4 dp=32 ep=1 mbs=1 1f1b vocab=none recompute=selective zero=1"
std::string plan_summary(const spec::ParallelPlan& plan, const std::string& vocab_label);

}  // namespace pipetune::cli
