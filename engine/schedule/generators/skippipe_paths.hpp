// skippipe-ca's path search: SkipPipe's collision-aware partial pipelining (arXiv 2502.19913,
// seed_techniques.md 6). SkipPipe plans each micro-batch's path through the stages as multi-agent
// path finding: the agents are the micro-batches, a path keeps the first stage (the embedding)
// and the last (the loss) and runs k of the middle stages in any order, and the constraints are
// SkipPipe's three:
//   - stage load (its type 2): every middle stage runs at most ceil(m k / (p - 2)) micro-batches,
//     so the stages train on as many samples as one another, within one;
//   - memory (type 1): no stage holds more than `memory` micro-batches between a forward and its
//     backward;
//   - time collisions (type 3, SkipPipe's TC2): no two passes overlap on a stage.
// SkipPipe resolves conflicts with conflict-based search; this planner is prioritized planning,
// the other standard answer: micro-batches are planned one after another, each against a table
// of the stage times the earlier ones reserved, so no path collides with an earlier one by
// construction. Each micro-batch's path is the one that finishes its backward soonest, found by
// depth-first branch and bound over ordered subsets of the middle stages (complete while the
// search budget lasts). Prioritized planning is not optimal over all micro-batches together (CBS
// is, at exponential cost); PathPlan::exhaustive says whether every micro-batch's own search was.
//
// Complexity: a micro-batch's search visits at most P(p - 2, k) leaves, each timed in
// O(k log m); the budget caps the leaves per micro-batch.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/schedule/op.hpp"

namespace pipetune::schedule::skip_paths {

struct PathProblem {
  int stages = 1;         // p
  int microbatches = 1;   // m
  int middle_visits = 0;  // k: the middle stages each path runs, of p - 2
  // Per stage: one forward, and one backward (input and weight gradients together, BW).
  std::vector<double> forward;
  std::vector<double> backward;
  // One activation or gradient between two stages, [source * p + dest]; empty = none.
  std::vector<double> transfer;
  int memory = 1;                     // micro-batches a stage may hold in flight
  std::int64_t search_budget = 2048;  // complete paths timed per micro-batch, at most
};

// A pass as planned: when it starts and ends.
struct TimedOp {
  Op op;
  double start = 0.0;
  double end = 0.0;
};

struct PathPlan {
  std::vector<std::vector<int>> paths;      // each micro-batch's stages, in order
  std::vector<std::vector<TimedOp>> ranks;  // each stage's passes in order of start
  double makespan = 0.0;                    // the last backward's end
  bool exhaustive = true;                   // every micro-batch's search ran to its end
};

// Plans the paths and each stage's op order. Throws std::invalid_argument for sizes that do not
// fit (k > p - 2, costs not one per stage, memory < 1): generate() checks the plan before.
PathPlan plan_paths(const PathProblem& problem);

}  // namespace pipetune::schedule::skip_paths
