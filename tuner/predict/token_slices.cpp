#include "tuner/predict/token_slices.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

#include "engine/schedule/generators.hpp"

namespace pipetune::tuner {

namespace {

// t(l, c) of a cost table: each stage's forward and fused backward as one set of slice terms
// (their terms add), the distinct ones kept (the stages of a pipeline mostly share their costs),
// and the transfers each way.
class SliceTimer {
 public:
  explicit SliceTimer(const schedule::CostTable& costs) {
    for (int r = 0; r < static_cast<int>(costs.stages.size()); ++r) {
      const auto f = costs.slice_terms(r, schedule::OpKind::F);
      const auto bw = costs.slice_terms(r, schedule::OpKind::BW);
      const schedule::CostTable::SliceTerms both{f.fixed + bw.fixed, f.per_length + bw.per_length,
                                                 f.attention + bw.attention};
      const bool seen = std::any_of(stages_.begin(), stages_.end(), [&](const auto& t) {
        return t.fixed == both.fixed && t.per_length == both.per_length &&
               t.attention == both.attention;
      });
      if (!seen) stages_.push_back(both);
    }
    latency_ = std::min(costs.p2p_latency, costs.p2p_time());
    bytes_ = costs.p2p_time() - latency_;
  }
  // Everything operator() reads, in order.
  void append_inputs(std::vector<double>& key) const {
    key.push_back(latency_);
    key.push_back(bytes_);
    for (const auto& t : stages_) key.insert(key.end(), {t.fixed, t.per_length, t.attention});
  }
  double operator()(schedule::SliceShape shape) const {
    double slowest = 0.0;
    for (const auto& t : stages_) slowest = std::max(slowest, t.at(shape));
    return slowest + 2.0 * (latency_ + bytes_ * shape.length);
  }

 private:
  std::vector<schedule::CostTable::SliceTerms> stages_;
  double latency_ = 0.0, bytes_ = 0.0;
};

schedule::SliceShape shape_of(std::int64_t seq, std::int64_t tokens, std::int64_t context) {
  const double L = static_cast<double>(seq);
  return {static_cast<double>(tokens) / L, static_cast<double>(context) / L};
}

}  // namespace

double slice_time(const schedule::CostTable& costs, std::int64_t seq, std::int64_t tokens,
                  std::int64_t context) {
  return SliceTimer(costs)(shape_of(seq, tokens, context));
}

TokenSlicing best_token_slicing(const schedule::CostTable& costs, int stages, int microbatches,
                                std::int64_t seq, int grid, int granularity) {
  const std::int64_t g = std::max(1, granularity);
  const int n = static_cast<int>(
      std::min<std::int64_t>(std::max<std::int64_t>(1, seq / g), std::max(1, grid)));
  // The grid's cut points: near-even, on multiples of the granularity, and the sequence's end.
  std::vector<std::int64_t> at;
  for (int i = 0; i < n; ++i) {
    const std::int64_t cut = seq * i / n / g * g;
    if (at.empty() || cut > at.back()) at.push_back(cut);
  }
  at.push_back(seq);
  const std::size_t N = at.size();
  // t[i * N + j]: the slice from cut i to cut j; `edges` every slice, by its time.
  std::vector<double> t(N * N, 0.0);
  struct Edge {
    double time;
    std::size_t i, j;
  };
  std::vector<Edge> edges;
  edges.reserve(N * (N - 1) / 2);
  const SliceTimer slice(costs);
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t j = i + 1; j < N; ++j) {
      t[i * N + j] = slice(shape_of(seq, at[j] - at[i], at[i]));
      edges.push_back({t[i * N + j], i, j});
    }
  // Taken shortest first from a heap: the caps below usually stop well before the last slice,
  // so most of a full sort would be wasted (the order among equal times does not matter).
  const auto later = [](const Edge& a, const Edge& b) { return a.time > b.time; };
  std::make_heap(edges.begin(), edges.end(), later);
  std::size_t left = edges.size();  // edges[0, left) is the heap; the popped follow, in order
  const auto pop = [&] {
    std::pop_heap(edges.begin(), edges.begin() + static_cast<std::ptrdiff_t>(left), later);
    return edges[--left];
  };

