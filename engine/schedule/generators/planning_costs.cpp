// Kept apart from the registry so a generator can be linked (and tested) on its own.
#include "engine/schedule/generators.hpp"

namespace pipetune::schedule {

CostTable planning_costs(const GeneratorParams& params) {
  if (!params.costs.stages.empty()) return params.costs;
  return CostTable::uniform(params.stages, 1.0, 1.0, 1.0, 0.5, 0.5, 0.0);
}

}  // namespace pipetune::schedule
