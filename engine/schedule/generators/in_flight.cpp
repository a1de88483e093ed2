// Lower bounds on a stage's peak activations from the generators' warm-up rules, for the tuner's
// branch and bound: a plan's memory can be bounded without generating its schedule.
#include <algorithm>

#include "engine/schedule/generators.hpp"
#include "engine/schedule/generators/linear_common.hpp"

namespace pipetune::schedule {

double least_peak_in_flight(const GeneratorParams& params, int rank) {
  const int p = params.stages, m = params.microbatches;
  if (m < 1) return 0.0;
  const int chunks = params.chunks > 0 ? params.chunks : 1;
  // Before its first backward a rank has run `warmup` forwards and then one more (the first F of
  // the steady state), none of whose activations any op has freed yet.
  auto first_backward_after = [&](int warmup) {
    return static_cast<double>(std::min(m, std::max(0, warmup) + 1));
  };
  // skippipe: a middle stage may be skipped by every micro-batch; the ends run 1F1B with at least
  // its warm-up (skippipe.cpp lengthens it where skips would deadlock).
  if (skips_stages(params.name)) {
    if (rank != 0 && rank != p - 1) return 0.0;
    // skippipe-ca's planner may hold as little as one micro-batch at a time (a memory limit of 1).
    if (params.name == "skippipe-ca") return 1.0;
    return first_backward_after(p - rank - 1);
  }
  // layered runs every forward of every chunk before its first backward.
  if (params.name == "layered") return m;
  if (chunks == 1 && schedule_placement(params.name) == Placement::Linear) {
    // terapipe runs every slice's forward first, as gpipe does: the slices add up to m.
    if (params.name == "gpipe" || params.name == "terapipe") return m;
    if (params.name == "1f1b")
      return first_backward_after(linear::one_f_one_b_warmup(params.vocab, p, rank));
    if (params.name == "zb-h1") return first_backward_after(p - rank - 1);
  }
  // Any schedule: a stage holds one micro-batch from a forward to its backward.
  return 1.0 / chunks;
}

}  // namespace pipetune::schedule
