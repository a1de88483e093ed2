// zb-v: the ZB-V greedy of the zero-bubble repo (zbv.py try_v_schedule; schedules.md a.7), with
// per-stage costs. Two chunks per rank in a V, B/W split, and an activation cap of 2p chunk
// forwards (p micro-batches, the same as 1F1B; params.memory_limit overrides it, in micro-batch
// units). The greedy walks the stages in lock step with its own clock:
//   1. warm-up: one chunk-0 forward everywhere; then from the last stage back, extra chunk-0
//      forwards while memory allows and they end before the chunk-1 forward can arrive, then the
//      chunk-1 forward;
//   2. balance: later stages catch up so each has issued at least as many forwards as its
//      predecessor and more chunk-1 forwards, alternating chunks;
//   3. steady rounds: per stage one backward (the pending chunk-0 backward when the next stage
//      has sent its gradient, else the next chunk-1 backward), then one forward (chunk 1 when its
//      input is there, else chunk 0), inserting pending W while memory is over the cap, while a
//      whole W fits into the wait for a dependency, or when the wait exceeds the bubble this
//      stage may still take;
//   4. flush the remaining W.
// A pass is retried with the per-stage bubbles of the previous one as allowance while the worst
// stage bubble keeps shrinking, for each of four fill_f/fill_b variants; the best one is kept.
//
// With equal costs this is the reference, op for op. The reference assumes each op it picks is
// ready (true in its lock step with equal costs); with unequal per-stage costs that fails, so here
// a stage skips an op whose producer is not issued yet (or takes the other chunk's backward), and
// the steady rounds run until everything is issued instead of exactly 2m times.
#include <algorithm>
#include <array>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/generators/v_building_block.hpp"
#include "engine/schedule/validator.hpp"

namespace pipetune::schedule {

namespace {

// What a stage issues, in the order one micro-batch needs them on stage p-1.
enum Kind : int { kVF0 = 0, kVF1 = 1, kVB1 = 2, kVB0 = 3 };
constexpr double kEps = 1e-9;

int chunk_of(int kind) {
  return kind == kVF0 || kind == kVB0 ? 0 : 1;
}
bool is_forward(int kind) {
  return kind == kVF0 || kind == kVF1;
}

// Backwards whose W is still to run, (chunk, micro-batch) first in first out. Items stay in
// place until the pass ends, which spares the allocations a deque makes as it drains.
struct WQueue {
  std::vector<std::pair<int, int>> items;
  std::size_t head = 0;

  bool empty() const { return head == items.size(); }
  std::pair<int, int> pop() { return items[head++]; }
};

// The memory cap cannot hold what the greedy must issue.
struct OverBudget {};

struct Attempt {
  std::vector<std::vector<Op>> ops;
  std::vector<double> stage_bubble;
  double max_bubble = 0.0;
};

class ZbvGreedy {
 public:
  ZbvGreedy(int p, int m, const CostTable& costs, double max_mem)
      : p_(p),
        m_(m),
        comm_(costs.p2p_time()),
        max_mem_(max_mem),
        b_mem_(-(1.0 - costs.w_free_fraction)),
        w_mem_(-costs.w_free_fraction) {
    // The greedy asks for a cost at every op of every pass; the table's lookup checks the stage
    // and the kind each time, so the three it needs are copied out once.
    for (int s = 0; s < p; ++s)
      stage_costs_.push_back(
          {costs.cost(s, OpKind::F), costs.cost(s, OpKind::B), costs.cost(s, OpKind::W)});
  }

  // One greedy pass; `approved` is the previous pass's per-stage bubble (empty on the first).
  Attempt run(bool fill_f, bool fill_b, const std::vector<double>& approved) {
    reset(approved);
    warm_up();
    balance();
    // With equal costs every round issues one backward per stage, so 2m rounds finish (the
    // reference's loop). Unequal costs can leave a stage without a ready op in some round; it
    // then skips, and further rounds run until everything is issued.
    while (issued_ < 4 * p_ * m_) {
      const int before = issued_;
      place_backwards(fill_b);
      place_forwards(fill_f);
      if (issued_ == before) throw std::logic_error("zb-v: no stage can issue an op");
    }
    for (int s = 0; s < p_; ++s)
      while (!pending_w_[at(s)].empty()) put_w(s);
    Attempt a;
    a.ops = std::move(ops_);
    a.stage_bubble = bubble_;
    a.max_bubble = max_stage_bubble(-1);
    return a;
  }

