// The target of `tune`, `predict` and `export`: a model preset at a sequence length on N GPUs
// of one hardware preset, trained at a global batch. Shared flags and their checks.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "db/store/record_json.hpp"
#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::cli {

// What the user asked for, as flags; stored with each tuner trial (db/store/record_json.hpp).
using TargetArgs = db::TrialTarget;

struct Target {
  spec::ModelSpec model;
  spec::ClusterSpec cluster;
  std::int64_t global_batch = 0;
};

// --model --hardware --gpus --nodes-of --global-batch --seq
void add_target_options(CLI::App* cmd, TargetArgs& args);
// Loads the presets and checks the numbers; throws InputError naming the flag.
Target resolve_target(const TargetArgs& args);

// "tp=8 pp=4 dp=32 ep=1 mbs=1 1f1b vocab=none recompute=selective zero=1"
std::string plan_summary(const spec::ParallelPlan& plan, const std::string& vocab_label);

}  // namespace pipetune::cli
