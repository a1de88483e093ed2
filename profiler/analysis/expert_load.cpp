// MoE routing statistics from a trace's counters (expert_load.hpp).
#include "profiler/analysis/expert_load.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <utility>

#include "profiler/analysis/analysis_error.hpp"

namespace pipetune::profiler::analysis {

namespace {

constexpr std::string_view kPrefix = "moe layer ";

// Reads a non-negative integer at the front of `s` and drops it; false when there is none.
bool take_number(std::string_view& s, std::int64_t& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || end == s.data() || out < 0) return false;
  s.remove_prefix(static_cast<std::size_t>(end - s.data()));
  return true;
}

bool take(std::string_view& s, std::string_view word) {
  if (s.substr(0, word.size()) != word) return false;
  s.remove_prefix(word.size());
  return true;
}

// The series a counter name is: (layer, expert), expert -1 for the dropped count; nullopt for a
// counter of something else.
std::optional<std::pair<std::int64_t, std::int64_t>> parse(std::string_view name) {
  std::int64_t layer = 0, expert = 0;
  if (!take(name, kPrefix) || !take_number(name, layer)) return std::nullopt;
  if (name == " dropped") return std::pair{layer, std::int64_t{-1}};
  if (take(name, " expert ") && take_number(name, expert) && name == " tokens")
    return std::pair{layer, expert};
  return std::nullopt;
}

double max_over_mean(const std::vector<double>& loads) {
  double sum = 0.0, most = 0.0;
  for (double v : loads) {
    sum += v;
    most = std::max(most, v);
  }
  if (sum <= 0.0) return 1.0;
  return most / (sum / static_cast<double>(loads.size()));
}

}  // namespace

std::string expert_tokens_counter(std::int64_t layer, std::int64_t expert) {
  return std::string(kPrefix) + std::to_string(layer) + " expert " + std::to_string(expert) +
         " tokens";
}

std::string expert_dropped_counter(std::int64_t layer) {
  return std::string(kPrefix) + std::to_string(layer) + " dropped";
}

std::string expert_dedup_counter(std::int64_t layer) {
  return std::string(kPrefix) + std::to_string(layer) + " deduplicated";
}

std::vector<AdaptiveLayer> adaptive_layers(const Trace& trace) {
  // By name id: the layer, or -1 for another counter.
  std::vector<std::int64_t> layer_of(trace.names.size(), -1);
  for (std::size_t i = 0; i < trace.names.size(); ++i) {
    std::string_view name = trace.names[i];
    std::int64_t layer = 0;
    if (take(name, kPrefix) && take_number(name, layer) && name == " deduplicated")
      layer_of[i] = layer;
  }
  std::map<std::int64_t, std::pair<std::int32_t, std::vector<bool>>> by_layer;  // lowest rank's
  for (const CounterSample& c : trace.counters) {
    if (c.name >= layer_of.size() || layer_of[c.name] < 0) continue;
    auto [it, added] = by_layer.try_emplace(layer_of[c.name], c.rank, std::vector<bool>{});
    if (c.rank < it->second.first) it->second = {c.rank, {}};
    if (c.rank == it->second.first) it->second.second.push_back(c.value != 0.0);
  }
  std::vector<AdaptiveLayer> out;
  for (auto& [layer, samples] : by_layer) out.push_back({layer, std::move(samples.second)});
  return out;
}

double LayerLoad::imbalance() const {
  return max_over_mean(std::vector<double>(tokens.begin(), tokens.end()));
}

double LayerLoad::rank_imbalance(int ep) const {
  const auto experts = static_cast<int>(tokens.size());
  if (ep < 1 || experts == 0 || experts % ep != 0)
    throw AnalysisError("expert parallelism " + std::to_string(ep) + " does not divide the " +
                        std::to_string(experts) + " experts of layer " + std::to_string(layer));
  std::vector<double> ranks(static_cast<std::size_t>(ep), 0.0);
  const int per_rank = experts / ep;  // consecutive experts on one rank, as the engine shards
  for (int e = 0; e < experts; ++e)
    ranks[static_cast<std::size_t>(e / per_rank)] +=
        static_cast<double>(tokens[static_cast<std::size_t>(e)]);
  return max_over_mean(ranks);
}

