// Schedule generators: build a Schedule from a few parameters (and, for the cost-aware ones,
// per-stage op costs). Every generated schedule passes the validator before it is returned.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/schedule/costs.hpp"
#include "engine/schedule/schedule.hpp"

namespace pipetune::schedule {

struct GeneratorParams {
  std::string name = "1f1b";  // one of schedule_names()
  int stages = 1;             // p
  int microbatches = 1;       // m
  int chunks = 0;             // v; 0 = the schedule's default (1 linear, 2 for V schedules)
  int group_size = 0;         // interleaved-1f1b: micro-batch group size G; 0 = p
  VocabMode vocab = VocabMode::None;
  // Per-stage costs for the cost-aware generators; empty = unit costs (F = B = W = 1).
  CostTable costs;
  // Activation budget per stage in micro-batches (one micro-batch through one stage's worth of
  // layers) for memory-bounded generators (zb-h2, zb-v); 0 = the schedule's default.
  double memory_limit = 0.0;
  // Token slices per micro-batch (terapipe): 0 = the schedule's default (default_slices). The
  // schedule's micro-batch index then counts slices (Schedule::slices).
  int slices = 0;
  // Tokens of each slice, summing to the sequence length (uneven slices, TeraPipe's dynamic
  // programming); empty = equal slices. Its size is the number of slices.
  std::vector<int> slice_tokens;
  // Partial pipelining (skippipe): the fraction of the pipeline's stages each micro-batch skips
  // (SkipPipe's skip ratio: skipped stages / stages), in [0, 1); unset = the schedule's default,
  // 1/3.
  std::optional<double> skip_ratio;
  // Layered gradient reduction: each layer group's data-parallel gradient reduction becomes an op
  // (OpKind::R) right after the group's last weight-gradient pass, overlapping the backwards that
  // follow (add_gradient_reductions). The layered schedule always has them.
  bool layered_reduction = false;
  // Whether the generator proves the schedule free of deadlock (validate()). A caller that runs
  // the schedule through execute() itself (the simulator) may leave it to that run: execute()
  // throws DeadlockError on exactly the same schedules, since whether every op can run does not
  // depend on when each one ends. The structural checks are made either way.
  bool prove_deadlock_free = true;
  // Whether the generator checks what it built (validate_generated). generate() leaves it to
  // itself where it adds the layered reductions: it checks the whole schedule once they are in.
  bool check_generated = true;
};

// A generator's last check: validate(s), or validate_structure(s) when
// !params.prove_deadlock_free.
void validate_generated(const Schedule& s, const GeneratorParams& params);

// Names accepted by generate(), in a stable order.
const std::vector<std::string_view>& schedule_names();
// Where the schedule puts layer groups (V schedules: VShape). Throws for an unknown name.
Placement schedule_placement(std::string_view name);
// Schedules that accept vocab-1 / vocab-2 / interlaced.
bool supports_vocab(std::string_view name, VocabMode vocab);
// Layer groups per rank when a plan does not say: 2 for interleaved-1f1b, layered and the V
// schedules, else 1 (what generate() does with chunks = 0). Throws for an unknown name.
int default_chunks(std::string_view name);
// Whether the generator's op order depends on the op costs it is given (zb-h1, zb-h2, zb-v and
// every vocabulary mode); the others give the same schedule for any costs.
bool uses_costs(std::string_view name, VocabMode vocab);
// Token slices per micro-batch when a plan does not say: 4 for terapipe, 1 for every other
// schedule (only terapipe cuts micro-batches into slices). Throws for an unknown name.
int default_slices(std::string_view name);
bool supports_slices(std::string_view name);
// The token slices a schedule cuts each micro-batch into, from what a plan says: as many as
// `slice_tokens` names, else `slices`, else the schedule's default (1 for a name that takes no
// slices, or one that is unknown: the registry reports that).
int slice_count(std::string_view name, int slices, const std::vector<int>& slice_tokens);
// Whether the schedule's micro-batches skip stages (skippipe, skippipe-ca): it then trains a
// different function from the full pipeline, and the search takes it only when asked for by name.
bool skips_stages(std::string_view name);
// Whether the schedule has overlapped pairs (Op::overlaps_previous): dualpipe-v's "F & B" steps.
bool has_overlapped_pairs(std::string_view name);
// Whether the schedule reduces each layer group's gradients as an op (OpKind::R) whatever the
// plan says: layered. Any other takes them from GeneratorParams::layered_reduction.
bool always_reduces_per_group(std::string_view name);

// The transformer ops of generate(params)'s schedule alone (F, B, W, BW and the layered
// reductions), in its order on every rank, as a schedule without vocabulary parallelism, for the
// vocabulary-parallel schedules whose transformer order does not depend on the costs: v-half and
// 1f1b under vocab-1 and vocab-2 (fixed orders), interleaved-1f1b under vocab-1 and vocab-2 (the
// shortest warm-up its planner places the passes around, which depends on the sizes only).
// The vocabulary passes only add ops and dependencies around that order (the last group's
// backward waits for a barrier its own forward precedes), so this schedule's simulated time is a
// lower bound of the whole schedule's under the same costs. nullopt for every other schedule and
// mode (interlaced chooses between orders by the costs). For the tuner's bounds.
std::optional<Schedule> transformer_ops_schedule(const GeneratorParams& params);

// A lower bound on the activations stage `rank` holds at its peak, in the simulator's units
// (micro-batches through all of the stage's layers; a chunk's forward adds 1 / chunks), implied by
// the generator's warm-up rule: exact for gpipe, terapipe, layered, 1f1b (all vocabulary modes) and
// zb-h1, at least the 1F1B warm-up on skippipe's first and last stages and nothing on its middle
// ones, one chunk of one micro-batch for the others. With planning costs (params.costs, which
// generate() plans with), also what zb-h2's greedy makes its first stage hold before the first
// backward can reach it; without them, a bound for any costs. For the tuner's bounds; no schedule
// is built.
double least_peak_in_flight(const GeneratorParams& params, int rank);
// least_peak_in_flight of every rank, 0 to stages - 1.
std::vector<double> least_peaks_in_flight(const GeneratorParams& params);
// The same with `planning` as the planning costs (params.costs is not read): for a caller that
// holds the plan's cost table and would otherwise copy it into params.
std::vector<double> least_peaks_in_flight(const GeneratorParams& params, const CostTable& planning);

// The most overlapped pairs (Op::overlaps_previous) rank `rank` runs: the generator's own count
// where it is known (dualpipe-v), else every forward's; 0 for a schedule without pairs. For the
// tuner's bounds, which credit each pair with the communication it may hide.
int most_overlapped_pairs(const GeneratorParams& params, int rank);

// Builds and validates a schedule. Throws ScheduleError (an InputError) for an unknown name
// (listing the valid ones), non-positive sizes, too few micro-batches for the schedule, chunks
// invalid for it, a vocabulary mode it does not support, or an option it does not read (a
// group size other than interleaved-1f1b's, a memory limit other than zb-h2's and zb-v's, token
// slices other than terapipe's);
// InputError for costs check_costs refuses.
Schedule generate(const GeneratorParams& params);

// The costs a generator plans with: params.costs, or unit costs when it is empty.
CostTable planning_costs(const GeneratorParams& params);

// Individual generators (engine/schedule/generators/*.cpp). They expect params already checked
// for positive sizes by generate(), and throw ScheduleError for their own rules.
Schedule generate_gpipe(const GeneratorParams& params);
Schedule generate_1f1b(const GeneratorParams& params);  // also vocab-1/-2/interlaced
Schedule generate_interleaved_1f1b(const GeneratorParams& params);
Schedule generate_zb_h1(const GeneratorParams& params);
Schedule generate_zb_h2(const GeneratorParams& params);
Schedule generate_zb_v(const GeneratorParams& params);
Schedule generate_v_half(const GeneratorParams& params);  // also vocab-1/-2
Schedule generate_v_min(const GeneratorParams& params);
Schedule generate_dualpipe_v(const GeneratorParams& params);
Schedule generate_terapipe(const GeneratorParams& params);
Schedule generate_skippipe(const GeneratorParams& params);
Schedule generate_skippipe_ca(const GeneratorParams& params);  // skippipe_paths.hpp
Schedule generate_layered(const GeneratorParams& params);
// Their transformer_ops_schedule, for params under vocab-1 or vocab-2 (checked as the
// generators check them).
Schedule transformer_ops_of_1f1b_vocab(const GeneratorParams& params);
Schedule transformer_ops_of_interleaved_1f1b(const GeneratorParams& params);
Schedule transformer_ops_of_v_half(const GeneratorParams& params);

}  // namespace pipetune::schedule
