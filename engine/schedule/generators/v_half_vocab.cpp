// Vocabulary passes on V-Half (branch v-half-vocab, passes.py add_embedding_passes; schedules.md
// b.5). The transformer ops are list-scheduled with the planning costs, then every rank gets the
// same S/T/IF/IB at the same times:
//   S(i)  = end of stage 0's chunk-1 forward of i + one mean backward (room for the broadcast of
//           the last hidden state; all S of a micro-batch then fit in one backward length);
//   T(i)  = S(i+1), the last one 2B + 2F after the last S;
//   IF(i) = before time 0 for the first p/2+1 micro-batches, then S(i - (p/2+1));
//   IB(i) = S(i + p/2 + 3), the rest after the last transformer op.
// The times are clamped to what the dependencies need (S and, for vocab-1, T before stage 0's
// chunk-1 backward; IF before stage 0's first forward of i; IB after stage 0's chunk-0 backward
// of i), so the merged order is consistent with one timeline and cannot deadlock whatever the
// costs. The reference relies on its stretched block for that. Ops are then merged into each
// rank's list by time, with one tie order for all ranks so the barriers line up.
#include <algorithm>
#include <numeric>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/executor.hpp"
#include "engine/schedule/generators/v_building_block.hpp"

namespace pipetune::schedule {

namespace {

// List scheduling of the transformer ops (the reference's add_time): start and end per op.
struct TimingHooks {
  const CostTable& costs;
  double comm = 0.0;
  std::vector<double> free;
  std::vector<std::vector<double>> start, end;

  TimingHooks(const Schedule& s, const CostTable& c) : costs(c), comm(c.p2p_time()) {
    free.assign(at(s.stages), 0.0);
    for (const auto& ops : s.ranks) {
      start.emplace_back(ops.size(), 0.0);
      end.emplace_back(ops.size(), 0.0);
    }
  }
  double op(int rank, std::size_t index, const Op& op, const Requirement& req, double req_time) {
    const double ready = req_time + (req.present && req.transfer ? comm : 0.0);
    const double s = std::max(free[at(rank)], ready);
    const double e = s + costs.cost(rank, op.kind);
    start[at(rank)][index] = s;
    end[at(rank)][index] = e;
    free[at(rank)] = e;
    return e;
  }
  double barrier(const Event&, double last_arrival) { return last_arrival; }
  void wait(int, double) {}
};

struct VocabOp {
  Op op;
  double time = 0.0;
  int tie = 0;                    // order among vocabulary ops at one time: IF, then S/T, then IB
  int seq = 0;                    // S(i) = 2i, T(i) = 2i + 1: S before its T, T(i-1) before S(i)
  bool after_same_start = false;  // IB follows compute ops that start at its time
};

double mean_cost(const CostTable& costs, int p, OpKind k) {
  double sum = 0.0;
  for (int r = 0; r < p; ++r) sum += costs.cost(r, k);
  return sum / static_cast<double>(p);
}

}  // namespace

void add_v_half_vocab_passes(Schedule& s, VocabMode vocab, const CostTable& costs) {
  const int p = s.stages;
  const int m = s.microbatches;
  s.vocab = VocabMode::None;
  TimingHooks timing(s, costs);
  execute(s, timing);

  // Stage 0 holds the loss (end of chunk 1) and the input (start of chunk 0).
  std::vector<double> f1_end(at(m)), b1_start(at(m)), f0_start(at(m)), b0_end(at(m));
  const auto& ops0 = s.ranks[0];
  for (std::size_t i = 0; i < ops0.size(); ++i) {
    const Op& op = ops0[i];
    const auto mb = at(op.microbatch);
    if (op.kind == OpKind::F && op.chunk == 1) f1_end[mb] = timing.end[0][i];
    if (op.kind == OpKind::B && op.chunk == 1) b1_start[mb] = timing.start[0][i];
    if (op.kind == OpKind::F && op.chunk == 0) f0_start[mb] = timing.start[0][i];
    if (op.kind == OpKind::B && op.chunk == 0) b0_end[mb] = timing.end[0][i];
  }
  double last_end = 0.0;
  for (const auto& e : timing.end)
    if (!e.empty()) last_end = std::max(last_end, e.back());
  const double mean_b = mean_cost(costs, p, OpKind::B);
  const double mean_f = mean_cost(costs, p, OpKind::F);
  const int warmup = p / 2 + 1;

  std::vector<double> s_time(at(m)), t_time(at(m));
  for (int i = 0; i < m; ++i) s_time[at(i)] = std::min(f1_end[at(i)] + mean_b, b1_start[at(i)]);
  for (int i = 0; i < m; ++i) {
    t_time[at(i)] = i + 1 < m ? s_time[at(i + 1)] : s_time[at(i)] + 2.0 * mean_b + 2.0 * mean_f;
    // Vocab-1: stage 0's chunk-1 backward waits for C2, which T joins.
    if (vocab == VocabMode::Vocab1) t_time[at(i)] = std::min(t_time[at(i)], b1_start[at(i)]);
  }

  std::vector<VocabOp> vops;
  vops.reserve(4 * at(m));
  for (int i = 0; i < m; ++i) {
    const double if_time =
        i < warmup ? static_cast<double>(i - m) : std::min(s_time[at(i - warmup)], f0_start[at(i)]);
    const double ib_time = std::max(
        i + warmup + 2 < m ? s_time[at(i + warmup + 2)] : last_end + static_cast<double>(i),
        b0_end[at(i)]);
    vops.push_back({{OpKind::IF, 0, i}, if_time, 0, i, false});
    vops.push_back({{OpKind::S, 0, i}, s_time[at(i)], 1, 2 * i, false});
    vops.push_back({{OpKind::T, 0, i}, t_time[at(i)], 1, 2 * i + 1, false});
    vops.push_back({{OpKind::IB, 0, i}, ib_time, 2, i, true});
  }
  std::sort(vops.begin(), vops.end(), [](const VocabOp& a, const VocabOp& b) {
    if (a.time != b.time) return a.time < b.time;
    if (a.tie != b.tie) return a.tie < b.tie;
    return a.seq < b.seq;
  });

  // Merge by time: a vocabulary op goes before the first transformer op that starts at or after
  // its time (IB: strictly after), so the producer of everything it needs precedes it.
  for (int r = 0; r < p; ++r) {
    const auto& ops = s.ranks[at(r)];
    const auto& starts = timing.start[at(r)];
    std::vector<Op> merged;
    merged.reserve(ops.size() + vops.size());
    std::size_t next = 0;
    for (const VocabOp& v : vops) {
      while (next < ops.size() &&
             (starts[next] < v.time || (v.after_same_start && starts[next] == v.time)))
        merged.push_back(ops[next++]);
      merged.push_back(v.op);
    }
    while (next < ops.size()) merged.push_back(ops[next++]);
    s.ranks[at(r)] = std::move(merged);
  }
  s.vocab = vocab;
}

}  // namespace pipetune::schedule