double ExpertLoad::mean_rank_imbalance(int ep) const {
  double sum = 0.0;
  std::size_t n = 0;
  for (const StepLoad& s : steps)
    for (const LayerLoad& l : s.layers) {
      sum += l.rank_imbalance(ep);
      ++n;
    }
  return n == 0 ? 1.0 : sum / static_cast<double>(n);
}

double ExpertLoad::max_rank_imbalance(int ep) const {
  double most = 1.0;
  for (const StepLoad& s : steps)
    for (const LayerLoad& l : s.layers) most = std::max(most, l.rank_imbalance(ep));
  return most;
}

ExpertLoad expert_load(const Trace& trace) {
  // Each (rank, series): its samples in time order, one a step.
  struct Series {
    std::int64_t layer, expert;
    std::vector<std::pair<std::int64_t, double>> samples;  // (t_ns, value)
  };
  std::map<std::pair<std::int32_t, std::uint32_t>, Series> series;
  std::map<std::uint32_t, std::optional<std::pair<std::int64_t, std::int64_t>>> parsed;
  for (const CounterSample& c : trace.counters) {
    auto it = parsed.find(c.name);
    if (it == parsed.end())
      it = parsed
               .emplace(c.name,
                        c.name < trace.names.size() ? parse(trace.names[c.name]) : std::nullopt)
               .first;
    if (!it->second) continue;
    Series& s = series[{c.rank, c.name}];
    s.layer = it->second->first;
    s.expert = it->second->second;
    s.samples.emplace_back(c.t_ns, c.value);
  }
  ExpertLoad out;
  if (series.empty()) return out;
  std::size_t steps = 0;
  std::int64_t experts = 0;
  for (auto& [key, s] : series) {
    std::stable_sort(s.samples.begin(), s.samples.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    if (steps == 0) steps = s.samples.size();
    if (s.samples.size() != steps)
      throw AnalysisError("routing statistics: rank " + std::to_string(key.first) + "'s series '" +
                          trace.names[key.second] + "' has " + std::to_string(s.samples.size()) +
                          " samples, others " + std::to_string(steps) +
                          " (one a step): a run cut short?");
    experts = std::max(experts, s.expert + 1);
  }
  // (step, layer) -> load, summed over the ranks.
  std::vector<std::map<std::int64_t, LayerLoad>> by_step(steps);
  for (const auto& [key, s] : series)
    for (std::size_t k = 0; k < steps; ++k) {
      LayerLoad& l = by_step[k][s.layer];
      l.layer = s.layer;
      if (l.tokens.empty()) l.tokens.assign(static_cast<std::size_t>(experts), 0);
      const auto v = static_cast<std::int64_t>(s.samples[k].second);
      if (s.expert < 0)
        l.dropped += v;
      else
        l.tokens[static_cast<std::size_t>(s.expert)] += v;
    }
  // Every layer names every expert: a layer with fewer series than the widest is a bad trace.
  std::map<std::int64_t, std::vector<char>> named;
  for (const auto& [key, s] : series) {
    if (s.expert < 0) continue;
    std::vector<char>& n = named[s.layer];
    n.resize(static_cast<std::size_t>(experts), 0);
    n[static_cast<std::size_t>(s.expert)] = 1;
  }
  for (const auto& [layer, n] : named)
    if (std::count(n.begin(), n.end(), 1) != experts)
      throw AnalysisError("routing statistics: layer " + std::to_string(layer) + " has " +
                          std::to_string(std::count(n.begin(), n.end(), 1)) +
                          " experts' series, another layer " + std::to_string(experts));
  out.experts = static_cast<int>(experts);
  for (std::size_t k = 0; k < steps; ++k) {
    StepLoad step;
    step.step = static_cast<int>(k);
    for (auto& [layer, l] : by_step[k]) step.layers.push_back(std::move(l));
    out.steps.push_back(std::move(step));
  }
  return out;
}

}  // namespace pipetune::profiler::analysis
