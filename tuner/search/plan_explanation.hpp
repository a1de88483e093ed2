// Why one plan beat another (`pipetune tune --explain`): both plans evaluated by the cost model,
// the schedule simulator and the memory model (tuner/predict/evaluate.hpp), each iteration split
// into what its time goes to, the difference between the two split the same way, the link whose
// traffic takes longest in each, and the plan settings that differ. Every figure comes from the
// models; nothing is hand-written.
//
// A plan's iteration = the simulated pipeline + exposed data-parallel communication after it +
// the optimizer step (evaluate.hpp). The pipeline is split on its binding stage, the pipeline rank
// with the most compute-stream time (the simulator's StageSummary::busy): its busy time, split in
// the proportions of its op costs into compute (GEMMs, attention, memory-bound work, the
// vocabulary passes), exposed TP communication, EP all-to-all and ZeRO-2/3 communication the
// passes (or the other op of an overlapped F&B pair) do not hide, and its bubble (the pipeline's
// makespan minus that busy time: waiting for other stages and for point-to-point transfers). So the
// parts of each plan sum to its iteration time, and the parts of the difference to the difference
// of the iteration times.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "tuner/predict/evaluate.hpp"

namespace pipetune::tuner {

// Seconds of one iteration by what they go to (or, in PlanExplanation::difference, the first
// plan's minus the second's).
struct TimeParts {
  double compute = 0.0;        // the binding stage's GEMMs, attention, memory-bound work
  double tp_comm = 0.0;        // its TP collectives not hidden behind GEMMs
  double ep_comm = 0.0;        // its expert-parallel all-to-all
  double sharded_comm = 0.0;   // its ZeRO-2/3 communication the passes do not hide
  double bubble = 0.0;         // pipeline time minus the binding stage's busy time
  double data_parallel = 0.0;  // exposed data-parallel communication after the pipeline
  double optimizer = 0.0;      // the slowest stage's optimizer step
  double busy() const { return compute + tp_comm + ep_comm + sharded_comm; }
  double pipeline() const { return busy() + bubble; }
  double total() const { return pipeline() + data_parallel + optimizer; }
};

// The traffic of one process group (or pipeline hop) and the link it crosses.
struct LinkUse {
  std::string group;  // "tp", "dp", "ep", "pipeline" (a hop), "embedding" (tied copies)
  // "all-reduce", "reduce-scatter + all-gather", "send/recv", or for a hop between stages of
  // different tp "reshard tp 2->4 (2 copies forward, 1 back)" (per-stage layouts)
  std::string collective;
  int stage = 0;        // the pipeline rank whose group it is (a hop: the sending rank)
  int peer_stage = -1;  // a hop or the tied embedding: the other rank; else -1
  int members = 1;
  bool inter_node = false;
  int members_per_node = 1;
  // Bytes/s per device per direction: the slowest NIC the group touches, as rated (0 when the
  // group stays inside a node), and the bandwidth its traffic moves at (ring bus bandwidth of
  // the collective, or the hop's link; bus efficiencies included).
  double nic_bandwidth = 0.0;
  double bandwidth = 0.0;
  double time = 0.0;  // seconds of this traffic per iteration, hidden behind compute or not
};

struct PlanBreakdown {
  spec::ParallelPlan plan;  // with spec::apply_defaults
  bool feasible = false;
  double iteration_time = 0.0;
  double pipeline_time = 0.0;
  double bubble_ratio = 0.0;  // the simulator's, over all pipeline ranks
  int binding_stage = 0;      // the pipeline rank with the most busy time (the first of equals)
  TimeParts parts;            // parts.total() == iteration_time
  // The group whose traffic takes longest per iteration (for the data-parallel group of an MoE
  // stage, the slower of its dense and expert groups); empty when every group is one device.
  std::optional<LinkUse> busiest_link;
};

struct SettingDifference {
  std::string setting;  // a ParallelPlan field name: "tp", "microbatches", "layer_split", ...
  std::string first, second;
};

struct PlanExplanation {
  PlanBreakdown first, second;  // the better plan (rank 1) and the runner-up
  TimeParts difference;         // first.parts - second.parts, part by part
  std::vector<SettingDifference> settings;
  // Seconds the first plan saves per iteration (negative when it is slower).
  double margin() const { return second.iteration_time - first.iteration_time; }
};

// Evaluates both plans on the cluster (evaluate_plan with `options`) and explains the
// difference. Throws as evaluate_plan does for an invalid plan (SpecError / ScheduleError).
PlanExplanation explain_plans(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                              const spec::ParallelPlan& first, const spec::ParallelPlan& second,
                              const EvaluateOptions& options = {});

// One plan's breakdown from its evaluation (`plan` with defaults applied, as evaluated).
PlanBreakdown plan_breakdown(const spec::ClusterSpec& cluster, const spec::ParallelPlan& plan,
                             const PlanEvaluation& evaluation);

// The settings in which two plans differ (defaults applied), in ParallelPlan's field order. The
// layer split and the node group order compare as they take effect (an empty split is the even
// one, an empty order the listed one, stage_tp each stage's tp where either plan's stages differ);
// recomputation compares per stage ("recompute": one mode
// name, or the per-stage list where stages differ); offload as offload_activations and
// offload_optimizer, "true" or "false".
std::vector<SettingDifference> setting_differences(const spec::ModelSpec& model,
                                                   const spec::ClusterSpec& cluster,
                                                   const spec::ParallelPlan& first,
                                                   const spec::ParallelPlan& second);

// A few lines for a terminal: the margin and its parts, each plan's binding stage and where its
// time goes, each plan's busiest link, and the settings that differ.
std::string explanation_text(const PlanExplanation& e);

}  // namespace pipetune::tuner
