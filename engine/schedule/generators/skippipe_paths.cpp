// skippipe-ca's path search: prioritized planning against reservation tables, each micro-batch's
// path by depth-first branch and bound (skippipe_paths.hpp says what and why).
#include "engine/schedule/generators/skippipe_paths.hpp"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace pipetune::schedule::skip_paths {

namespace {

using Interval = std::pair<double, double>;  // [start, end)

// A stage's reserved times: sorted, never overlapping.
class Reservations {
 public:
  // The earliest start >= t of a pass of `length` that overlaps no reservation.
  double fit(double t, double length) const {
    // Ends are sorted as starts are (no overlaps): skip the ones that end by t.
    auto it = std::upper_bound(busy_.begin(), busy_.end(), t,
                               [](double v, const Interval& iv) { return v < iv.second; });
    double s = t;
    for (; it != busy_.end(); ++it) {
      if (it->first >= s + length && (length > 0.0 || it->first > s)) return s;
      s = std::max(s, it->second);
    }
    return s;
  }
  void reserve(double start, double end) {
    const Interval iv{start, end};
    busy_.insert(std::upper_bound(busy_.begin(), busy_.end(), iv), iv);
  }
  // The first reservation end after t (infinity when none).
  double next_end_after(double t) const {
    auto it = std::upper_bound(busy_.begin(), busy_.end(), t,
                               [](double v, const Interval& iv) { return v < iv.second; });
    return it == busy_.end() ? std::numeric_limits<double>::infinity() : it->second;
  }

 private:
  std::vector<Interval> busy_;
};

// The most intervals of `held` that cover one instant of [a, e).
int most_held(const std::vector<Interval>& held, double a, double e) {
  std::vector<std::pair<double, int>> events;
  for (const Interval& iv : held)
    if (iv.first < e && iv.second > a) {
      events.emplace_back(std::max(iv.first, a), +1);
      events.emplace_back(iv.second, -1);
    }
  // Ends before starts at the same instant: [s, e) intervals that touch do not overlap.
  std::sort(events.begin(), events.end());
  int now = 0, most = 0;
  for (const auto& [t, d] : events) {
    now += d;
    most = std::max(most, now);
  }
  return most;
}

class Planner {
 public:
  explicit Planner(const PathProblem& p)
      : pr_(p),
        stages_(p.stages),
        last_(p.stages - 1),
        busy_(static_cast<std::size_t>(p.stages)),
        held_(static_cast<std::size_t>(p.stages)),
        capacity_(static_cast<std::size_t>(p.stages), 0) {
    const int middle = std::max(0, stages_ - 2);
    if (middle > 0) {
      const std::int64_t visits = std::int64_t{p.microbatches} * p.middle_visits;
      const auto cap = static_cast<int>((visits + middle - 1) / middle);
      for (int j = 1; j <= middle; ++j) capacity_[static_cast<std::size_t>(j)] = cap;
    }
    min_transfer_ = p.transfer.empty() ? 0.0 : std::numeric_limits<double>::infinity();
    for (double t : p.transfer) min_transfer_ = std::min(min_transfer_, t);
    min_forward_ = min_backward_ = std::numeric_limits<double>::infinity();
    for (int j = 1; j <= middle; ++j) {
      min_forward_ = std::min(min_forward_, cost(pr_.forward, j));
      min_backward_ = std::min(min_backward_, cost(pr_.backward, j));
    }
    if (middle == 0) min_forward_ = min_backward_ = 0.0;
    plan_.ranks.resize(static_cast<std::size_t>(stages_));
  }

  PathPlan run() {
    for (int mb = 0; mb < pr_.microbatches; ++mb) plan_one(mb);
    for (auto& ops : plan_.ranks)
      std::stable_sort(ops.begin(), ops.end(),
                       [](const TimedOp& a, const TimedOp& b) { return a.start < b.start; });
    return std::move(plan_);
  }

 private:
  static double cost(const std::vector<double>& v, int stage) {
    return v[static_cast<std::size_t>(stage)];
  }
  double transfer(int from, int to) const {
    if (pr_.transfer.empty()) return 0.0;
    return pr_.transfer[static_cast<std::size_t>(from) * static_cast<std::size_t>(stages_) +
                        static_cast<std::size_t>(to)];
  }
  Reservations& busy(int stage) { return busy_[static_cast<std::size_t>(stage)]; }
  std::vector<Interval>& held(int stage) { return held_[static_cast<std::size_t>(stage)]; }
  int capacity(int stage) const { return capacity_[static_cast<std::size_t>(stage)]; }

