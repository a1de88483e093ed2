// How a stored run's ranks form pipeline stages, which decides the words its reports use. A run
// with a plan (measured and simulated runs, imported runs given one) groups its ranks into
// stages by the plan, in Megatron's tp-dp-pp numbering (what stored runs use whatever the plan's
// rank order): stage = rank / (tp * dp), or with per-stage layouts (a plan.stage_tp whose entries
// differ) stage s holds the stage_tp[s] * dp ranks after stage s - 1's. An imported run without one
// has stages only when its profile names pipeline phases (F/B/W... ranges, e.g. PiPPy's) or its
// point-to-point partners chain three or more ranks into a line (the importer then renumbers
// them in stage order: specs_json "inferred_pipeline"), one stage per rank; otherwise it has none,
// and its reports speak of per-rank busy and idle GPU time, never of stages and pipeline bubbles:
// data-parallel ranks are not pipeline stages.
#pragma once

#include <string>
#include <vector>

#include "db/store/store_types.hpp"
#include "profiler/trace.hpp"

namespace pipetune::db {

struct RunLayout {
  bool pipeline = false;    // the run's ranks are pipeline stages
  int ranks_per_stage = 1;  // tp * dp of the plan (stage 0's with per-stage layouts); 1 when
                            // inferred or none
  // Per-stage layouts: the plan's stage_tp when its entries differ (pp entries), and its dp;
  // empty when every stage holds ranks_per_stage ranks.
  std::vector<int> stage_tp;
  int dp = 1;
  // The plan's schedule lets micro-batches skip stages and reorder the middle ones (skippipe,
  // skippipe-ca): the critical path infers each pass's producer from the passes' times.
  bool reordered_paths = false;
  std::string time_unit = "s";
  std::string source;  // "plan", "point-to-point partners in the profile", "pipeline phases in
                       // the profile", or "none"
};

RunLayout run_layout(const RunRecord& run, const profiler::Trace& trace);

// The pipeline stage of the run's rank `rank`: rank / ranks_per_stage, or with per-stage layouts
// spec::pp_rank_of of the plan in tp-dp-pp order; -1 for a rank beyond the plan's ranks then.
int stage_of_rank(const RunLayout& layout, int rank);

// How many ranks stage `stage` holds: ranks_per_stage, or stage_tp[stage] * dp with per-stage
// layouts (0 for a stage the plan has not).
int ranks_of_stage(const RunLayout& layout, int stage);

// The specs_json key of an import whose ops waited for their nested communication
// (profiler::Trace::ops_wait_for_nested_comm), value "wait".
inline constexpr const char* kNestedCommunicationSpec = "nested_communication";

// What the run's record says about reading its spans, set on a trace loaded from it: the run's
// kind and ops_wait_for_nested_comm. Every loader of a stored trace applies it.
void apply_run_record(const RunRecord& run, profiler::Trace& trace);

}  // namespace pipetune::db