 private:
  void reset(const std::vector<double>& approved) {
    count_.assign(at(p_), {0, 0, 0, 0});
    end_.assign(at(p_) * 4 * at(m_), -1.0);
    cur_.assign(at(p_), 0.0);
    mem_.assign(at(p_), 0.0);
    bubble_.assign(at(p_), 0.0);
    worst_bubble_ = 0.0;
    pending_w_.assign(at(p_), {});
    for (auto& pending : pending_w_) pending.items.reserve(2 * at(m_));
    ops_.assign(at(p_), {});
    for (auto& ops : ops_) ops.reserve(6 * at(m_));
    issued_ = 0;
    approved_ = approved;
    max_approved_ = approved.empty() ? -1.0 : *std::max_element(approved.begin(), approved.end());
  }

  double& end(int stage, int kind, int mb) {
    // Micro-batch major: a round touches every stage at about the same micro-batch, which then
    // shares cache lines (stage-major rows 4 KiB apart all fell into one cache set).
    return end_[(at(mb) * at(p_) + at(stage)) * 4 + at(kind)];
  }
  double cost(int stage, OpKind k) const {
    const auto& c = stage_costs_[at(stage)];
    return k == OpKind::F ? c[0] : k == OpKind::B ? c[1] : c[2];
  }

  // The worst bubble so far, or what the previous pass allows this stage beyond its own.
  double max_stage_bubble(int stage) const {
    double b = worst_bubble_;
    if (stage >= 0 && !approved_.empty()) b = std::max(b, max_approved_ - approved_[at(stage)]);
    return b;
  }

  // Whether the next op of `kind` on `stage` can be issued: one is left, its predecessor on the
  // stage is issued, and so is its producer on the neighbouring stage. The reference assumes
  // this holds (true with equal costs); with unequal costs the greedy checks it.
  bool ready(int stage, int kind) {
    const int mb = count_[at(stage)][at(kind)];
    if (mb >= m_) return false;
    if (kind != kVF0 && end(stage, kind - 1, mb) < 0.0) return false;
    const bool has_dep = (kind == kVF0 || kind == kVB1) ? stage > 0 : stage < p_ - 1;
    return !has_dep || dependency_end(stage, kind) >= 0.0;
  }

  // Whether stages first..last can each hold one more chunk forward without running a W.
  bool room_for_forward(int first, int last) const {
    for (int j = first; j <= last; ++j)
      if (mem_[at(j)] + 1.0 > max_mem_ + kEps) return false;
    return true;
  }

  // The cross-stage producer this op waits for, or -1 when it has none.
  __attribute__((always_inline)) double dependency_end(int stage, int kind) {
    const int mb = count_[at(stage)][at(kind)];
    const bool from_prev = kind == kVF0 || kind == kVB1;  // flows towards higher stages
    if (from_prev && stage > 0) return end(stage - 1, kind, mb);
    if (!from_prev && stage < p_ - 1) return end(stage + 1, kind, mb);
    return -1.0;
  }

  void put(int kind, int stage) {
    const OpKind k = is_forward(kind) ? OpKind::F : OpKind::B;
    const double c = cost(stage, k);
    const double no_bubble = cur_[at(stage)] + c;
    double t = no_bubble;
    const int mb = count_[at(stage)][at(kind)];
    if (mb >= m_) throw std::logic_error("zb-v: issued too many ops of one kind");
    const double delta = is_forward(kind) ? 1.0 : b_mem_;
    if (mem_[at(stage)] + delta > max_mem_ + kEps) throw OverBudget{};
    if (kind != kVF0 && end(stage, kind - 1, mb) < 0.0)
      throw std::logic_error("zb-v: op issued before its predecessor on the stage");
    const bool has_dep = (kind == kVF0 || kind == kVB1) ? stage > 0 : stage < p_ - 1;
    if (has_dep) {
      const double d = dependency_end(stage, kind);
      if (d < 0.0) throw std::logic_error("zb-v: op issued before its cross-stage dependency");
      t = std::max(t, d + comm_ + c);
    }
    if (count_[at(stage)][kVF0] > 0) {
      bubble_[at(stage)] += t - no_bubble;
      worst_bubble_ = std::max(worst_bubble_, bubble_[at(stage)]);
    }
    end(stage, kind, mb) = t;
    cur_[at(stage)] = t;
    mem_[at(stage)] += delta;
    ops_[at(stage)].push_back({k, static_cast<std::int16_t>(chunk_of(kind)), mb});
    if (!is_forward(kind)) pending_w_[at(stage)].items.push_back({chunk_of(kind), mb});
    ++count_[at(stage)][at(kind)];
    ++issued_;
  }

