// The input embedding's touched rows from a trace's counters (embedding_rows.hpp).
#include "profiler/analysis/embedding_rows.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <utility>

#include "profiler/analysis/analysis_error.hpp"

namespace pipetune::profiler::analysis {

namespace {

constexpr std::array<std::string_view, 4> kSeries = {kEmbeddingRowsTouched, kEmbeddingTokens,
                                                     kEmbeddingShardRows, kEmbeddingVocab};

}  // namespace

EmbeddingRows embedding_rows(const Trace& trace) {
  // Which series each name is (-1: another counter), then each rank's series in time order.
  std::vector<int> series_of(trace.names.size(), -1);
  for (std::size_t n = 0; n < trace.names.size(); ++n)
    for (std::size_t k = 0; k < kSeries.size(); ++k)
      if (trace.names[n] == kSeries[k]) series_of[n] = static_cast<int>(k);
  using Samples = std::vector<std::pair<std::int64_t, double>>;  // (t_ns, value)
  std::map<std::int32_t, std::array<Samples, 4>> by_rank;
  for (const CounterSample& c : trace.counters) {
    if (c.name >= series_of.size() || series_of[c.name] < 0) continue;
    by_rank[c.rank][static_cast<std::size_t>(series_of[c.name])].emplace_back(c.t_ns, c.value);
  }
  EmbeddingRows out;
  for (auto& [rank, series] : by_rank) {
    for (Samples& s : series)
      std::stable_sort(s.begin(), s.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    const std::size_t steps = series[0].size();
    for (std::size_t k = 1; k < series.size(); ++k)
      if (series[k].size() != steps)
        throw AnalysisError("embedding rows: rank " + std::to_string(rank) + "'s '" +
                            std::string(kSeries[k]) + "' has " + std::to_string(series[k].size()) +
                            " samples, '" + std::string(kSeries[0]) + "' " + std::to_string(steps) +
                            " (one a step): a run cut short?");
    for (std::size_t i = 0; i < steps; ++i)
      out.samples.push_back({.rank = rank,
                             .step = static_cast<int>(i),
                             .touched = series[0][i].second,
                             .tokens = series[1][i].second,
                             .shard_rows = series[2][i].second,
                             .vocab = series[3][i].second});
  }
  return out;
}

}  // namespace pipetune::profiler::analysis
