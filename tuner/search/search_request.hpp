// A search as a front end asks for it (`pipetune tune`, the GUI's Tune page): its target and the
// search's own lists and limits, checked once here into the SearchSpace that search_plans
// searches; and the one explanation of a search that found no feasible plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "tuner/search/search.hpp"
#include "tuner/search/tuning_target.hpp"

namespace pipetune::tuner {

struct SearchRequest {
  TuningTarget target;
  std::vector<std::string> schedules;    // empty = every schedule
  std::vector<std::string> vocab_modes;  // empty = every mode (none, redis, vocab-1, ...)
  std::int64_t max_candidates = 0;       // 0 = no limit
  // Weigh offload (activations, optimizer state in host memory) against recomputation where a
  // plan needs either (SearchSpace::offload); false: no plan offloads.
  bool offload = true;
  // Per-stage layouts (SearchSpace::stage_layouts); false: every stage has the plan's tp.
  bool stage_layouts = true;
  // Chunked MoE all-to-all (SearchSpace::moe_chunks); false: every plan has moe_chunks 1.
  bool moe_chunks = true;
  // Whole experts inside the TP group (SearchSpace::whole_experts); false: experts sharded.
  bool whole_experts = true;
  // Deduplicated experts (SearchSpace::dedup_experts); false: no plan deduplicates.
  bool dedup_experts = true;
  // Two-phase MoE all-to-all (SearchSpace::two_phase_all_to_all); false: flat only.
  bool two_phase_all_to_all = true;
  // Sparse embedding gradient (SearchSpace::sparse_embedding); false: the table reduced dense.
  bool sparse_embedding = true;
  // Results ranked exactly (SearchSpace::keep); 0 = score every plan.
  std::int64_t keep = 100;
  int threads = 0;  // scoring threads; 0 = hardware concurrency
};

// A list or limit of a request that breaks its rule: field() names the SearchRequest member
// ("keep"), rule() what it breaks ("must be >= 0 (got -1)"); what() is the two with a space.
class SearchRequestError : public InputError {
 public:
  SearchRequestError(const std::string& field, const std::string& rule)
      : InputError(field + " " + rule, InputError({field}, rule)) {}
};

// The space a request asks to search: its limits and vocabulary modes checked
// (SearchRequestError), its schedules known (InputError listing the valid names) and its target
// resolved (resolve_target: InputError naming the field). A list that names an entry twice is
// refused by search_plans.
SearchSpace search_space(const SearchRequest& request);

// Why `result` holds no feasible plan, as both front ends report it: "no feasible plan for tiny
// on 8 x h100-sxm: " and then the smallest plan's memory against the device's when plans ran out
// of memory, else "every plan was pruned (" with each reason and its count, the commonest first
// (a rare one may be the one to change: a schedule without the vocabulary mode asked for) ")".
std::string no_feasible_plan_explanation(const SearchResult& result, const spec::ModelSpec& model,
                                         const spec::ClusterSpec& cluster);

}  // namespace pipetune::tuner
