// The target of `tune`, `predict` and `export`: a model preset at a sequence length on N GPUs
// of one hardware preset, trained at a global batch. Shared flags and their checks.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "tuner/search/tuning_target.hpp"

namespace pipetune::cli {

// What the user asked for, as flags; stored with each tuner trial (db/store/record_json.hpp).
using TargetArgs = tuner::TuningTarget;
using Target = tuner::ResolvedTarget;

// --model, --hardware --gpus [--nodes-of] or --cluster, --global-batch, --seq
void add_target_options(CLI::App* cmd, TargetArgs& args);
// The flags a target needs: --hardware and --gpus unless --cluster gives them (InputError
// naming the flag; `alternative`, e.g. " or --config RUN", is added to the message).
void require_target_options(const TargetArgs& args, const std::string& alternative = "");
using tuner::plan_summary;
using tuner::resolve_target;

}  // namespace pipetune::cli
