#include "tuner/search/layer_partition.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "engine/errors.hpp"

namespace pipetune::tuner {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Sums compared with a little slack, so that a budget met exactly in exact arithmetic is met.
bool at_most(double value, double limit) {
  return value <= limit + 1e-9 * std::max(1.0, std::abs(limit));
}

double at(const std::vector<double>& v, std::size_t i, double fallback) {
  return v.empty() ? fallback : v[i];
}

void check_sizes(const PartitionProblem& p, std::size_t layers) {
  const auto fail = [](const std::string& what) { throw InputError("layer partition: " + what); };
  if (p.stages < 1) fail("stages must be at least 1 (got " + std::to_string(p.stages) + ")");
  if (p.min_layers_per_stage < 0) fail("min_layers_per_stage must be >= 0");
  const auto s = static_cast<std::size_t>(p.stages);
  for (const auto* v : {&p.stage_extra_cost, &p.stage_in_flight, &p.stage_extra_bytes})
    if (!v->empty() && v->size() != s)
      fail("a per-stage list has " + std::to_string(v->size()) + " entries for " +
           std::to_string(s) + " stages");
  for (const auto* v : {&p.layer_static_bytes, &p.layer_activation_bytes})
    if (!v->empty() && v->size() != layers)
      fail("a per-layer list has " + std::to_string(v->size()) + " entries for " +
           std::to_string(layers) + " layers");
  for (const auto* v : {&p.layer_cost, &p.stage_extra_cost, &p.layer_static_bytes,
                        &p.layer_activation_bytes, &p.stage_in_flight, &p.stage_extra_bytes})
    for (double x : *v)
      if (!(x >= 0.0)) fail("costs and bytes must be >= 0 (got " + std::to_string(x) + ")");
  for (const auto* lists : {&p.stage_layer_cost, &p.stage_layer_activation_bytes}) {
    if (!lists->empty() && lists->size() != s)
      fail("a per-stage list of layers has " + std::to_string(lists->size()) + " entries for " +
           std::to_string(s) + " stages");
    for (const std::vector<double>& v : *lists) {
      if (v.size() != layers)
        fail("a stage's per-layer list has " + std::to_string(v.size()) + " entries for " +
             std::to_string(layers) + " layers");
      for (double x : v)
        if (!(x >= 0.0)) fail("costs and bytes must be >= 0 (got " + std::to_string(x) + ")");
    }
  }
}

bool memory_limited(const PartitionProblem& p) {
  return p.capacity_bytes > 0.0;
}

bool same_for_each_layer(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [&](double x) { return x == v.front(); });
}

// Whether a stage's bytes depend only on how many layers it holds: every per-layer list
// (static and activation bytes, per stage too) the same for each layer.
bool bytes_by_count(const PartitionProblem& p) {
  return same_for_each_layer(p.layer_static_bytes) &&
         same_for_each_layer(p.layer_activation_bytes) &&
         std::all_of(p.stage_layer_activation_bytes.begin(), p.stage_layer_activation_bytes.end(),
                     same_for_each_layer);
}

// Whether layers cost the same on every stage, or each stage's layers cost alike (per-stage
// recomputation): where layers cost differently on different stages, moving the boundaries to
// drop one layer can make a stage slower, and the slowest of the first stages need not grow with
// the layers they hold.
bool stage_costs_by_count(const PartitionProblem& p) {
  return std::all_of(p.stage_layer_cost.begin(), p.stage_layer_cost.end(), same_for_each_layer);
}

// Prefix sums of a per-layer list (zeros when it is empty).
std::vector<double> prefix(const std::vector<double>& v, std::size_t layers) {
  std::vector<double> out(layers + 1, 0.0);
  for (std::size_t i = 0; i < layers; ++i) out[i + 1] = out[i] + at(v, i, 0.0);
  return out;
}

