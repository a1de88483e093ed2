// How the workspace keeps plans, models and tuner trials as JSON (runs.plan_json and specs_json,
// tuner_trials.plan_json). Every front end writes and reads them through these functions, so the
// CLI reads what the GUI stored and the other way round.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "engine/spec/run_spec.hpp"
#include "engine/spec/training_engine.hpp"
#include "tuner/search/tuning_target.hpp"

namespace pipetune::db {

// The one codec of a ParallelPlan, which every record below keeps under the same keys: tp, pp,
// dp, ep, chunks, micro_batch_size, microbatches, global_batch, schedule, vocab (the search's
// label: none, redis, vocab-1...), layer_split, recompute, stage_recompute (mode names per
// pipeline rank, only when the plan gives them), sequence_parallel, zero_stage.
// A training run's plan (PlanRecord::training) keeps no global_batch (apply_defaults derives it
// from the batch sizes), and runs stored before recompute, sequence_parallel and layer_split were
// kept lack them: read back as none, false and the even split, the plan apply_defaults'ed.
enum class PlanRecord { tuner, training };
nlohmann::json plan_to_json(const spec::ParallelPlan& plan, const std::string& vocab_label,
                            PlanRecord record = PlanRecord::tuner);
// The inverse; InputError naming the field that is missing or wrong. Sets vocab_label.
spec::ParallelPlan plan_from_json(const nlohmann::json& j, std::string& vocab_label,
                                  PlanRecord record = PlanRecord::tuner);

// Every field of the model.
nlohmann::json model_to_json(const spec::ModelSpec& model);
spec::ModelSpec model_from_json(const nlohmann::json& j);  // InputError naming the field

// What a tuner search was asked: presets by the name (or path) the user gave, and the sizes.
using TrialTarget = tuner::TuningTarget;
// A stored trial: the target and the plan.
nlohmann::json trial_json(const TrialTarget& target, const spec::ParallelPlan& plan,
                          const std::string& vocab_label);
void read_trial_json(const nlohmann::json& j, TrialTarget& target, spec::ParallelPlan& plan,
                     std::string& vocab_label);

// A measured run (pipetune train, the GUI's Train page): the plan it trained with (runs.plan_json)
// and the model (runs.specs_json {"model": {...}}).
using TrainingEngine = spec::TrainingEngine;
// The plan's splits, schedule, batch, ZeRO stage, recomputation, sequence parallelism and layer
// split, with the engine it ran on ("backend", "precision", "attention", "gpus" when it ran on
// GPUs, "gemm_inputs" for cuda bf16 and "gelu_epilogue" when on): what calibrate and predict
// cost it as, and whether its ranks shared GPUs.
nlohmann::json training_plan_json(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                                  int steps, std::uint64_t seed, const TrainingEngine& engine = {});
// Its plan (plan_from_json of PlanRecord::training); InputError naming the field.
spec::ParallelPlan training_plan_from_json(const nlohmann::json& j);
// The engine of a stored training plan: cpu / fp32 where it does not say (runs stored before it
// was kept), and without "attention" the default of those days: stored on the cpu, flash (fp32)
// on cuda; the GEMM options off where not said; InputError naming the field when it says
// something else (or an option its engine does not have).
TrainingEngine training_engine_from_json(const nlohmann::json& j);
nlohmann::json training_specs_json(const spec::ModelSpec& model);
// The default name of a measured run: "tiny tp=2 pp=2 dp=2 1f1b".
std::string training_run_name(const spec::ModelSpec& model, const spec::ParallelPlan& plan);
// runs.summary_json of a finished training run: the last iteration's time, steady tokens/s and
// the loss of every step.
nlohmann::json training_summary_json(double iteration_seconds, double tokens_per_s,
                                     const std::vector<double>& losses);

}  // namespace pipetune::db
