// The threads and processes of a Chrome trace and the rule that gives each thread its rank
// (private to db/import; the rule is documented in chrome_trace_import.hpp).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "db/import/chrome_event_reader.hpp"
#include "db/import/imported_profile.hpp"

namespace pipetune::db::import_detail {

struct ChromeThread {
  ChromeId pid, tid;
  std::uint32_t process = 0;
  std::string name;  // thread_name metadata
  bool compute = false;
  std::int32_t stage = -1;
  bool stage_conflict = false;
  std::int32_t rank = -1;
};

struct ChromeProcess {
  ChromeId pid;
  std::string name;  // process_name metadata
  std::set<std::int32_t> devices;
};

// Sets every thread's rank: all one rank in a Kineto trace or one with distributedInfo (its
// rank, else 0 with a warning); otherwise the rank in the process name, else the pipeline stage
// its ranges name, else its process's agreed rank, else new ranks in process order. Returns one
// ImportedRank per rank, by rank.
std::vector<ImportedRank> assign_chrome_ranks(std::vector<ChromeThread>& threads,
                                              const std::vector<ChromeProcess>& processes,
                                              const nlohmann::json& top_level, bool kineto,
                                              std::vector<std::string>& warnings);

}  // namespace pipetune::db::import_detail