// Prefix sums of a per-layer list that may differ by stage: per_stage[s] when given, else shared.
class StagePrefix {
 public:
  StagePrefix(const std::vector<std::vector<double>>& per_stage, const std::vector<double>& shared,
              std::size_t layers) {
    if (per_stage.empty()) sums_.push_back(prefix(shared, layers));
    for (const std::vector<double>& v : per_stage) sums_.push_back(prefix(v, layers));
  }
  // Stage s's sum over layers j..i-1.
  double sum(std::size_t s, std::size_t j, std::size_t i) const {
    const std::vector<double>& v = sums_.size() == 1 ? sums_.front() : sums_[s];
    return v[i] - v[j];
  }

 private:
  std::vector<std::vector<double>> sums_;
};

// The least stage time under which `feasible` holds: the optimum is one stage's time at some
// layer count (extra cost + n layers), so a binary search over those values in order; nullopt
// when none is.
std::optional<double> least_feasible_bound(const PartitionProblem& p, int layers, double layer_cost,
                                           const std::function<bool(double)>& feasible) {
  std::vector<double> extras;
  for (std::size_t s = 0; s < static_cast<std::size_t>(p.stages); ++s)
    extras.push_back(at(p.stage_extra_cost, s, 0.0));
  std::sort(extras.begin(), extras.end());
  extras.erase(std::unique(extras.begin(), extras.end()), extras.end());
  // Each extra's values rise with n (partition_uniform_layers refuses a negative layer cost):
  // the lists are merged, not sorted.
  std::vector<double> candidates;
  for (double extra : extras) {
    const auto middle = static_cast<std::ptrdiff_t>(candidates.size());
    for (int n = p.min_layers_per_stage; n <= layers; ++n)
      candidates.push_back(n * layer_cost + extra);
    std::inplace_merge(candidates.begin(), candidates.begin() + middle, candidates.end());
  }
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  std::size_t lo = 0, hi = candidates.size();  // first feasible in [lo, hi); hi: none
  while (lo < hi) {
    const std::size_t mid = (lo + hi) / 2;
    if (feasible(candidates[mid]))
      hi = mid;
    else
      lo = mid + 1;
  }
  if (lo == candidates.size()) return std::nullopt;
  return candidates[lo];
}

}  // namespace

