#include "db/import/chrome_ranks.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include "db/import/rank_names.hpp"

namespace pipetune::db::import_detail {

namespace {

using nlohmann::json;

// A Kineto trace, or one with distributedInfo, is one rank: distributedInfo.rank, else 0.
void assign_one_rank(std::vector<ChromeThread>& threads, const json& top_level,
                     std::map<std::int32_t, std::string>& source,
                     std::vector<std::string>& warnings) {
  std::int32_t rank = 0;
  std::string why = "distributedInfo.rank";
  const json& di = top_level.contains("distributedInfo") ? top_level["distributedInfo"] : json();
  if (auto r = int_arg(di, "rank")) {
    rank = static_cast<std::int32_t>(*r);
  } else {
    why = "Kineto trace without distributedInfo.rank: rank 0";
    warnings.push_back("no distributedInfo.rank in a Kineto trace: imported as rank 0");
  }
  for (ChromeThread& t : threads) t.rank = rank;
  source[rank] = why;
}

// Ranks from process names, else from the pipeline stage a thread's ranges name; threads still
// without one take their process's agreed rank, else new ranks.
void assign_ranks_by_thread(std::vector<ChromeThread>& threads,
                            const std::vector<ChromeProcess>& processes,
                            std::map<std::int32_t, std::string>& source) {
  std::vector<std::optional<std::int32_t>> named(processes.size());
  for (std::size_t i = 0; i < processes.size(); ++i)
    if (!processes[i].name.empty()) named[i] = rank_from_name(processes[i].name);
  for (ChromeThread& t : threads) {
    if (named[t.process]) {
      t.rank = *named[t.process];
      source.emplace(t.rank, "process name '" + processes[t.process].name + "'");
    } else if (t.stage >= 0 && !t.stage_conflict) {
      t.rank = t.stage;
      source.emplace(t.rank, "pipeline stage in range names");
    }
  }
  // Threads still without a rank: their process's agreed rank, else new ranks.
  std::map<std::uint32_t, std::set<std::int32_t>> process_ranks;
  for (const ChromeThread& t : threads)
    if (t.rank >= 0) process_ranks[t.process].insert(t.rank);
  std::int32_t next = 0;
  for (const auto& [r, why] : source) next = std::max(next, r + 1);
  // New ranks in the order processes first appear in the file.
  std::map<std::uint32_t, std::int32_t> new_rank;
  for (ChromeThread& t : threads) {
    if (t.rank >= 0) continue;
    auto pr = process_ranks.find(t.process);
    if (pr != process_ranks.end() && pr->second.size() == 1) {
      t.rank = *pr->second.begin();
      continue;
    }
    new_rank.emplace(t.process, -1);
  }
  for (auto& [process, rank] : new_rank) {
    rank = next++;
    source.emplace(rank, "process order");
  }
  for (ChromeThread& t : threads)
    if (t.rank < 0) t.rank = new_rank.at(t.process);
}

}  // namespace

std::vector<ImportedRank> assign_chrome_ranks(std::vector<ChromeThread>& threads,
                                              const std::vector<ChromeProcess>& processes,
                                              const json& top_level, bool kineto,
                                              std::vector<std::string>& warnings) {
  std::map<std::int32_t, std::string> source;
  if (kineto || top_level.contains("distributedInfo"))
    assign_one_rank(threads, top_level, source, warnings);
  else
    assign_ranks_by_thread(threads, processes, source);
  // One ImportedRank per rank: the process it came from (the first one seen).
  std::map<std::int32_t, ImportedRank> ranks;
  for (const ChromeThread& t : threads) {
    auto [it, fresh] = ranks.emplace(t.rank, ImportedRank{});
    ImportedRank& r = it->second;
    const ChromeProcess& p = processes[t.process];
    if (fresh) {
      r.rank = t.rank;
      r.source = source[t.rank];
      r.ordered = r.source == "process order";
    }
    if (r.pid < 0 && p.devices.empty()) {  // prefer the host process over a GPU "process"
      r.pid = id_number(p.pid).value_or(-1);
      r.process_name = p.name;
    }
    for (std::int32_t d : p.devices)
      if (std::find(r.devices.begin(), r.devices.end(), d) == r.devices.end())
        r.devices.push_back(d);
  }
  std::vector<ImportedRank> out;
  for (auto& [rank, r] : ranks) {
    std::sort(r.devices.begin(), r.devices.end());
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace pipetune::db::import_detail
