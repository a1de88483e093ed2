// Which process of an nsys export is which rank (rule in nsys_sqlite.hpp).
#include <algorithm>

#include "db/import/nsys_rows.hpp"
#include "db/import/nsys_schema.hpp"

namespace pipetune::db::import_detail {

namespace {

// Ranks with where each came from, by process key.
struct RankAssignment {
  std::map<std::int64_t, std::int32_t> rank_of;
  std::map<std::int64_t, std::string> source;
};

// How many of the processes have an explicit rank, and whether they all have distinct ones.
std::pair<std::size_t, bool> explicit_rank_coverage(const RankInputs& in,
                                                    const std::vector<std::int64_t>& procs) {
  std::size_t with_explicit = 0;
  std::set<std::int32_t> explicit_numbers;
  for (std::int64_t p : procs) {
    auto it = in.explicit_ranks.find(p);
    if (it == in.explicit_ranks.end()) continue;
    ++with_explicit;
    explicit_numbers.insert(it->second.first);
  }
  const bool named =
      !procs.empty() && with_explicit == procs.size() && explicit_numbers.size() == procs.size();
  return {with_explicit, named};
}

// Device order when every process has one device of its own, else PID order (`procs` is in
// PID order).
void rank_by_device_or_pid(const RankInputs& in, const std::vector<std::int64_t>& procs,
                           RankAssignment& out) {
  bool one_device_each = !procs.empty();
  std::set<std::int32_t> seen;
  for (std::int64_t p : procs) {
    auto it = in.devices.find(p);
    if (it == in.devices.end() || it->second.size() != 1 ||
        !seen.insert(*it->second.begin()).second) {
      one_device_each = false;
      break;
    }
  }
  std::vector<std::int64_t> order = procs;
  if (one_device_each) {
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
      return *in.devices.at(a).begin() < *in.devices.at(b).begin();
    });
  }
  for (std::size_t i = 0; i < order.size(); ++i) {
    out.rank_of[order[i]] = static_cast<std::int32_t>(i);
    out.source[order[i]] =
        one_device_each
            ? "device order (device " + std::to_string(*in.devices.at(order[i]).begin()) + ")"
            : "PID order";
  }
}

}  // namespace

std::map<std::int64_t, std::int32_t> assign_ranks(const RankInputs& in,
                                                  std::vector<ImportedRank>& ranks,
                                                  std::vector<std::string>& warnings) {
  std::vector<std::int64_t> procs(in.gpu_processes.begin(), in.gpu_processes.end());
  if (procs.empty() && !in.host_processes.empty()) {
    procs.assign(in.host_processes.begin(), in.host_processes.end());
    warnings.push_back(
        "no GPU activity (kernels, copies, memsets): ranks are the processes with NVTX ranges "
        "or CUDA API calls");
  }

  auto pid = [&](std::int64_t p) {
    auto it = in.processes.find(p);
    return it != in.processes.end() ? it->second.pid : pid_of(p);
  };
  // PID order, hosts (higher bits) breaking ties.
  std::sort(procs.begin(), procs.end(), [&](std::int64_t a, std::int64_t b) {
    return std::pair(pid(a), a) < std::pair(pid(b), b);
  });

  RankAssignment assigned;
  // (1) Explicit ranks, when every process has a distinct one; else (2) device or PID order.
  const auto [with_explicit, named] = explicit_rank_coverage(in, procs);
  if (named) {
    for (std::int64_t p : procs) {
      assigned.rank_of[p] = in.explicit_ranks.at(p).first;
      assigned.source[p] = in.explicit_ranks.at(p).second;
    }
  } else {
    if (with_explicit > 0)
      warnings.push_back("explicit rank names cover " + std::to_string(with_explicit) + " of " +
                         std::to_string(procs.size()) +
                         " processes or repeat a number: ignored, ranks by device or PID");
    rank_by_device_or_pid(in, procs, assigned);
  }

  for (const auto& [p, r] : assigned.rank_of) {
    ImportedRank info;
    info.rank = r;
    info.pid = pid(p);
    auto it = in.processes.find(p);
    if (it != in.processes.end()) info.process_name = it->second.name;
    auto d = in.devices.find(p);
    if (d != in.devices.end()) info.devices.assign(d->second.begin(), d->second.end());
    info.source = assigned.source[p];
    info.ordered = !named;
    ranks.push_back(std::move(info));
  }
  std::sort(ranks.begin(), ranks.end(),
            [](const ImportedRank& a, const ImportedRank& b) { return a.rank < b.rank; });
  return assigned.rank_of;
}

}  // namespace pipetune::db::import_detail
