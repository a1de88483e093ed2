#include "engine/schedule/generators/linear_common.hpp"

#include <algorithm>
#include <utility>

#include "engine/errors.hpp"
#include "engine/schedule/dependencies.hpp"
#include "engine/schedule/validator.hpp"

namespace pipetune::schedule::linear {

void fail(std::string_view generator, const std::string& rule) {
  throw ScheduleError(std::string(generator) + ": " + rule);
}

void fail(std::string_view generator, std::vector<std::string> fields, const std::string& rule) {
  fields.emplace_back("plan.schedule");
  throw ScheduleError(std::move(fields), std::string(generator) + ": " + rule);
}

void check_sizes(std::string_view generator, const GeneratorParams& params) {
  if (params.stages < 1)
    fail(generator, {"plan.pp"}, "stages must be positive, got " + std::to_string(params.stages));
  if (params.microbatches < 1)
    fail(generator, {"plan.microbatches"},
         "micro-batches must be positive, got " + std::to_string(params.microbatches));
}

void require_single_chunk(std::string_view generator, const GeneratorParams& params) {
  if (params.chunks != 0 && params.chunks != 1)
    throw ScheduleError({"plan.chunks", "plan.schedule"},
                        std::string(generator) +
                            " supports chunks=1 only, got chunks=" + std::to_string(params.chunks));
}

void require_no_vocab(std::string_view generator, const GeneratorParams& params) {
  if (params.vocab == VocabMode::None) return;
  const bool interlaced = params.vocab == VocabMode::Interlaced;
  throw ScheduleError({"plan.vocab", "plan.schedule"},
                      std::string(vocab_mode_name(params.vocab)) + " is supported on " +
                          (interlaced ? "1f1b" : "1f1b, interleaved-1f1b and v-half") +
                          " only, not on " + std::string(generator));
}

CostTable checked_planning_costs(std::string_view generator, const GeneratorParams& params) {
  CostTable costs = planning_costs(params);
  if (static_cast<int>(costs.stages.size()) != params.stages)
    fail(generator, "cost table has " + std::to_string(costs.stages.size()) + " stages, expected " +
                        std::to_string(params.stages));
  return costs;
}

Schedule empty_schedule(std::string_view name, int stages, int microbatches, int chunks,
                        VocabMode vocab) {
  Schedule s;
  s.name = std::string(name);
  s.stages = stages;
  s.microbatches = microbatches;
  s.chunks = chunks;
  s.placement = Placement::Linear;
  s.vocab = vocab;
  s.ranks.resize(static_cast<std::size_t>(stages));
  return s;
}

int one_f_one_b_warmup(VocabMode mode, int p, int r) {
  switch (mode) {
    case VocabMode::Vocab2:
      return p - r;
    case VocabMode::Vocab1:
      return p - r + 1;
    case VocabMode::Interlaced:
      return (3 * p) / 2 - r - 1;
    case VocabMode::None:
      break;
  }
  return p - r - 1;
}

void append_one_f_one_b(std::vector<Op>& ops, int microbatches, int warmup, OpKind backward) {
  const int w = std::clamp(warmup, 0, microbatches);
  for (int i = 0; i < w; ++i) ops.push_back({OpKind::F, 0, i});
  for (int i = 0; i < microbatches - w; ++i) {
    ops.push_back({OpKind::F, 0, w + i});
    ops.push_back({backward, 0, i});
  }
  for (int i = microbatches - w; i < microbatches; ++i) ops.push_back({backward, 0, i});
}

Schedule validated(Schedule s, const GeneratorParams& params) {
  validate_generated(s, params);
  return s;
}

namespace {

struct TimedHooks {
  const CostTable& costs;
  double p2p;
  std::vector<double> clock;
  BarrierEnds barriers;