LayerPartition partition_layers(const PartitionProblem& p) {
  const std::size_t L = p.layer_cost.size();
  check_sizes(p, L);
  const auto S = static_cast<std::size_t>(p.stages);
  const auto min = static_cast<std::size_t>(p.min_layers_per_stage);
  LayerPartition out;
  if (S * min > L) return out;
  const StagePrefix cost(p.stage_layer_cost, p.layer_cost, L);
  const std::vector<double> stat = prefix(p.layer_static_bytes, L);
  const StagePrefix act(p.stage_layer_activation_bytes, p.layer_activation_bytes, L);
  const auto fits = [&](std::size_t s, std::size_t j, std::size_t i) {
    if (!memory_limited(p)) return true;
    const double bytes = stat[i] - stat[j] + at(p.stage_in_flight, s, 1.0) * act.sum(s, j, i) +
                         at(p.stage_extra_bytes, s, 0.0);
    return at_most(bytes, p.capacity_bytes);
  };
  // best[s][i]: the slowest of stages 0..s-1 holding layers 0..i-1; from[s][i]: where stage s-1
  // starts in it. The smallest start of the best: later stages take as many layers as the
  // optimum allows, which leaves the first stages (the most micro-batches in flight) the fewest.
  std::vector<std::vector<double>> best(S + 1, std::vector<double>(L + 1, kInf));
  std::vector<std::vector<std::size_t>> from(S + 1, std::vector<std::size_t>(L + 1, 0));
  best[0][0] = 0.0;
  const bool monotone =
      !p.scan && min <= 1 && (!memory_limited(p) || bytes_by_count(p)) && stage_costs_by_count(p);
  for (std::size_t s = 1; s <= S; ++s) {
    const double extra = at(p.stage_extra_cost, s - 1, 0.0);
    const std::vector<double>& before = best[s - 1];
    const auto slowest = [&](std::size_t j, std::size_t i) {
      return std::max(before[j], cost.sum(s - 1, j, i) + extra);
    };
    if (!monotone) {
      for (std::size_t i = s * min; i <= L; ++i)
        for (std::size_t j = (s - 1) * min; j + min <= i; ++j) {
          if (before[j] == kInf || !fits(s - 1, j, i)) continue;
          const double t = slowest(j, i);
          if (t < best[s][i]) {
            best[s][i] = t;
            from[s][i] = j;
          }
        }
      continue;
    }
    // Costs are >= 0 and at most one layer is the least a stage holds, so with more layers j in
    // stages 0..s-2 their slowest, before[j], only grows (finite up to some j; memory, and
    // per-stage costs, going by layer counts), while stage s-1's time over j..i-1 only falls, and
    // its memory (it fits from some j on). Each (s, i) then looks over one interval of starts, and
    // the slowest of the two is least where they cross: binary searches in place of the scan, O(S L
    // log L) (checked against the scan, exhaustively on small cases, in layer_partition_test.cpp).
    const std::size_t first = (s - 1) * min;
    std::size_t finite_end = first;  // before[j] is finite for first <= j < finite_end
    while (finite_end <= L && before[finite_end] != kInf) ++finite_end;
    for (std::size_t i = s * min; i <= L; ++i) {
      const std::size_t hi = std::min(i - min + 1, finite_end);
      // The first start whose stage fits.
      std::size_t lo = first;
      for (std::size_t b = hi; lo < b;) {
        const std::size_t mid = lo + (b - lo) / 2;
        if (fits(s - 1, mid, i))
          b = mid;
        else
          lo = mid + 1;
      }
      if (lo >= hi) continue;
      // The first start where stages 0..s-2 are at least as slow as stage s-1.
      std::size_t cross = lo;
      for (std::size_t b = hi; cross < b;) {
        const std::size_t mid = cross + (b - cross) / 2;
        if (before[mid] >= cost.sum(s - 1, mid, i) + extra)
          b = mid;
        else
          cross = mid + 1;
      }
      std::size_t j = cross < hi ? cross : hi - 1;
      if (cross > lo && cross < hi && slowest(cross - 1, i) <= slowest(cross, i)) j = cross - 1;
      const double t = slowest(j, i);
      while (j > lo && slowest(j - 1, i) <= t) --j;
      best[s][i] = t;
      from[s][i] = j;
    }
  }
  if (best[S][L] == kInf) return out;
  out.feasible = true;
  out.slowest = best[S][L];
  out.layers.assign(S, 0);
  for (std::size_t s = S, i = L; s > 0; --s) {
    const std::size_t j = from[s][i];
    out.layers[s - 1] = static_cast<int>(i - j);
    i = j;
  }
  return out;
}

