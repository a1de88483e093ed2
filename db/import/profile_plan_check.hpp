// Whether an imported profile can be the run of the plan it is stored with (the plan given with
// an import): the checks both front ends need, each an InputError naming the profile's figure
// and the plan's.
#pragma once

#include "db/import/imported_profile.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::db {

// Ranks: the profile's number of ranks is the plan's world, tp*pp*dp or dp * sum(stage_tp) (or
// fewer, numbered within it, when its launch command starts the plan's world: one node's capture),
// and every rank number lies in the plan's world.
//
// Micro-batches: the compute spans' micro-batch numbers (pipeline phases F, B, W... of one step
// are numbered from 0) stay below the plan's micro-batches; and when the profile has its steps
// (a run exported by pipetune), each step shows exactly the plan's micro-batches on every rank
// with compute spans. A profile without steps may be a window of a step, so fewer are accepted.
void check_profile_against_plan(const ImportedProfile& profile, const spec::ParallelPlan& plan);

}  // namespace pipetune::db