  void put_w(int stage) {
    const auto [chunk, mb] = pending_w_[at(stage)].pop();
    cur_[at(stage)] += cost(stage, OpKind::W);
    mem_[at(stage)] += w_mem_;
    ops_[at(stage)].push_back({OpKind::W, static_cast<std::int16_t>(chunk), mb});
  }

  // Pending W fill the wait for `dep_end` when a whole W fits into it; one more goes in when the
  // wait is longer than the bubble this stage may still take (and `fill` allows it).
  void fill_wait(int stage, double dep_end, bool fill) {
    auto& pending = pending_w_[at(stage)];
    if (dep_end < 0.0) return;
    while (!pending.empty() && dep_end + comm_ >= cur_[at(stage)] + cost(stage, OpKind::W))
      put_w(stage);
    if (fill && !pending.empty() &&
        dep_end + comm_ - cur_[at(stage)] > max_stage_bubble(stage) - bubble_[at(stage)])
      put_w(stage);
  }

  void warm_up() {
    for (int i = 0; i < p_; ++i) put(kVF0, i);
    for (int i = p_ - 1; i >= 0; --i) {
      if (i < p_ - 1) {
        // Extra chunk-0 forwards on stages 0..i while they end before the chunk-1 forward of
        // micro-batch 0 arrives from stage i+1, keeping room for the forwards still to come.
        const double arrival = end(i + 1, kVF1, 0) + comm_;
        while (mem_[at(i)] + 2.0 + 2.0 * i <= max_mem_ + kEps &&
               cur_[at(i)] + cost(i, OpKind::F) <= arrival && count_[at(i)][kVF0] < m_ &&
               room_for_forward(0, i))
          for (int j = 0; j <= i; ++j) put(kVF0, j);
      }
      put(kVF1, i);
    }
  }

  void balance() {
    int chunk = 0;
    for (int i = 1; i < p_; ++i) {
      auto behind = [&] {
        const auto& c = count_[at(i)];
        const auto& prev = count_[at(i - 1)];
        return c[kVF0] + c[kVF1] < prev[kVF0] + prev[kVF1] ||
               (c[kVF1] <= prev[kVF1] && prev[kVF1] < m_);
      };
      // Sweeps that issue nothing twice in a row (both chunks blocked, unequal costs) end the
      // catch-up; the steady rounds take over.
      for (int idle = 0; behind() && idle < 2;) {
        bool progress = false;
        for (int j = p_ - 1; j >= i; --j) {
          const int kind = chunk == 0 ? kVF0 : kVF1;
          if (ready(j, kind) && room_for_forward(j, j)) {
            put(kind, j);
            progress = true;
          }
        }
        idle = progress ? 0 : idle + 1;
        chunk = 1 - chunk;
      }
    }
  }

  void place_backwards(bool fill_b) {
    for (int i = 0; i < p_; ++i)
      while (mem_[at(i)] + b_mem_ > max_mem_ + kEps) {
        if (pending_w_[at(i)].empty()) throw OverBudget{};
        put_w(i);
      }
    // Chunk-0 backwards run from the last stage down, chunk-1 backwards from stage 0 up.
    auto& b0_stages = b0_stages_;
    auto& b1_stages = b1_stages_;
    b0_stages.clear();
    b1_stages.clear();
    for (int i = 0; i < p_; ++i) {
      const auto& c = count_[at(i)];
      if (c[kVB0] >= c[kVB1]) {
        b1_stages.push_back(i);
      } else if (i == p_ - 1 || c[kVB1] >= m_ || end(i + 1, kVB0, c[kVB0]) >= 0.0) {
        b0_stages.push_back(i);
      } else {
        b1_stages.push_back(i);
      }
    }
    auto& order = order_;
    order.clear();
    for (auto it = b0_stages.rbegin(); it != b0_stages.rend(); ++it) order.push_back({*it, kVB0});
    for (int i : b1_stages) order.push_back({i, kVB1});
    for (auto [i, kind] : order) {
      if (!ready(i, kind)) {
        // Unequal costs: take the other chunk's backward if that one can go, else skip a round.
        const int other = kind == kVB0 ? kVB1 : kVB0;
        if (!ready(i, other)) continue;
        kind = other;
      }
      // Chunk-0 backwards always fill a long wait with a W; chunk-1 only with fill_b.
      fill_wait(i, dependency_end(i, kind), kind == kVB0 || fill_b);
      put(kind, i);
    }
  }

