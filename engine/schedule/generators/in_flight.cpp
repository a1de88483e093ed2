// What the generators' rules say of a schedule without building it, for the tuner's branch and
// bound: lower bounds on a stage's peak activations (from the warm-ups), and how many overlapped
// pairs a rank runs at most.
#include <algorithm>
#include <string>
#include <vector>

#include "engine/schedule/generators.hpp"
#include "engine/schedule/generators/linear_common.hpp"

namespace pipetune::schedule {

namespace {

// Which warm-up rule bounds a schedule's stages: found once per plan from its name, then applied
// to each rank (the tuner bounds some 10^5 plans).
enum class InFlightRule {
  Skipping,     // skippipe: the ends' 1F1B warm-up, nothing on the middle stages
  SkippingCa,   // skippipe-ca: as little as one micro-batch on the ends
  Everything,   // gpipe, terapipe, layered: every forward before the first backward
  OneFOneB,     // 1f1b, with its vocabulary modes' warm-up
  ZbH1,         // zb-h1: 1F1B's warm-up
  ZbH2,         // zb-h2: the first stage's forwards before a backward can come back
  Interleaved,  // interleaved-1f1b: Megatron's warm-up
  DualPipeV,    // dualpipe-v: 2p chunk forwards
  VBlock,       // v-half and v-min: the building block's least loaded rank
  OneChunk,     // any other schedule: one chunk of one micro-batch
};

InFlightRule in_flight_rule(const GeneratorParams& params) {
  const std::string& name = params.name;
  if (name == "skippipe") return InFlightRule::Skipping;
  if (name == "skippipe-ca") return InFlightRule::SkippingCa;
  if (name == "layered") return InFlightRule::Everything;
  const int chunks = params.chunks > 0 ? params.chunks : 1;
  if (chunks == 1 && schedule_placement(name) == Placement::Linear) {
    if (name == "gpipe" || name == "terapipe") return InFlightRule::Everything;
    if (name == "1f1b") return InFlightRule::OneFOneB;
    if (name == "zb-h1") return InFlightRule::ZbH1;
    if (name == "zb-h2") return InFlightRule::ZbH2;
  }
  if (name == "interleaved-1f1b") return InFlightRule::Interleaved;
  if (name == "dualpipe-v") return InFlightRule::DualPipeV;
  if (name == "v-half" || name == "v-min") return InFlightRule::VBlock;
  return InFlightRule::OneChunk;
}

// zb-h2 (zb_h2.cpp), its first stage: both variants of the greedy run a forward whenever no
// backward has arrived and the budget allows it (the first stage's forwards need no input), one
// after another from time 0. The first backward cannot reach it before micro-batch 0 has gone
// forward through every stage and back, each hop and pass as soon as it can: so every forward
// that starts before then runs, and each holds its activations until a backward. The times are
// summed in the greedy's own order (the end of a pass is its start plus its cost), so the count
// is the greedy's, not an estimate of it. `costs`: the planning costs.
double zb_h2_first_stage(const GeneratorParams& params, const CostTable& costs) {
  const int p = params.stages, m = params.microbatches;
  const double limit = linear::zb_h2_memory_limit(params);
  // Counting stops early for a huge budget and many micro-batches (a lower bound may be lower).
  constexpr double kMostCounted = 65536.0;
  const double most = std::min(static_cast<double>(m), kMostCounted);
  const double hop = costs.p2p_time();
  double forward_end = 0.0;  // micro-batch 0's forward, stage by stage
  for (int r = 0; r < p; ++r)
    forward_end = (r == 0 ? 0.0 : forward_end + hop) + costs.cost(r, OpKind::F);
  // The last stage's backward needs its own forward; each stage before it, the gradient from the
  // stage after it, one hop later.
  double arrival = forward_end;
  if (p > 1) {
    double backward_end = forward_end + costs.cost(p - 1, OpKind::B);
    for (int r = p - 2; r >= 1; --r) backward_end = (backward_end + hop) + costs.cost(r, OpKind::B);
    arrival = backward_end + hop;
  }
  double count = 0.0;
  const double forward = costs.cost(0, OpKind::F);
  // Forward `count` runs while the budget holds count + 1 micro-batches (none freed before).
  for (double now = 0.0;
       count < most && linear::within_zb_h2_budget(count + 1.0, limit) && now < arrival;
       now = now + forward)
    count += 1.0;
  return std::max(count, 1.0);  // the first op of every stage is a forward
}

double least_in_flight(InFlightRule rule, const GeneratorParams& params, int rank,
                       const CostTable* costs) {
  const int p = params.stages, m = params.microbatches;
  if (m < 1) return 0.0;
  const int chunks = params.chunks > 0 ? params.chunks : 1;
  // Before its first backward a rank has run `warmup` forwards and then one more (the first F of
  // the steady state), none of whose activations any op has freed yet.
  auto first_backward_after = [&](int warmup) {
    return static_cast<double>(std::min(m, std::max(0, warmup) + 1));
  };
  switch (rule) {
    // skippipe: a middle stage may be skipped by every micro-batch; the ends run 1F1B with at
    // least its warm-up (skippipe.cpp lengthens it where skips would deadlock). skippipe-ca's
    // planner may hold as little as one micro-batch at a time (a memory limit of 1).
    case InFlightRule::Skipping:
      return rank != 0 && rank != p - 1 ? 0.0 : first_backward_after(p - rank - 1);
    case InFlightRule::SkippingCa:
      return rank != 0 && rank != p - 1 ? 0.0 : 1.0;
    // layered runs every forward of every chunk before its first backward; terapipe every
    // slice's forward, as gpipe does: the slices add up to m.
    case InFlightRule::Everything:
      return m;
    case InFlightRule::OneFOneB:
      return first_backward_after(linear::one_f_one_b_warmup(params.vocab, p, rank));
    case InFlightRule::ZbH1:
      return first_backward_after(p - rank - 1);
    case InFlightRule::ZbH2:
      if (rank == 0 && costs != nullptr && costs->stages.size() == static_cast<std::size_t>(p))
        return zb_h2_first_stage(params, *costs);
      break;
    case InFlightRule::Interleaved: {
      // Megatron's warm-up of 2 (p - r - 1) + (v - 1) G chunk forwards (interleaved_1f1b.cpp),
      // lengthened by at least one (vocab-2) or two (vocab-1) under vocabulary parallelism, then
      // the steady state's first; each chunk's forward holds 1 / v of a micro-batch.
      const int group = params.group_size > 0 ? params.group_size : p;
      const int extra = params.vocab == VocabMode::Vocab1   ? 2
                        : params.vocab == VocabMode::Vocab2 ? 1
                                                            : 0;
      const int warmup = 2 * (p - rank - 1) + (chunks - 1) * group + extra;
      return static_cast<double>(std::min(m * chunks, std::max(0, warmup) + 1)) / chunks;
    }
    // dualpipe-v: phases 1 and 2 run 2 (p - r - 1) + 2 (r + 1) = 2p chunk forwards on every rank
    // before its first backward (dualpipe_v.cpp; it needs m >= 2p).
    case InFlightRule::DualPipeV:
      return std::min(m, p);
    // The V building blocks (v_building_block.hpp) hold a half (V-Half) or a third (V-Min) of
    // 1F1B's micro-batches: on the least loaded rank floor(p / 2) + 1 and floor(2 (p + 3) / 3) / 2,
    // fewer while the first micro-batches fill the block ((m + 1) / 2). The squeeze moves ops only
    // where the peak does not rise, and least_in_flight_test checks these against the simulated
    // peaks for every p up to 64. With vocabulary passes the block is stretched, never squeezed.
    case InFlightRule::VBlock: {
      const double filling = (m + 1) / 2.0;
      const double block =
          params.name == "v-half" ? p / 2 + 1 : static_cast<double>((2 * (p + 3)) / 3) / 2.0;
      return std::min(filling, block);
    }
    // Any schedule: a stage holds one micro-batch from a forward to its backward.
    case InFlightRule::OneChunk:
      break;
  }
  return 1.0 / chunks;
}

}  // namespace

double least_peak_in_flight(const GeneratorParams& params, int rank) {
  return least_in_flight(in_flight_rule(params), params, rank, &params.costs);
}

int most_overlapped_pairs(const GeneratorParams& params, int rank) {
  const int p = params.stages, m = params.microbatches;
  if (!has_overlapped_pairs(params.name) || m < 1) return 0;
  // dualpipe-v (dualpipe_v.cpp): phase 4's m - 2p + r + 1 steps of two pairs (but the turn of
  // the V's first F0 & B1, run apart) and phase 5's p - r - 1 steps of one; the other phases run
  // their ops alone. It needs m >= 2p.
  if (params.name == "dualpipe-v")
    return std::max(0, 2 * (m - 2 * p + rank + 1) + (p - rank - 1) - (rank == p - 1 ? 1 : 0));
  const int chunks = params.chunks > 0 ? params.chunks : 1;
  return m * chunks;  // at most every forward in a pair
}

std::vector<double> least_peaks_in_flight(const GeneratorParams& params) {
  return least_peaks_in_flight(params, params.costs);
}

std::vector<double> least_peaks_in_flight(const GeneratorParams& params,
                                          const CostTable& planning) {
  const InFlightRule rule = in_flight_rule(params);
  std::vector<double> out(static_cast<std::size_t>(std::max(params.stages, 0)));
  for (int r = 0; r < params.stages; ++r)
    out[static_cast<std::size_t>(r)] = least_in_flight(rule, params, r, &planning);
  return out;
}

}  // namespace pipetune::schedule