  double op(int rank, std::size_t, const Op& op, const Requirement& req, double req_time) {
    double& c = clock[static_cast<std::size_t>(rank)];
    const double ready = req.present ? req_time + (req.transfer ? p2p : 0.0) : 0.0;
    c = std::max(c, ready) + costs.cost(rank, op.kind);
    return c;
  }
  double barrier(const Event&, double last_arrival) {
    return barriers.complete(last_arrival, costs.collective_time);
  }
  void wait(int rank, double until) {
    double& c = clock[static_cast<std::size_t>(rank)];
    c = std::max(c, until);
  }
};

}  // namespace

double estimated_makespan(const Schedule& s, const CostTable& costs) {
  return estimated_time(s, costs).makespan;
}

EstimatedTime estimated_time(const Schedule& s, const CostTable& costs) {
  TimedHooks hooks{costs, costs.p2p_time(), std::vector<double>(static_cast<std::size_t>(s.stages)),
                   BarrierEnds{}};
  execute(s, hooks);
  EstimatedTime t;
  t.makespan = *std::max_element(hooks.clock.begin(), hooks.clock.end());
  t.simulated = hooks.barriers.simulated(t.makespan);
  return t;
}

Planner::Planner(Schedule& s, const CostTable& costs)
    : schedule_(s),
      costs_(costs),
      events_(s),
      p2p_(costs.p2p_time()),
      clock_(static_cast<std::size_t>(s.stages), 0.0),
      op_end_(static_cast<std::size_t>(s.stages), 0.0),
      idle_since_(static_cast<std::size_t>(s.stages), -1.0),
      barrier_of_(static_cast<std::size_t>(s.stages)),
      in_barrier_(static_cast<std::size_t>(s.stages), 0) {}

std::optional<double> Planner::makespan() const {
  if (!as_executed_) return std::nullopt;
  return op_end_.empty() ? 0.0 : *std::max_element(op_end_.begin(), op_end_.end());
}

std::optional<double> Planner::simulated_iteration() const {
  const std::optional<double> end = makespan();
  return end ? barriers_.simulated(*end) : std::nullopt;
}

void Planner::watch(int rank, double& slot) {
  const Watch w{rank, first_watch(slot)};
  if (free_watch_ >= 0) {
    const int i = free_watch_;
    free_watch_ = watches_[static_cast<std::size_t>(i)].next;
    watches_[static_cast<std::size_t>(i)] = w;
    slot = -(2.0 + i);
  } else {
    watches_.push_back(w);
    slot = -(2.0 + static_cast<double>(watches_.size() - 1));
  }
}

void Planner::run(int rank, const Op& op, double ready) {
  const auto r = static_cast<std::size_t>(rank);
  const double start = std::max(clock_[r], ready);
  if (start != std::max(op_end_[r], ready)) as_executed_ = false;
  const double done = start + costs_.cost(rank, op.kind);
  clock_[r] = done;
  op_end_[r] = done;
  idle_since_[r] = -1.0;
  if (!left_.empty()) {
    left_[r] -= costs_.cost(rank, op.kind);
    // A plan already timed apart from how it executes (!as_executed_) would be executed to time
    // it, perhaps sooner: it goes on.
    if (surely_past(done + left_[r], give_up_time_) && as_executed_) gave_up_ = true;
  }
  schedule_.ranks[r].push_back(op);
  const Production prod = production_of(schedule_, rank, op);
  if (!prod.present) return;
  if (!prod.joins_barrier) {
    produced(*events_.slot(prod.event), done);
    return;
  }
  if (events_.arrive(prod.event, done)) {
    produced(*events_.slot(prod.event),
             barriers_.complete(events_.last_arrival(prod.event), costs_.collective_time));
  }
  if (prod.waits_for_barrier) {
    barrier_of_[r] = prod.event;
    in_barrier_[r] = 1;
  }
}

std::vector<double> split_backward_work(const CostTable& costs, int stages, int microbatches) {
  std::vector<double> work(static_cast<std::size_t>(stages));
  for (int r = 0; r < stages; ++r)
    work[static_cast<std::size_t>(r)] =
        microbatches *
        (costs.cost(r, OpKind::F) + costs.cost(r, OpKind::B) + costs.cost(r, OpKind::W));
  return work;
}

void Planner::give_up_past(double time, std::vector<double> left) {
  if (!(time < std::numeric_limits<double>::infinity())) return;
  give_up_time_ = time;
  left_ = std::move(left);
}

void Planner::idle_until(int rank, double t) {
  const auto r = static_cast<std::size_t>(rank);
  if (idle_since_[r] < 0.0) idle_since_[r] = clock_[r];
  clock_[r] = std::max(clock_[r], t);
}

bool Planner::leave_barrier(int rank) {
  const auto r = static_cast<std::size_t>(rank);
  double& slot = *events_.slot(barrier_of_[r]);
  const double t = slot;
  if (t < 0.0) {
    watch(rank, slot);
    return false;
  }
  clock_[r] = std::max(clock_[r], t);
  op_end_[r] = std::max(op_end_[r], t);
  in_barrier_[r] = 0;
  return true;
}

void Planner::produced(double& slot, double time) {
  const int head = first_watch(slot);
  slot = time;
  for (int i = head; i >= 0;) {
    Watch& w = watches_[static_cast<std::size_t>(i)];
    const int next = w.next;
    const auto r = static_cast<std::size_t>(w.rank);
    woken_.push_back(w.rank);
    // An idling rank was waiting for this, among others: let it look again at `time`.
    if (idle_since_[r] >= 0.0 && clock_[r] > time) {
      clock_[r] = std::max(idle_since_[r], time);
      rewound_.push_back(w.rank);
    }
    w.next = free_watch_;
    free_watch_ = i;
    i = next;
  }
}

EarliestRank::EarliestRank(int ranks) {
  leaves_ = 1;
  while (leaves_ < static_cast<std::size_t>(std::max(ranks, 1))) leaves_ *= 2;
  node_.assign(2 * leaves_, 0);
  for (std::size_t i = 0; i < leaves_; ++i)
    node_[leaves_ + i] = node(kIneligible, static_cast<int>(i));
  for (std::size_t i = leaves_ - 1; i >= 1; --i)
    node_[i] = std::min(node_[2 * i], node_[2 * i + 1]);
}

void EarliestRank::set(int rank, double clock) {
  std::size_t i = leaves_ + static_cast<std::size_t>(rank);
  Node winner = node(clock, rank);
  node_[i] = winner;
  // The winner so far is carried up and meets only its sibling at each level: one comparison of
  // two integers, no reload of what the level below stored.
  for (; i > 1; i /= 2) {
    const Node sibling = node_[i ^ 1];
    winner = sibling < winner ? sibling : winner;
    node_[i / 2] = winner;
  }
}

}  // namespace pipetune::schedule::linear