  void place_forwards(bool fill_f) {
    for (int i = 0; i < p_; ++i) {
      const auto& c = count_[at(i)];
      if (c[kVF1] >= m_) continue;
      int kind = -1;
      if (c[kVF1] >= c[kVF0]) {
        kind = kVF0;
      } else if (i == p_ - 1 || end(i + 1, kVF1, c[kVF1]) >= 0.0) {
        kind = kVF1;
      } else if (c[kVF0] < m_ && (i == 0 || end(i - 1, kVF0, c[kVF0]) >= 0.0)) {
        kind = kVF0;
      }
      if (kind < 0 || !ready(i, kind)) continue;
      while (mem_[at(i)] + 1.0 > max_mem_ + kEps && !pending_w_[at(i)].empty()) put_w(i);
      if (mem_[at(i)] + 1.0 > max_mem_ + kEps) continue;  // wait for backwards to free memory
      fill_wait(i, dependency_end(i, kind), fill_f);
      put(kind, i);
    }
  }

  int p_, m_;
  double comm_, max_mem_, b_mem_, w_mem_;
  std::vector<std::array<double, 3>> stage_costs_;  // F, B, W per stage
  std::vector<std::array<int, 4>> count_;
  std::vector<double> end_, cur_, mem_, bubble_, approved_;
  // Bubbles only grow, so the worst one is a running maximum rather than a scan over the stages
  // for every op that may fill its wait with a W.
  double worst_bubble_ = 0.0;
  double max_approved_ = -1.0;
  std::vector<WQueue> pending_w_;
  std::vector<std::vector<Op>> ops_;
  // Scratch of place_backwards, kept across rounds so that a round allocates nothing.
  std::vector<int> b0_stages_, b1_stages_;
  std::vector<std::pair<int, int>> order_;
  int issued_ = 0;  // F and B issued so far (W not counted)
};

std::string format_units(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

}  // namespace

Schedule generate_zb_v(const GeneratorParams& params) {
  check_v_params(params, "zb-v", /*vocab_ok=*/false);
  const int p = params.stages;
  const int m = params.microbatches;
  const CostTable costs = planning_costs(params);
  // Budget in chunk forwards: 2p (= p micro-batches, 1F1B's peak) unless given.
  const double limit_mb = params.memory_limit > 0.0 ? params.memory_limit : static_cast<double>(p);
  // The greedy's warm-up fills the last stage with 2p chunk forwards before its first backward;
  // below that it cannot schedule at all.
  if (limit_mb < static_cast<double>(p))
    throw ScheduleError("zb-v: memory_limit=" + format_units(limit_mb) +
                        " micro-batches is below stages=" + std::to_string(p) +
                        ", the least the ZB-V greedy schedules in (1F1B's peak)");
  ZbvGreedy greedy(p, m, costs, 2.0 * limit_mb);

  bool found = false;
  Attempt best;
  std::string why;
  for (bool fill_b : {true, false}) {
    for (bool fill_f : {true, false}) {
      try {
        // Retry with the previous pass's stage bubbles as allowance while the worst improves.
        Attempt cur = greedy.run(fill_f, fill_b, {});
        for (int retry = 0; retry < 64; ++retry) {
          Attempt next = greedy.run(fill_f, fill_b, cur.stage_bubble);
          if (!(next.max_bubble < cur.max_bubble)) break;
          cur = std::move(next);
        }
        if (!found || cur.max_bubble < best.max_bubble) best = std::move(cur);
        found = true;
      } catch (const OverBudget&) {
        why = "memory_limit=" + format_units(limit_mb) + " micro-batches is too small";
      } catch (const std::logic_error& e) {
        why = std::string(e.what()).substr(6);  // drop the "zb-v: " prefix
      }
    }
  }
  if (!found)
    throw ScheduleError("zb-v: the greedy found no schedule for stages=" + std::to_string(p) +
                        " microbatches=" + std::to_string(m) + " (" + why + ")");
  Schedule s = make_v_schedule(params, "zb-v");
  s.ranks = std::move(best.ops);
  validate_generated(s, params);
  return s;
}

}  // namespace pipetune::schedule
