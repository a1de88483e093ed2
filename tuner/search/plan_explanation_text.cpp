// explanation_text: PlanExplanation as a few lines for a terminal.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "profiler/units.hpp"
#include "tuner/search/plan_explanation.hpp"

namespace pipetune::tuner {

namespace {

std::string printf_text(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

std::string signed_seconds(double t) {
  return (t > 0.0 ? "+" : "") + profiler::format_seconds(t);
}

std::string gigabytes_per_s(double bytes_per_s) {
  return printf_text("%.4g GB/s", bytes_per_s / 1e9);
}

// The parts worth naming: those whose size is more than a rounding error of `scale`.
std::vector<std::pair<std::string, double>> named_parts(const TimeParts& t, double scale,
                                                        bool pipeline_inside) {
  std::vector<std::pair<std::string, double>> all = {{"compute", t.compute},
                                                     {"TP comm", t.tp_comm},
                                                     {"EP comm", t.ep_comm},
                                                     {"ZeRO comm", t.sharded_comm},
                                                     {"bubble", t.bubble}};
  if (!pipeline_inside) all = {{"pipeline", t.pipeline()}};
  all.emplace_back("data-parallel", t.data_parallel);
  all.emplace_back("optimizer", t.optimizer);
  std::vector<std::pair<std::string, double>> out;
  for (auto& part : all)
    if (std::abs(part.second) > 1e-9 * scale) out.push_back(std::move(part));
  return out;
}

// "pipeline -20 ms (bubble -25 ms, compute +5 ms), data-parallel +8 ms"
std::string difference_text(const TimeParts& d, double scale) {
  std::string inside;
  for (const auto& [name, t] : named_parts(d, scale, true)) {
    if (name == "data-parallel" || name == "optimizer") continue;
    inside += (inside.empty() ? "" : ", ") + name + " " + signed_seconds(t);
  }
  std::string s;
  for (const auto& [name, t] : named_parts(d, scale, false)) {
    s += (s.empty() ? "" : ", ") + name + " " + signed_seconds(t);
    if (name == "pipeline" && !inside.empty()) s += " (" + inside + ")";
  }
  return s.empty() ? "no part differs" : s;
}

// "best binds on stage 3 (busy 7.1 ms of a 8.2 ms iteration): compute 81.0%, bubble 12.0%, ..."
std::string binding_text(const std::string& who, const PlanBreakdown& b) {
  const double total = b.iteration_time;
  std::string s = who + " binds on stage " + std::to_string(b.binding_stage) + " (busy " +
                  profiler::format_seconds(b.parts.busy()) + " of a " +
                  profiler::format_seconds(total) + " iteration):";
  bool first = true;
  for (const auto& [name, t] : named_parts(b.parts, total, true)) {
    const std::string share = printf_text("%.1f%%", 100.0 * t / total);
    if (share == "0.0%" || share == "-0.0%") continue;  // below what the line shows
    s += (first ? " " : ", ") + name + " " + share;
    first = false;
  }
  return s;
}

std::string link_text(const std::string& who, const LinkUse& u) {
  std::string what;
  if (u.group == "pipeline")
    what = "pipeline " + u.collective + " between stages " + std::to_string(u.stage) + " and " +
           std::to_string(u.peer_stage);
  else if (u.group == "embedding")
    what = "tied-embedding " + u.collective + " between stages " + std::to_string(u.stage) +
           " and " + std::to_string(u.peer_stage);
  else
    what = (u.group == "tp"   ? "TP "
            : u.group == "ep" ? "EP "
                              : "DP ") +
           u.collective + " on stage " + std::to_string(u.stage) + " (" +
           std::to_string(u.members) + " devices)";
  std::string where = u.inter_node
                          ? "crosses the " + gigabytes_per_s(u.nic_bandwidth) +
                                " NICs (inter-node, " + std::to_string(u.members_per_node) +
                                " per node, " + gigabytes_per_s(u.bandwidth) + " effective)"
                          : "stays inside a node (" + gigabytes_per_s(u.bandwidth) + ")";
  return who + "'s busiest link: its " + what + " " + where + ", " +
         profiler::format_seconds(u.time) + " of traffic per iteration";
}

}  // namespace

std::string explanation_text(const PlanExplanation& e) {
  std::string s;
  const double margin = e.margin();
  const double scale = std::max(e.first.iteration_time, e.second.iteration_time);
  if (std::abs(margin) <= 1e-9 * scale) {
    s += "best and runner-up predict the same iteration time (" +
         profiler::format_seconds(e.first.iteration_time) + ")";
  } else {
    s += std::string(margin > 0.0 ? "best beats runner-up by "
                                  : "best is slower than runner-up by ") +
         profiler::format_seconds(std::abs(margin)) +
         printf_text(" (%.1f%%)", 100.0 * std::abs(margin) / e.second.iteration_time);
  }
  s += ": " + difference_text(e.difference, scale) + "\n";
  s += binding_text("best", e.first) + "\n";
  s += binding_text("runner-up", e.second) + "\n";
  if (e.first.busiest_link) s += link_text("best", *e.first.busiest_link) + "\n";
  if (e.second.busiest_link) s += link_text("runner-up", *e.second.busiest_link) + "\n";
  if (e.settings.empty()) {
    s += "the plans' settings are the same\n";
  } else {
    s += "settings that differ (best vs runner-up):";
    for (std::size_t i = 0; i < e.settings.size(); ++i)
      s += std::string(i ? "," : "") + " " + e.settings[i].setting + " " + e.settings[i].first +
           " vs " + e.settings[i].second;
    s += "\n";
  }
  return s;
}

}  // namespace pipetune::tuner
