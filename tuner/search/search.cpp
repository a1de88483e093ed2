#include "tuner/search/search.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <queue>
#include <thread>

#include "engine/errors.hpp"
#include "tuner/search/placement_options.hpp"
#include "tuner/search/plan_enumeration.hpp"
#include "tuner/search/tuning_target.hpp"

namespace pipetune::tuner {

SearchResult search_plans(const SearchSpace& space, const PlanScorer& score,
                          const SearchProgress& progress, const std::atomic<bool>* cancel) {
  return search_plans(space, ScorerFactory([&score] { return Scorer(score); }), progress, cancel);
}

namespace {

// The scored plans that decide whether a bound can still matter: the `keep` fastest times and the
// Pareto staircase (time up, memory down) of feasible plans. Shared by the scoring threads.
class Frontier {
 public:
  explicit Frontier(std::size_t keep) : keep_(keep) {}

  void add(const CandidateScore& c) {
    if (!c.feasible) return;
    std::lock_guard lock(mutex_);
    fastest_.push(c.iteration_time);
    if (fastest_.size() > keep_) fastest_.pop();
    for (const auto& [t, m] : staircase_)
      if (t <= c.iteration_time && m <= c.peak_memory_bytes) return;  // dominated
    std::erase_if(staircase_, [&](const std::pair<double, double>& d) {
      return c.iteration_time <= d.first && c.peak_memory_bytes <= d.second;
    });
    staircase_.emplace_back(c.iteration_time, c.peak_memory_bytes);
  }

  // True when no plan with this bound can enter the `keep` fastest or the Pareto front.
  bool beats(const CandidateBound& b) const {
    std::lock_guard lock(mutex_);
    if (fastest_.size() < keep_ || fastest_.top() > b.iteration_time) return false;
    for (const auto& [t, m] : staircase_)
      if (t <= b.iteration_time && m <= b.peak_memory_bytes) return true;
    return false;
  }

 private:
  std::size_t keep_;
  mutable std::mutex mutex_;
  std::priority_queue<double> fastest_;               // the keep_ smallest times, largest on top
  std::vector<std::pair<double, double>> staircase_;  // (time, memory), none dominating another
};

// The times of the plans scored so far, shared by the scoring threads: what a plan's lower plan
// (Scorer::lower) was scored at.
class ScoredTimes {
 public:
  void add(const spec::ParallelPlan& plan, const std::string& vocab_label, double time) {
    std::string key = plan_summary(plan, vocab_label);
    std::lock_guard lock(mutex_);
    times_[std::move(key)].emplace_back(plan, time);
  }
  std::optional<double> find(const spec::ParallelPlan& plan, const std::string& vocab_label) const {
    const std::string key = plan_summary(plan, vocab_label);
    std::lock_guard lock(mutex_);
    const auto it = times_.find(key);
    if (it == times_.end()) return std::nullopt;
    for (const auto& [scored, time] : it->second)
      if (scored == plan) return time;
    return std::nullopt;
  }

