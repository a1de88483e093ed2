// skippipe: partial pipelining (SkipPipe, arXiv 2502.19913; seed_techniques.md 6). Each
// micro-batch takes a path through a subset of the stages: it keeps the first (the embedding) and
// the last (the loss), and skips s = round(ratio * p) of the p - 2 stages between, capped at
// p - 2. Its activation goes straight from the stage before a skipped one to the stage after, and
// its backward retraces the path. Paths are dealt round robin, micro-batch i skipping the middle
// stages i s, i s + 1, ..., i s + s - 1 (mod p - 2), so every middle stage trains on as many
// micro-batches as another, within one: SkipPipe's stage-load constraint. (SkipPipe also reorders
// stages and searches paths against node memory and time collisions; neither is built here.)
//
// Each rank runs the micro-batches that visit it in 1F1B order. With skips a rank's usual
// warm-up (p - r - 1 forwards) can deadlock, since the next rank a micro-batch visits is not
// always r + 1: every warm-up is lengthened (by 1, 2, 4, ...) until the schedule validates, at
// worst to GPipe's order (every forward first), which always does.
//
// Skipping changes the function trained: a micro-batch's loss no longer goes through every
// layer, so its losses are not the full pipeline's. SkipPipe reports convergence kept at skip
// ratios of about 25-33% on LLaMa 500M-8B, and up to 55% lower iteration time.
#include <algorithm>
#include <cmath>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/generators/linear_common.hpp"
#include "engine/schedule/generators/skippipe_paths.hpp"
#include "engine/schedule/validator.hpp"

namespace pipetune::schedule {

namespace {

constexpr double kDefaultSkipRatio = 1.0 / 3.0;  // SkipPipe's repository: 2 of 6 stages

// Round-robin paths: micro-batch mb skips the middle stages mb s, ..., mb s + s - 1 (mod p - 2)
// and runs the rest in order.
std::vector<std::vector<int>> round_robin_paths(int p, int m, int skipped) {
  std::vector<std::vector<int>> paths(static_cast<std::size_t>(m));
  const int middle = p - 2;
  std::vector<char> skips(static_cast<std::size_t>(p));
  for (int mb = 0; mb < m; ++mb) {
    std::fill(skips.begin(), skips.end(), 0);
    for (int j = 0; j < skipped; ++j)
      skips[static_cast<std::size_t>(
          1 + static_cast<int>((static_cast<std::int64_t>(mb) * skipped + j) % middle))] = 1;
    for (int g = 0; g < p; ++g)
      if (!skips[static_cast<std::size_t>(g)]) paths[static_cast<std::size_t>(mb)].push_back(g);
  }
  return paths;
}

// The middle stages a path skips: round(ratio * p), capped at p - 2.
int skipped_stages(const GeneratorParams& params) {
  const int p = params.stages;
  const double ratio = params.skip_ratio.value_or(kDefaultSkipRatio);
  return std::clamp(static_cast<int>(std::lround(ratio * p)), 0, std::max(0, p - 2));
}

}  // namespace

Schedule generate_skippipe(const GeneratorParams& params) {
  constexpr std::string_view kName = "skippipe";
  linear::check_sizes(kName, params);
  linear::require_single_chunk(kName, params);
  linear::require_no_vocab(kName, params);
  const int p = params.stages;
  const int m = params.microbatches;
  const int skipped = skipped_stages(params);
  Schedule s = linear::empty_schedule(kName, p, m, 1, VocabMode::None);
  if (skipped > 0) s.paths = round_robin_paths(p, m, skipped);
  // The micro-batches each rank runs, in order.
  std::vector<std::vector<int>> visiting(static_cast<std::size_t>(p));
  for (int mb = 0; mb < m; ++mb)
    for (int r = 0; r < p; ++r)
      if (s.visits(r, mb)) visiting[static_cast<std::size_t>(r)].push_back(mb);
  // Warm-ups lengthened by 0, 1, 2, 4, ...: a few validations at most, whatever m.
  for (int extra = 0;; extra = extra == 0 ? 1 : 2 * extra) {
    for (int r = 0; r < p; ++r) {
      const std::vector<int>& mbs = visiting[static_cast<std::size_t>(r)];
      std::vector<Op>& ops = s.ranks[static_cast<std::size_t>(r)];
      ops.clear();
      linear::append_one_f_one_b(ops, static_cast<int>(mbs.size()), p - r - 1 + extra, OpKind::BW);
      for (Op& op : ops) op.microbatch = mbs[static_cast<std::size_t>(op.microbatch)];
    }
    // Every forward first (extra >= m) is GPipe's order, which cannot deadlock.
    if (extra >= m) return linear::validated(std::move(s), params);
    try {
      validate(s);
      return s;
    } catch (const DeadlockError&) {
    }
  }
}

Schedule generate_skippipe_ca(const GeneratorParams& params) {
  constexpr std::string_view kName = "skippipe-ca";
  linear::check_sizes(kName, params);
  linear::require_single_chunk(kName, params);
  linear::require_no_vocab(kName, params);
  const int p = params.stages;
  const int m = params.microbatches;
  const CostTable costs = linear::checked_planning_costs(kName, params);
  skip_paths::PathProblem problem;
  problem.stages = p;
  problem.microbatches = m;
  problem.middle_visits = std::max(0, p - 2) - skipped_stages(params);
  for (int r = 0; r < p; ++r) {
    const double slow = costs.stage(r).slowdown;
    problem.forward.push_back(costs.cost(r, OpKind::F) * slow);
    problem.backward.push_back(costs.cost(r, OpKind::BW) * slow);
  }
  problem.transfer.resize(static_cast<std::size_t>(p) * static_cast<std::size_t>(p));
  for (int a = 0; a < p; ++a)
    for (int b = 0; b < p; ++b)
      problem.transfer[static_cast<std::size_t>(a) * static_cast<std::size_t>(p) +
                       static_cast<std::size_t>(b)] = a == b ? 0.0 : costs.transfer_time(a, b);
  // A stage holds at most what 1F1B's first stage holds (p micro-batches), or the plan's limit.
  problem.memory = params.memory_limit > 0.0
                       ? std::max(1, static_cast<int>(std::floor(params.memory_limit)))
                       : std::min(p, m);
  skip_paths::PathPlan plan = skip_paths::plan_paths(problem);
  Schedule s = linear::empty_schedule(kName, p, m, 1, VocabMode::None);
  // A path through every stage in order is the full pipeline's: no paths then.
  bool full = true;
  for (const std::vector<int>& path : plan.paths)
    if (static_cast<int>(path.size()) != p || !std::is_sorted(path.begin(), path.end()))
      full = false;
  if (!full) s.paths = std::move(plan.paths);
  for (int r = 0; r < p; ++r)
    for (const skip_paths::TimedOp& t : plan.ranks[static_cast<std::size_t>(r)])
      s.ranks[static_cast<std::size_t>(r)].push_back(t.op);
  return linear::validated(std::move(s), params);
}

}  // namespace pipetune::schedule
