// Per-stage op costs used by cost-aware generators (zero-bubble, vocabulary placement) and by the
// simulator. Times are in seconds; any consistent unit works for the shape of a schedule.
#pragma once

#include <algorithm>
#include <array>
#include <vector>

#include "engine/schedule/op.hpp"
#include "engine/schedule/schedule.hpp"

namespace pipetune::schedule {

struct StageCosts {
  // Cost of one op of each kind on this stage (one chunk, one micro-batch). A BW of 0 means B + W.
  std::array<double, kOpKindCount> op{};
  double operator[](OpKind k) const { return op[static_cast<int>(k)]; }
  double& operator[](OpKind k) { return op[static_cast<int>(k)]; }
  // The part of each op's cost that is communication inside the op (TP collectives not hidden
  // behind its own GEMMs, the expert all-to-all, ZeRO-3 gathers in series): what an overlapped
  // pair (Op::overlaps_previous) can hide behind the other op's compute. 0 <= comm <= op; a BW
  // of cost 0 takes B's + W's.
  std::array<double, kOpKindCount> comm{};
  // Token slices (Schedule::slices): of each op's cost, the part that is causal attention, which
  // a slice pays by its length times the context it attends to, and the part every op pays
  // whatever its size (GEMMs' fixed overheads, collective latencies), which a thin slice pays
  // again. The rest scales with the slice's tokens. 0 <= attention + fixed <= op.
  std::array<double, kOpKindCount> attention{};
  std::array<double, kOpKindCount> fixed{};
  // Offload tier (KARMA): seconds of one copy, each way (device->host after an F, host->device
  // before its B), of one chunk's activations of one micro-batch. 0 = this stage keeps its
  // activations on the device.
  double offload = 0.0;
  // ZeRO-3 under layer-group reductions (group_holds.hpp): seconds to gather one layer group's
  // values, paid by the first op of each run of the group's ops on this stage (in place of a
  // gather in every op).
  double run_gather = 0.0;
  // Unreliable peers (SWARM, ATOM): every pass on this stage takes `slowdown` times its cost (a
  // slow device), and the stage fails at each of `failures` (in order of time, several in one
  // iteration if need be).
  struct Failure {
    double at = 0.0;             // seconds into the iteration
    double restart_delay = 0.0;  // seconds until the failed device is back
    // Under re-routing: the replicas of the stage this failure takes down, from `at` until
    // `restart_delay` has passed (0 when it hits replicas down already).
    int new_replicas = 1;
    bool operator==(const Failure&) const = default;
  };
  double slowdown = 1.0;
  std::vector<Failure> failures;
  // Under re-routing (CostTable::reroute_pool): how many of the stage's replicas are slow.
  int slow_replicas = 1;
  bool fails() const { return !failures.empty(); }
  // Under re-routing: the replicas down at time t (each failure's new_replicas from its time
  // until it is back).
  int replicas_down_at(double t) const {
    int n = 0;
    for (const Failure& f : failures)
      if (f.at <= t && t < f.at + f.restart_delay) n += f.new_replicas;
    return n;
  }
  // The most replicas down at once (at least 1). A pool whose replicas are all down at once
  // stalls as one without re-routing.
  int most_replicas_down() const {
    int most = 1;
    for (const Failure& f : failures) most = std::max(most, replicas_down_at(f.at));
    return most;
  }
};

struct CostTable {
  std::vector<StageCosts> stages;  // one entry per pipeline rank
  double p2p_latency = 0.0;        // seconds per point-to-point transfer
  double p2p_bytes = 0.0;          // bytes of one activation (or gradient) transfer
  double p2p_bandwidth = 0.0;      // bytes/s of a link; 0 = infinite
  double collective_time = 0.0;    // one vocabulary barrier (all-reduce / broadcast), seconds
  // Per-stage layouts (cross-mesh resharding): seconds of one transfer from each rank to each
  // other, stages x stages entries, [source * stages + dest]. Empty = p2p_time() for every pair
  // (the uniform layouts' one transfer cost).
  std::vector<double> pair_transfer;
  // Fraction of a forward's activations that survive B and are freed by W (zero-bubble split).
  // 1.0 is the convention of the V-Half/V-Min building block (B keeps all, W frees all).
  double w_free_fraction = 1.0;
  // Whether the offload copies occupy the compute stream: true where the rank's own thread copies
  // (the embedded engine's CPU backend), false on a GPU, whose copy engines run them on streams
  // of their own beside the computation.
  bool copies_block_compute = false;
  // SWARM-style re-routing: each stage is served by a pool of this many replicas that share its
  // micro-batches by their throughput. A slow one takes less of them, and when one fails the
  // others take its share and run again the op it had in flight. 0: no re-routing, a pipeline
  // waits for its slow stage and stalls while a failed one restarts.
  int reroute_pool = 0;
  // ZeRO-2 and 3 under layer-group reductions (group_holds.hpp): an R op starts once the rank's
  // previous R has ended, whose held gradients are freed first (the engine waits for it there).
  bool held_reductions = false;

