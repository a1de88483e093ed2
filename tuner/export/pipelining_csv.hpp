// A pipetune Schedule as torch.distributed.pipelining's compute-only schedule CSV, the file
// torchtitan loads with `pipeline_parallel_schedule_csv` into a _PipelineScheduleRuntime
// (torchtitan/distributed/pipeline_parallel.py@238fa99:158-235 build_pipeline_schedule).
//
// Format (pytorch/pytorch torch/distributed/pipelining/schedules.py@1fd7abc, _Action.from_str
// and PipelineScheduleMulti._load_csv): one row per pipeline rank, row i = rank i, cells in
// execution order; a cell is <stage><type><micro-batch>, e.g. "3F0". Types: F forward, I
// backward for the input only, W backward for the weights only, B full backward. The stage is
// the global stage (layer group) index, not the rank's local chunk.
//
// pipetune op -> action: F -> F, B (input gradient) -> I, W -> W, BW (fused) -> B; the stage of
// (rank, chunk) is Schedule::group_of, which places groups as torchtitan does (loop: rank +
// chunk * pp; V: rank and 2pp-1-rank). Vocabulary ops (S, T, IF, IB) have no action. An
// overlapped pair (Op::overlaps_previous) is one OVERLAP_F_B cell holding both actions,
// "(1F3;2B0)OVERLAP_F_B" (_Action.__repr__ with sub_actions). A layer group's gradient reduction
// (R) has no cell: torch's pipeline stages reduce their gradients after their own last backward
// (schedules.py _add_reduce_grad places REDUCE_GRAD there), which is where pipetune puts R.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "engine/schedule/schedule.hpp"
#include "tuner/export/exporters.hpp"

namespace pipetune::tuner {

struct PipeliningAction {
  int stage = 0;
  char type = 'F';  // F, I, W or B
  int microbatch = 0;
  // The second action of an OVERLAP_F_B cell: it runs together with the action before it.
  bool overlaps_previous = false;
  friend bool operator==(const PipeliningAction&, const PipeliningAction&) = default;
};
using PipeliningSchedule = std::vector<std::vector<PipeliningAction>>;  // [rank] -> actions

std::string action_label(const PipeliningAction& a);  // "3F0"

// Throws InputError for a schedule with vocabulary ops.
PipeliningSchedule pipelining_actions(const schedule::Schedule& s);
// CSV text: one line per rank, cells joined by ','.
std::string pipelining_csv(const schedule::Schedule& s);
// Parses a compute-only CSV strictly (the whole cell must be one action; torch's regex takes a
// prefix). Empty cells are skipped, as torch reads them as no action. Throws InputError naming
// the row and cell of a malformed action.
PipeliningSchedule parse_pipelining_csv(std::string_view text);

// The schedule the tuner predicted for the request's plan: the plan's generator with the op costs
// predict and tune evaluate it with (as tuner/run_setup.cpp builds it).
schedule::Schedule predicted_schedule(const ExportRequest& request);

}  // namespace pipetune::tuner
