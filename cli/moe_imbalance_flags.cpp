#include "cli/moe_imbalance_flags.hpp"

#include "cli/workspace_cli.hpp"
#include "engine/errors.hpp"
#include "engine/spec/run_spec.hpp"
#include "profiler/analysis/analysis_error.hpp"
#include "profiler/analysis/expert_load.hpp"

namespace pipetune::cli {

void add_moe_imbalance_options(CLI::App* cmd, MoeImbalanceArgs& a) {
  cmd->add_option("--moe-imbalance", a.value,
                  "MoE routing: the busiest expert-parallel rank's tokens over the mean rank's "
                  "(>= 1; default 1, even), what its expert GEMMs and all-to-all cost more");
  cmd->add_option("--moe-imbalance-from", a.from_run,
                  "MoE routing imbalance measured by a stored training run of the same model "
                  "(id or name, in --db): per expert-parallel degree, from its tokens per expert");
}

std::optional<tuner::MoeImbalance> moe_imbalance(const MoeImbalanceArgs& a, std::int64_t experts,
                                                 const std::string& db) {
  if (a.value && !a.from_run.empty())
    throw InputError("--moe-imbalance and --moe-imbalance-from exclude each other");
  if (a.value) {
    if (const std::string problem = spec::moe_imbalance_problem(*a.value); !problem.empty())
      throw InputError("--moe-imbalance " + problem);
    return tuner::MoeImbalance::everywhere(*a.value);
  }
  if (a.from_run.empty()) return std::nullopt;
  const LoadedRun r = load_run(db, a.from_run);
  profiler::analysis::ExpertLoad load;
  try {
    load = profiler::analysis::expert_load(r.stored.trace);
  } catch (const profiler::analysis::AnalysisError& e) {
    throw InputError("--moe-imbalance-from " + a.from_run + ": " + e.what());
  }
  if (load.empty())
    throw InputError("--moe-imbalance-from " + a.from_run +
                     ": the run recorded no routing statistics (train an MoE model with --db)");
  if (load.experts != experts)
    throw InputError("--moe-imbalance-from " + a.from_run + ": the run's MoE layers have " +
                     std::to_string(load.experts) + " experts, the model " +
                     std::to_string(experts));
  tuner::MoeImbalance u;
  for (int ep = 1; ep <= load.experts; ++ep)
    if (load.experts % ep == 0) u.by_ep[ep] = load.mean_rank_imbalance(ep);
  return u;  // every ep a plan of this model may have divides its experts: any_ep is not used
}

}  // namespace pipetune::cli