  // Same costs on every stage; BW = B + W; S/T/IF/IB as given.
  static CostTable uniform(int stages, double f, double b, double w, double s = 0.0, double t = 0.0,
                           double comm = 0.0);

  // InputError naming the rank when out of range. Inline with cost(): the generators and the
  // simulator ask for costs millions of times a search.
  const StageCosts& stage(int rank) const {
    if (rank < 0 || rank >= static_cast<int>(stages.size())) [[unlikely]]
      throw_no_stage(rank);
    return stages[static_cast<std::size_t>(rank)];
  }
  double cost(int rank, OpKind k) const {  // BW falls back to B + W
    const StageCosts& c = stage(rank);
    if (k == OpKind::BW && c[OpKind::BW] <= 0.0) return c[OpKind::B] + c[OpKind::W];
    return c[k];
  }
  double comm(int rank, OpKind k) const;  // StageCosts::comm; BW as cost() does
  // One op on a token slice of `shape` (fractions of the sequence): with a = attention, f = fixed
  // and c = cost (BW as cost() does),
  //   f + (c - a - f) * length + a * length * (2 context + length),
  // so a micro-batch's slices add up to c plus f for every slice past the first (causal
  // attention's length x (2 context + length) terms add up to 1).
  double slice_cost(int rank, OpKind k, SliceShape shape) const;
  // slice_cost's terms: f, c - a - f (per unit of length) and a (per unit of length x (2 context
  // + length)).
  struct SliceTerms {
    double fixed = 0.0, per_length = 0.0, attention = 0.0;
    double at(SliceShape s) const {
      return fixed + per_length * s.length + attention * s.length * (2.0 * s.context + s.length);
    }
  };
  SliceTerms slice_terms(int rank, OpKind k) const;
  double p2p_time() const;  // latency + bytes / bandwidth
  // One transfer from rank `source` to rank `dest`: pair_transfer's entry, else p2p_time().
  double transfer_time(int source, int dest) const;

 private:
  [[noreturn]] void throw_no_stage(int rank) const;
};

// The longest time a schedule deals in (seconds, or the costs' own unit): what a trace holds in
// 64-bit ns, about 292 years. The one bound on op costs and on the times a simulation of them
// gives, with or without a trace.
inline constexpr double kMaxScheduleTime = 9.2e9;
// InputError "<what> of <t> is beyond what a trace holds ..." unless |t| < kMaxScheduleTime
// (so never for inf or nan).
void check_schedule_time(double t, const char* what);
// InputError when a cost (each op kind as cost() gives it, each stage's offload copy, the
// transfer, pair transfer and barrier times, a failure's time and restart delay) is negative, not
// finite, or not below kMaxScheduleTime, when an op's communication, attention or fixed part is
// negative, or they (attention and fixed together) are more than its cost, when a slowdown is
// below 1, or a re-routing pool has one replica.
void check_costs(const CostTable& costs);

}  // namespace pipetune::schedule