LayerPartition partition_uniform_layers(const PartitionProblem& p, int layers, double layer_cost,
                                        double layer_static_bytes, double layer_activation_bytes) {
  PartitionProblem sized = p;
  sized.layer_cost.assign(static_cast<std::size_t>(std::max(layers, 0)), layer_cost);
  sized.layer_static_bytes.clear();
  sized.layer_activation_bytes.clear();
  check_sizes(sized, sized.layer_cost.size());
  if (!p.stage_layer_cost.empty() || !p.stage_layer_activation_bytes.empty())
    throw InputError("layer partition: per-stage layer costs need partition_layers");
  if (layers < 0 || !(layer_cost >= 0.0) || !(layer_static_bytes >= 0.0) ||
      !(layer_activation_bytes >= 0.0))
    throw InputError("layer partition: layer counts, costs and bytes must be >= 0");
  const auto S = static_cast<std::size_t>(p.stages);
  const int min = p.min_layers_per_stage;
  LayerPartition out;
  if (static_cast<std::int64_t>(S) * min > layers) return out;
  // The most layers stage s can take: its memory's bound, and under a time bound T its time's.
  const auto memory_cap = [&](std::size_t s) -> int {
    if (!memory_limited(p)) return layers;
    const double room = p.capacity_bytes - at(p.stage_extra_bytes, s, 0.0);
    if (!at_most(0.0, room)) return -1;
    const double per_layer =
        layer_static_bytes + at(p.stage_in_flight, s, 1.0) * layer_activation_bytes;
    if (per_layer <= 0.0) return layers;
    return static_cast<int>(std::min<double>(layers, std::floor(room / per_layer * (1 + 1e-12))));
  };
  const auto time_cap = [&](std::size_t s, double bound) -> int {
    const double room = bound - at(p.stage_extra_cost, s, 0.0);
    if (!at_most(0.0, room)) return -1;
    if (layer_cost <= 0.0) return layers;
    return static_cast<int>(std::min<double>(layers, std::floor(room / layer_cost * (1 + 1e-12))));
  };
  std::vector<int> mem(S);
  for (std::size_t s = 0; s < S; ++s) mem[s] = memory_cap(s);
  const auto caps = [&](double bound, std::vector<int>& cap) {
    std::int64_t total = 0;
    for (std::size_t s = 0; s < S; ++s) {
      cap[s] = std::min(mem[s], time_cap(s, bound));
      if (cap[s] < min) return false;
      total += cap[s];
    }
    return total >= layers;
  };
  std::vector<int> cap(S);
  const std::optional<double> bound =
      least_feasible_bound(p, layers, layer_cost, [&](double b) { return caps(b, cap); });
  if (!bound) return out;
  caps(*bound, cap);
  // Every stage its minimum, then the rest from the last stage back, each up to its cap.
  out.layers.assign(S, min);
  int rest = layers - static_cast<int>(S) * min;
  for (std::size_t s = S; s-- > 0 && rest > 0;) {
    const int add = std::min(rest, cap[s] - min);
    out.layers[s] += add;
    rest -= add;
  }
  out.feasible = true;
  out.slowest = 0.0;
  for (std::size_t s = 0; s < S; ++s)
    out.slowest =
        std::max(out.slowest, out.layers[s] * layer_cost + at(p.stage_extra_cost, s, 0.0));
  return out;
}

SplitCost split_cost(const PartitionProblem& p, const std::vector<int>& split) {
  SplitCost out;
  if (split.size() != static_cast<std::size_t>(p.stages)) return out;
  const std::size_t L = p.layer_cost.size();
  check_sizes(p, L);
  const StagePrefix cost(p.stage_layer_cost, p.layer_cost, L);
  const std::vector<double> stat = prefix(p.layer_static_bytes, L);
  const StagePrefix act(p.stage_layer_activation_bytes, p.layer_activation_bytes, L);
  std::size_t j = 0;
  out.fits = true;
  for (std::size_t s = 0; s < split.size(); ++s) {
    if (split[s] < p.min_layers_per_stage || j + static_cast<std::size_t>(split[s]) > L) {
      out.fits = false;
      return out;
    }
    const std::size_t i = j + static_cast<std::size_t>(split[s]);
    out.slowest = std::max(out.slowest, cost.sum(s, j, i) + at(p.stage_extra_cost, s, 0.0));
    const double bytes = stat[i] - stat[j] + at(p.stage_in_flight, s, 1.0) * act.sum(s, j, i) +
                         at(p.stage_extra_bytes, s, 0.0);
    if (memory_limited(p) && !at_most(bytes, p.capacity_bytes)) out.fits = false;
    j = i;
  }
  if (j != L) out.fits = false;
  return out;
}

}  // namespace pipetune::tuner
