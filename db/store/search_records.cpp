#include "db/store/search_records.hpp"

#include <utility>
#include <vector>

#include "db/store/workspace.hpp"

namespace pipetune::db {

std::int64_t store_search(const std::string& path, const TrialTarget& target,
                          const tuner::SearchResult& r) {
  std::vector<TrialRecord> trials;
  trials.reserve(r.ranked.size());
  for (const auto& c : r.ranked) {
    TrialRecord t;
    t.plan_json = trial_json(target, c.plan, c.vocab_label).dump();
    t.iteration_s = c.score.iteration_time;
    t.tokens_per_s = c.score.tokens_per_s;
    t.mfu = c.score.mfu;
    t.peak_memory_bytes = static_cast<std::int64_t>(c.score.peak_memory_bytes);
    t.feasible = true;
    trials.push_back(std::move(t));
  }
  Workspace ws(path, OpenMode::Create);
  return ws.add_search(std::move(trials));
}

}  // namespace pipetune::db