  // The search of one micro-batch: the path so far (stage 0 first) with its forwards' times.
  struct Search {
    int mb = 0;
    std::vector<int> path;
    std::vector<double> f_start, f_end;
    std::vector<char> on_path;
    // Load (SkipPipe's type 2): the micro-batches after this one, and how far the middle stages'
    // capacities may fall short of a full share for them (slack) before some later micro-batch
    // could not find k stages with room.
    int after = 0;
    std::int64_t slack = 0;
    // The best complete path: when its last backward ends, and its passes' times.
    double best = std::numeric_limits<double>::infinity();
    std::vector<int> best_path;
    std::vector<double> best_f_start, best_f_end, best_b_start, best_b_end;
    std::int64_t leaves = 0, nodes = 0;
    bool cut = false;  // the budget stopped it
  };

  // Whether the remaining picks can keep the middle stages' load feasible: after this micro-batch
  // takes its k stages, the r later ones need r k visits, k distinct stages each, which a stage
  // of capacity c can give min(c, r) of. Every stage with capacity > r that this one does not
  // take loses one unit of that sum, and the slack says how many may.
  bool load_feasible(const Search& s) const {
    const int chosen = static_cast<int>(s.path.size()) - 1;
    const int still = pr_.middle_visits - chosen;
    int tight_left = 0, open_left = 0;
    for (int j = 1; j < last_; ++j) {
      if (s.on_path[static_cast<std::size_t>(j)]) continue;
      if (capacity(j) > 0) ++open_left;
      if (capacity(j) > s.after) ++tight_left;
    }
    return open_left >= still && tight_left - still <= s.slack;
  }

  // A lower bound on when the micro-batch's last backward ends, from its path so far: the rest of
  // its forwards and every backward back to stage 0 run at their cheapest, without waiting.
  double lower_bound(const Search& s) const {
    if (last_ == 0) return s.f_end.back() + cost(pr_.backward, 0);  // one stage: F then BW
    const int chosen = static_cast<int>(s.path.size()) - 1;
    const int still = pr_.middle_visits - chosen;
    double t = s.f_end.back() + still * (min_forward_ + min_transfer_) + min_transfer_ +
               cost(pr_.forward, last_) + cost(pr_.backward, last_);
    for (int j : s.path) t += min_transfer_ + cost(pr_.backward, j);
    return t + still * (min_backward_ + min_transfer_);
  }

  // Whether stage `stage` can hold one more micro-batch over [a, e).
  bool has_room(int stage, double a, double e) {
    return most_held(held(stage), a, e) + 1 <= pr_.memory;
  }

  void time_leaf(Search& s) {
    ++s.leaves;
    std::vector<int> path = s.path;
    std::vector<double> f_start = s.f_start, f_end = s.f_end;
    if (last_ > 0) {
      const int from = path.back();
      const double a =
          busy(last_).fit(f_end.back() + transfer(from, last_), cost(pr_.forward, last_));
      path.push_back(last_);
      f_start.push_back(a);
      f_end.push_back(a + cost(pr_.forward, last_));
    }
    const std::size_t n = path.size();
    std::vector<double> b_start(n), b_end(n);
    double t = f_end.back();  // the loss: the last stage's backward follows its forward
    for (std::size_t i = n; i-- > 0;) {
      const int stage = path[i];
      if (i + 1 < n) t += transfer(path[i + 1], stage);
      b_start[i] = busy(stage).fit(t, cost(pr_.backward, stage));
      b_end[i] = b_start[i] + cost(pr_.backward, stage);
      t = b_end[i];
    }
    if (t >= s.best) return;
    for (std::size_t i = 0; i < n; ++i)
      if (!has_room(path[i], f_start[i], b_end[i])) return;
    s.best = t;
    s.best_path = std::move(path);
    s.best_f_start = std::move(f_start);
    s.best_f_end = std::move(f_end);
    s.best_b_start = std::move(b_start);
    s.best_b_end = std::move(b_end);
  }

  void extend(Search& s) {
    if (s.cut) return;
    if (++s.nodes > pr_.search_budget * (pr_.middle_visits + 1) ||
        (s.leaves >= pr_.search_budget && s.best_path.size() > 0)) {
      s.cut = true;
      return;
    }
    if (lower_bound(s) >= s.best) return;
    if (static_cast<int>(s.path.size()) - 1 == pr_.middle_visits) {
      time_leaf(s);
      return;
    }
    // The next middle stage: those with room, soonest forward first.
    struct Child {
      double start, end;
      int stage;
    };
    std::vector<Child> children;
    const int from = s.path.back();
    for (int j = 1; j < last_; ++j) {
      if (s.on_path[static_cast<std::size_t>(j)] || capacity(j) == 0) continue;
      const double a = busy(j).fit(s.f_end.back() + transfer(from, j), cost(pr_.forward, j));
      const double e = a + cost(pr_.forward, j);
      if (!has_room(j, a, e)) continue;  // full even for the forward alone
      children.push_back({a, e, j});
    }
    std::sort(children.begin(), children.end(), [](const Child& x, const Child& y) {
      return x.end != y.end ? x.end < y.end : x.stage < y.stage;
    });
    for (const Child& c : children) {
      s.path.push_back(c.stage);
      s.on_path[static_cast<std::size_t>(c.stage)] = 1;
      s.f_start.push_back(c.start);
      s.f_end.push_back(c.end);
      if (load_feasible(s)) extend(s);
      s.path.pop_back();
      s.on_path[static_cast<std::size_t>(c.stage)] = 0;
      s.f_start.pop_back();
      s.f_end.pop_back();
      if (s.cut) return;
    }
  }