 private:
  mutable std::mutex mutex_;
  // By the plan's summary, which plans differing only in what it does not print share.
  std::map<std::string, std::vector<std::pair<spec::ParallelPlan, double>>> times_;
};

// The fewest items a pool's thread takes in a row (run_pool): bounds cost microseconds, scores
// milliseconds. 1: one at a time, in order.
constexpr std::size_t kBoundBlock = 64;
constexpr std::size_t kScoreBlock = 8;

// Runs body(scorer, i) for i in [0, n) on `threads` threads, each with its own scorer, until
// done, cancelled or failed. done counts finished items. A thread takes a run of neighbours, a
// quarter of its share of what is left and at least `block` (so the runs shrink to `block` by the
// end and no thread is left with a long one): neighbours in the enumeration share op costs, token
// slicings and planned schedules, which each scorer keeps for a few recent plans: items handed to
// alternate threads have both threads work them out. `block` 1 hands out single items in order.
template <class Body>
void run_pool(int threads, std::size_t n, const ScorerFactory& make_scorer,
              const std::atomic<bool>* cancel, std::atomic<std::size_t>& done,
              const SearchProgress& progress, std::int64_t progress_total,
              std::int64_t progress_base, std::size_t block, Body&& body) {
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto fail = [&] {
    std::lock_guard lock(failure_mutex);
    if (!failure) failure = std::current_exception();
    failed = true;
  };
  auto worker = [&] {
    Scorer scorer;
    try {
      scorer = make_scorer();
    } catch (...) {
      fail();
      return;
    }
    for (;;) {
      std::size_t first = next.load(), take = 1;
      do {
        if (first >= n) return;
        if (block > 1)
          take = std::max(block, (n - first) / (4 * static_cast<std::size_t>(threads)));
      } while (!next.compare_exchange_weak(first, first + take));
      for (std::size_t i = first; i < std::min(n, first + take); ++i) {
        if (failed.load() || (cancel != nullptr && cancel->load())) return;
        try {
          body(scorer, i);
        } catch (...) {
          fail();
        }
        done.fetch_add(1);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  while (progress && done.load() < n && !failed.load() && !(cancel != nullptr && cancel->load())) {
    progress(progress_base + static_cast<std::int64_t>(done.load()), progress_total);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

// What became of each job: its score, the schedule error that pruned it, or its skip by a bound.
struct JobOutcomes {
  explicit JobOutcomes(std::size_t n) : scores(n), errors(n), skipped(n, 0), over_memory(n, 0) {}
  std::vector<std::optional<CandidateScore>> scores;
  std::vector<std::string> errors;
  std::vector<char> skipped;
  std::vector<char> over_memory;  // not scored: its bound's least memory does not fit
};

// With no feasible plan the search reports the one that came closest to fitting, which may be
// one the bound skipped as unable to fit: those whose bound is at most the least simulated peak
// are scored, least bound first, until none can come closer.
void score_closest_over_memory(const std::vector<SearchJob>& jobs,
                               const std::vector<CandidateBound>& bounds,
                               const ScorerFactory& make_scorer, JobOutcomes& out) {
  double least = INFINITY;
  std::vector<std::size_t> over;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (out.over_memory[i]) over.push_back(i);
    if (const auto& s = out.scores[i]) {
      if (s->feasible) return;
      least = std::min(least, s->peak_memory_bytes);
    }
  }
  if (over.empty()) return;
  std::stable_sort(over.begin(), over.end(), [&](std::size_t a, std::size_t b) {
    return bounds[a].peak_memory_bytes < bounds[b].peak_memory_bytes;
  });
  Scorer scorer = make_scorer();
  for (const std::size_t i : over) {
    if (bounds[i].peak_memory_bytes > least) break;  // ties too: the first in order is reported
    spec::ParallelPlan plan = jobs[i].plan;
    if (!bounds[i].slice_tokens.empty()) plan.slice_tokens = bounds[i].slice_tokens;
    out.over_memory[i] = 0;
    try {
      out.scores[i] = scorer.score(plan);
    } catch (const InputError& e) {
      out.errors[i] = reason_key(e.what());
      continue;
    }
    least = std::min(least, out.scores[i]->peak_memory_bytes);
  }
}

// How far scoring got: items done (bounds and scores) of the total progress reports count.
struct ScoringProgress {
  std::int64_t total = 0;
  std::size_t done = 0;
};

// Scores every job on `threads` threads. With bounds (`bounded`), every plan is bounded first
// (cheap) and one whose least memory already overflows the device is not scored: it cannot fit,
// whatever its schedule. Branch and bound (with bounds and keep > 0): score in the order of the
// bounds, so the plans that decide what can be skipped come first; a plan whose bound the scored
// plans beat is skipped.
ScoringProgress score_jobs(const std::vector<SearchJob>& jobs, const ScorerFactory& make_scorer,
                           std::int64_t keep, bool bounded, int threads,
                           const SearchProgress& progress, const std::atomic<bool>* cancel,
                           JobOutcomes& out) {
  const std::size_t n = jobs.size();
  const bool pruned = bounded && keep > 0;
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  auto catch_input = [&](std::size_t i, auto&& what) {
    try {
      what();
    } catch (const InputError& e) {
      out.errors[i] = reason_key(e.what());
    }
  };

  const auto total = static_cast<std::int64_t>(bounded ? 2 * n : n);
  std::atomic<std::size_t> bounded_done{0};
  std::vector<CandidateBound> bounds(n);
  if (bounded) {
    run_pool(threads, n, make_scorer, cancel, bounded_done, progress, total, 0, kBoundBlock,
             [&](Scorer& sc, std::size_t i) {
               catch_input(i, [&] { bounds[i] = sc.bound(jobs[i].plan); });
             });
  }
  if (pruned) {
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return bounds[a].iteration_time < bounds[b].iteration_time;
    });
  }
  Frontier frontier(static_cast<std::size_t>(std::max<std::int64_t>(keep, 1)));
  ScoredTimes scored_times;
  std::atomic<std::size_t> done{0};
  // Scored in the order of the bounds one at a time (each plan scored may skip the next ones);
  // without pruning, in the enumeration's order, neighbours together.
  run_pool(threads, n, make_scorer, cancel, done, progress, total,
           bounded ? static_cast<std::int64_t>(n) : 0, pruned ? 1 : kScoreBlock,
           [&](Scorer& sc, std::size_t k) {
             const std::size_t i = order[k];
             if (!out.errors[i].empty()) return;
             if (bounded && !bounds[i].fits) {
               out.over_memory[i] = 1;
               return;
             }
             if (pruned && frontier.beats(bounds[i])) {
               out.skipped[i] = 1;
               return;
             }
             // The bound raised by what is known by now: a plan is never faster than plans scored
             // already that it only adds to (Scorer::lower), nor than its refined bound.
             CandidateBound b = bounds[i];
             const auto raise = [&](double time) {
               if (!(time > b.iteration_time)) return false;
               b.iteration_time = time;
               return frontier.beats(b);
             };
             if (pruned && sc.lower) {
               double slowest = 0.0;
               for (const spec::ParallelPlan& lower : sc.lower(jobs[i].plan))
                 if (const auto time = scored_times.find(lower, jobs[i].vocab_label))
                   slowest = std::max(slowest, *time);
               if (raise(slowest)) {
                 out.skipped[i] = 1;
                 return;
               }
             }
             // A refined time skips the plan only where the scored plans already beat its
             // memory: where none does (the Pareto front's low-memory end), it is not worked out.
             CandidateBound any_time = b;
             any_time.iteration_time = INFINITY;
             const bool refine = pruned && sc.refine && frontier.beats(any_time);
             catch_input(i, [&] {
               if (refine) {
                 if (const std::optional<double> refined = sc.refine(jobs[i].plan);
                     refined && raise(*refined)) {
                   out.skipped[i] = 1;
                   return;
                 }
               }
               if (bounded && !bounds[i].slice_tokens.empty()) {
                 spec::ParallelPlan sliced = jobs[i].plan;
                 sliced.slice_tokens = bounds[i].slice_tokens;
                 out.scores[i] = sc.score(sliced);
               } else {
                 out.scores[i] = sc.score(jobs[i].plan);
               }
               // A sparse plan may tie its dense twin and be left out of the results
               // (SparseTwins), so only the plans that stay bound the others.
               if (pruned && !jobs[i].plan.sparse_embedding_gradient) frontier.add(*out.scores[i]);
               if (pruned && sc.lower)
                 scored_times.add(jobs[i].plan, jobs[i].vocab_label, out.scores[i]->iteration_time);
             });
           });
  if (bounded && !(cancel != nullptr && cancel->load()))
    score_closest_over_memory(jobs, bounds, make_scorer, out);
  return {total, bounded_done.load() + done.load()};
}

// The ranked plans without EmbRace's sparse embedding gradient, by plan: a sparse plan that
// scores what its dense twin scores (the cost model hides the DP reduction either way) gains
// nothing for its setting, which the exports refuse, and is left out. Its twin comes before it
// (plan_enumeration adds the sparse variant after the plan). Sparse plans do not bound the
// others (score_jobs), so a plan skipped by a bound is beaten by plans that stay: where a twin
// was skipped, its tied sparse plan is beaten as well and trimmed.
class SparseTwins {
 public:
  void note(const ScoredPlan& s) {
    if (!s.plan.sparse_embedding_gradient && s.plan.dp > 1)  // the sparse gradient needs dp > 1
      scores_[plan_summary(s.plan, s.vocab_label)] = {s.score.iteration_time,
                                                      s.score.peak_memory_bytes};
  }
  bool ties(const spec::ParallelPlan& plan, const std::string& vocab_label,
            const CandidateScore& score) const {
    if (!plan.sparse_embedding_gradient) return false;
    spec::ParallelPlan dense = plan;
    dense.sparse_embedding_gradient = false;
    const auto it = scores_.find(plan_summary(dense, vocab_label));
    return it != scores_.end() && it->second.first == score.iteration_time &&
           it->second.second == score.peak_memory_bytes;
  }

 private:
  std::map<std::string, std::pair<double, double>> scores_;
};

// Each job's outcome into the result: a pruned reason, the smallest infeasible plan, or a
// ranked plan (unranked yet).
void tally_outcomes(std::vector<SearchJob>& jobs, const JobOutcomes& out, SearchResult& result) {
  PlacementTwins twins;
  SparseTwins sparse_twins;
  // At most the feasible plans are ranked: room for them at once (an exhaustive search ranks
  // tens of thousands, each moved again at every growth otherwise).
  std::size_t feasible = 0;
  for (const std::optional<CandidateScore>& score : out.scores)
    feasible += score && score->feasible;
  result.ranked.reserve(result.ranked.size() + feasible);
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (!out.errors[i].empty()) {
      ++result.pruned["schedule: " + out.errors[i]];
      continue;
    }
    if (out.skipped[i]) {
      ++result.pruned[std::string(kBoundPrunedReason)];
      continue;
    }
    if (out.over_memory[i]) {
      ++result.pruned[std::string(kOutOfMemoryReason)];
      continue;
    }
    const std::optional<CandidateScore>& score = out.scores[i];
    if (!score) continue;  // not reached (cancelled)
    ++result.candidates_evaluated;
    if (!score->feasible) {
      ++result.pruned[score->infeasible_reason.empty() ? "infeasible" : score->infeasible_reason];
      auto& least = result.smallest_infeasible;
      if (!least || score->peak_memory_bytes < least->score.peak_memory_bytes)
        least = ScoredPlan{jobs[i].plan, jobs[i].vocab_label, *score};
      continue;
    }
    if (twins.repeats(jobs[i].plan, score->iteration_time, score->peak_memory_bytes)) {
      ++result.pruned["placement scores the same as another placement of the plan"];
      continue;
    }
    if (sparse_twins.ties(jobs[i].plan, jobs[i].vocab_label, *score)) {
      ++result.pruned["sparse embedding gradient scores the same as the plan without it"];
      continue;
    }
    spec::ParallelPlan plan = std::move(jobs[i].plan);
    if (plan.slice_tokens.empty()) plan.slice_tokens = score->slice_tokens;
    result.ranked.push_back({std::move(plan), jobs[i].vocab_label, *score});
    sparse_twins.note(result.ranked.back());
  }
}

// Ranks the plans by throughput (then memory) and finds the Pareto front. With `trim`, keeps
// only the `keep` best and the front: branch and bound makes those exact, while which other
// plans were scored before a bound excluded them depends on the threads' timing, so a search
// gives the same results every time (the scored count stays the work done).
void rank_plans(SearchResult& result, std::int64_t keep, bool trim) {
  std::stable_sort(result.ranked.begin(), result.ranked.end(),
                   [](const ScoredPlan& a, const ScoredPlan& b) {
                     if (a.score.tokens_per_s != b.score.tokens_per_s)
                       return a.score.tokens_per_s > b.score.tokens_per_s;
                     return a.score.peak_memory_bytes < b.score.peak_memory_bytes;
                   });
  std::vector<ScoredPlan> kept;
  double least_memory = INFINITY;
  for (std::size_t r = 0; r < result.ranked.size(); ++r) {
    ScoredPlan& c = result.ranked[r];
    const bool on_front = c.score.peak_memory_bytes < least_memory;
    if (on_front) {
      result.pareto.push_back(c);
      least_memory = c.score.peak_memory_bytes;
    }
    if (trim && (on_front || static_cast<std::int64_t>(r) < keep)) kept.push_back(std::move(c));
  }
  if (trim) result.ranked = std::move(kept);
}

}  // namespace

SearchResult search_plans(const SearchSpace& space, const ScorerFactory& make_scorer,
                          const SearchProgress& progress, const std::atomic<bool>* cancel) {
  SearchResult result;
  std::vector<SearchJob> jobs = enumerate_plans(space, result);
  const int threads = search_threads(space);
  const bool bounded = make_scorer().bound != nullptr;
  JobOutcomes outcomes(jobs.size());
  const ScoringProgress scored =
      score_jobs(jobs, make_scorer, space.keep, bounded, threads, progress, cancel, outcomes);
  result.cancelled = cancel != nullptr && cancel->load();
  // A cancelled search reports how far it got, not 100%.
  if (progress)
    progress(result.cancelled ? static_cast<std::int64_t>(scored.done) : scored.total,
             scored.total);
  tally_outcomes(jobs, outcomes, result);
  // Trimmed to the exact part only where branch and bound pruned.
  rank_plans(result, space.keep, bounded && space.keep > 0 && !result.cancelled);
  return result;
}

}  // namespace pipetune::tuner