  constexpr double kNone = std::numeric_limits<double>::infinity();
  std::vector<double> S(N, kNone);
  std::vector<std::size_t> last(N, 0);
  // The least sum of slice times to the last cut, with no cap on a slice's time.
  const auto least_sum = [&] {
    S[0] = 0.0;
    for (std::size_t j = 1; j < N; ++j)
      for (std::size_t i = 0; i < j; ++i) S[j] = std::min(S[j], S[i] + t[i * N + j]);
    return S[N - 1];
  };
  // S(x) under a cap on each slice's time, through the slices the cap admits: each cut's least
  // sum and, of the cuts reaching it with that sum, the first, kept in `last`. A higher cap only
  // admits slices, so the sums only fall: each admitted slice is relaxed, and so are the slices
  // from a cut whose sum fell, cut by cut in order (a cut's sum is final before its slices are
  // relaxed). A tie keeps the first cut, as working every sum out again would.
  std::vector<std::vector<std::size_t>> reaches(N);  // reaches[i]: the j of slices i..j in
  std::vector<char> fell(N, 0);
  std::size_t first_fell = N;
  const auto relax = [&](std::size_t i, std::size_t j) {
    const double sum = S[i] + t[i * N + j];
    if (sum < S[j]) {
      S[j] = sum;
      last[j] = i;
      fell[j] = 1;
      first_fell = std::min(first_fell, j);
    } else if (sum == S[j] && sum < kNone && i < last[j]) {
      last[j] = i;
    }
  };
  const auto relax_from_fallen = [&] {
    for (std::size_t i = first_fell; i < N; ++i) {
      if (!fell[i]) continue;
      fell[i] = 0;
      for (const std::size_t j : reaches[i]) relax(i, j);
    }
    first_fell = N;
    return S[N - 1];
  };
  const double m = microbatches, hops = stages - 1;
  const double uncapped = least_sum();  // no cap lowers the sum further
  TokenSlicing best;
  best.estimate = kNone;
  // Caps rise through the slices' times. A cap admits the slices of its time; the sums (and the
  // cuts they take) change only from the first cut such a slice shortens or ties (the cuts before
  // it keep theirs), and where none does the estimate only grows with the cap: a cap is worked
  // out from there, or skipped.
  S.assign(N, kNone);
  S[0] = 0.0;
  while (left > 0) {
    const double cap = edges.front().time;
    // Once (p - 1) cap alone with the least sum cannot beat the best, no higher cap can.
    if (hops * cap + m * uncapped >= best.estimate) break;
    // A tie counts: the full sum takes the first cut reaching the least, which may be the new
    // slice's.
    bool changes = false;
    while (left > 0 && edges.front().time == cap) {
      const Edge x = pop();
      reaches[x.i].push_back(x.j);
      changes = changes || (S[x.i] < kNone && S[x.i] + cap <= S[x.j]);
      relax(x.i, x.j);
    }
    const double sum = relax_from_fallen();
    if (!changes) continue;
    if (sum == kNone) continue;
    const double estimate = m * sum + hops * cap;
    if (estimate < best.estimate) {
      best.estimate = estimate;
      best.tokens.clear();
      for (std::size_t j = N - 1; j > 0; j = last[j])
        best.tokens.push_back(static_cast<int>(at[j] - at[last[j]]));
      std::reverse(best.tokens.begin(), best.tokens.end());
    }
  }
  return best;
}

namespace {

constexpr int kSlicingGrid = 32;

bool chooses_slices(const spec::ParallelPlan& plan) {
  return schedule::supports_slices(plan.schedule) && plan.slices <= 0 && plan.slice_tokens.empty();
}

// Under sequence parallelism a slice's micro_batch_size x tokens rows split over tp.
int slice_granularity(const spec::ParallelPlan& plan) {
  if (!plan.sequence_parallel || plan.tp <= 1) return 1;
  return plan.tp / std::gcd(plan.tp, std::max(1, plan.micro_batch_size));
}

}  // namespace

void choose_token_slices(spec::ParallelPlan& plan, std::int64_t seq,
                         const schedule::CostTable& costs) {
  if (!chooses_slices(plan)) return;
  plan.slice_tokens = best_token_slicing(costs, plan.pp, plan.microbatches, seq, kSlicingGrid,
                                         slice_granularity(plan))
                          .tokens;
}

void TokenSlicingCache::choose(spec::ParallelPlan& plan, std::int64_t seq,
                               const schedule::CostTable& costs) {
  if (!chooses_slices(plan)) return;
  const int granularity = slice_granularity(plan);
  std::vector<double> key{static_cast<double>(seq), static_cast<double>(plan.pp),
                          static_cast<double>(plan.microbatches), static_cast<double>(granularity)};
  SliceTimer(costs).append_inputs(key);
  if (const auto* kept = recent_.find([&](const auto& e) { return e.first == key; })) {
    plan.slice_tokens = kept->second;
    return;
  }
  plan.slice_tokens =
      best_token_slicing(costs, plan.pp, plan.microbatches, seq, kSlicingGrid, granularity).tokens;
  recent_.add({std::move(key), plan.slice_tokens});
}

}  // namespace pipetune::tuner