  // The first instant after t at which some stage frees a pass or a micro-batch.
  double next_event_after(double t) {
    double next = std::numeric_limits<double>::infinity();
    for (int j = 0; j < stages_; ++j) {
      next = std::min(next, busy(j).next_end_after(t));
      for (const Interval& iv : held(j))
        if (iv.second > t) next = std::min(next, iv.second);
    }
    return next;
  }

  void plan_one(int mb) {
    Search s;
    s.mb = mb;
    s.on_path.assign(static_cast<std::size_t>(stages_), 0);
    s.after = pr_.microbatches - mb - 1;
    std::int64_t sum = 0;
    for (int j = 1; j < last_; ++j) sum += std::min(capacity(j), s.after + 1);
    s.slack = sum - std::int64_t{s.after + 1} * pr_.middle_visits;
    // Start as early as stage 0 allows; if no path has room there, start after the next pass or
    // micro-batch ends somewhere, until one does (once every earlier micro-batch is done, any
    // path has room).
    for (double t0 = 0.0;;) {
      const double a = busy(0).fit(t0, cost(pr_.forward, 0));
      s.path.assign(1, 0);
      s.f_start.assign(1, a);
      s.f_end.assign(1, a + cost(pr_.forward, 0));
      s.on_path.assign(static_cast<std::size_t>(stages_), 0);
      s.on_path[0] = 1;
      s.leaves = s.nodes = 0;
      s.cut = false;
      if (has_room(0, a, lower_bound(s))) extend(s);
      if (s.cut) plan_.exhaustive = false;
      if (!s.best_path.empty()) break;
      const double next = next_event_after(std::max(t0, a));
      if (next == std::numeric_limits<double>::infinity())
        throw std::logic_error("skippipe-ca: micro-batch " + std::to_string(mb) +
                               " found no path with every earlier one done");
      t0 = next;
    }
    commit(s);
  }

  void commit(const Search& s) {
    const std::size_t n = s.best_path.size();
    for (std::size_t i = 0; i < n; ++i) {
      const int stage = s.best_path[i];
      busy(stage).reserve(s.best_f_start[i], s.best_f_end[i]);
      busy(stage).reserve(s.best_b_start[i], s.best_b_end[i]);
      held(stage).emplace_back(s.best_f_start[i], s.best_b_end[i]);
      if (stage > 0 && stage < last_) --capacity_[static_cast<std::size_t>(stage)];
      auto& ops = plan_.ranks[static_cast<std::size_t>(stage)];
      ops.push_back({Op{OpKind::F, 0, s.mb, false}, s.best_f_start[i], s.best_f_end[i]});
      ops.push_back({Op{OpKind::BW, 0, s.mb, false}, s.best_b_start[i], s.best_b_end[i]});
    }
    plan_.paths.push_back(s.best_path);
    plan_.makespan = std::max(plan_.makespan, s.best);
  }

  const PathProblem& pr_;
  int stages_, last_;
  std::vector<Reservations> busy_;
  std::vector<std::vector<Interval>> held_;
  std::vector<int> capacity_;
  double min_transfer_ = 0.0, min_forward_ = 0.0, min_backward_ = 0.0;
  PathPlan plan_;
};

}  // namespace

PathPlan plan_paths(const PathProblem& problem) {
  const int p = problem.stages;
  if (p < 1 || problem.microbatches < 1)
    throw std::invalid_argument("skippipe-ca: stages and micro-batches must be positive");
  if (problem.middle_visits < 0 || problem.middle_visits > std::max(0, p - 2))
    throw std::invalid_argument("skippipe-ca: a path runs 0 to " +
                                std::to_string(std::max(0, p - 2)) + " middle stages, not " +
                                std::to_string(problem.middle_visits));
  if (problem.forward.size() != static_cast<std::size_t>(p) ||
      problem.backward.size() != static_cast<std::size_t>(p))
    throw std::invalid_argument("skippipe-ca: one forward and one backward cost per stage");
  if (!problem.transfer.empty() &&
      problem.transfer.size() != static_cast<std::size_t>(p) * static_cast<std::size_t>(p))
    throw std::invalid_argument("skippipe-ca: transfer times are stages x stages");
  if (problem.memory < 1)
    throw std::invalid_argument("skippipe-ca: a stage must hold at least one micro-batch");
  if (problem.search_budget < 1)
    throw std::invalid_argument("skippipe-ca: the search budget must be positive");
  return Planner(problem).run();
}

}  // namespace pipetune::schedule::skip_paths
