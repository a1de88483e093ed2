#include "gui/core/expert_load_series.hpp"

#include <algorithm>
#include <numeric>

namespace pipetune::gui {

ExpertLoadSeries expert_load_series(const profiler::analysis::ExpertLoad& load) {
  ExpertLoadSeries out;
  if (load.empty()) return out;
  long long dropped = 0, routed = 0;
  for (const profiler::analysis::StepLoad& s : load.steps) {
    double sum = 0.0, most = 1.0;
    for (const profiler::analysis::LayerLoad& l : s.layers) {
      const double u = l.imbalance();
      sum += u;
      most = std::max(most, u);
      dropped += l.dropped;
      routed += std::accumulate(l.tokens.begin(), l.tokens.end(), 0LL);
    }
    const double x = s.step + 1;
    out.mean.push_back({x, s.layers.empty() ? 1.0 : sum / static_cast<double>(s.layers.size())});
    out.most.push_back({x, most});
  }
  out.caption = QString(
                    "%1 MoE layers x %2 experts, %3 steps; busiest expert / mean: last step "
                    "%4 (mean), %5 (max); dropped %6 of %7 choices")
                    .arg(load.steps.back().layers.size())
                    .arg(load.experts)
                    .arg(load.steps.size())
                    .arg(out.mean.back().y(), 0, 'f', 2)
                    .arg(out.most.back().y(), 0, 'f', 2)
                    .arg(dropped)
                    .arg(routed);
  return out;
}

}  // namespace pipetune::gui
