// Whether a stored run is a run of a run file: the same model, plan and hardware, as far as the
// workspace records them. A prediction compared with a run of anything else (another model, a
// plan with other splits, a CPU run against a GPU's prediction) gives an error figure that means
// nothing, so front ends refuse the comparison with the first difference.
#pragma once

#include <string>

#include "db/store/store_types.hpp"
#include "engine/spec/run_spec.hpp"

namespace pipetune::db {

// Empty when `stored` (a measured run, or an imported run stored with its plan) matches `run`;
// else the first difference as "what: stored vs run file" ("model: tiny vs llama3-8b",
// "tp: 1 vs 2", "hardware: the cpu engine vs a100-80gb, a GPU"). Compared: the model (every field
// of model_to_json, the name first), the plan (tp, pp, dp, ep, schedule, chunks, vocabulary,
// micro-batches and their size, ZeRO stage, and the recomputation, sequence parallelism and
// layer split where the run records them) and the hardware (a measured run: its engine, which
// must be the run file's backend, precision and attention on a device of the run file's kind;
// an imported run: the hardware it was imported with). What the run does not record is a
// difference too ("model: not recorded vs tiny"). InputError for a stored record that is not
// JSON. Simulated runs are not runs of anything: the caller says so.
std::string difference_from_run_file(const RunRecord& stored, const spec::RunSpec& run);

// Empty when two runs count time in one unit (run_layout's time_unit: seconds, or the cost units
// of a simulation with uniform costs); else why no figure of one compares with one of the other,
// naming both runs and units. What `diff` and the GUI's Compare refuse.
std::string unlike_time_units(const RunRecord& a, const RunRecord& b);

}  // namespace pipetune::db
