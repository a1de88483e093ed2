// Unreliable peers in the cost table (SWARM, ATOM): the faults a cluster file gives its nodes
// ([[faults]]: slowdowns and failures), as each pipeline stage of a plan meets them through the
// plan's placement. tuner/sim/simulator.hpp says what the simulator does with them.
#pragma once

#include "engine/schedule/costs.hpp"
#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "tuner/cost/execution.hpp"

namespace pipetune::tuner {

// Unreliable peers: each stage's slowdown and failures from the faults of the nodes its devices
// are on (its slowest device; every failure of any of its devices, since the pipeline of that
// replica bounds the synchronous step), and the re-routing pool, the stage's data-parallel
// replicas (each failure counts the replicas it is the first to take down).
void set_fault_costs(schedule::CostTable& table, const spec::ClusterSpec& cluster,
                     const spec::ParallelPlan& plan, const ExecutionOptions& exec);

}  // namespace pipetune::tuner
