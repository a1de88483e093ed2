// The schedule simulator: executes a Schedule with per-op costs and produces a Trace and a
// summary. It is the single source of truth for time and activation memory given op costs.
//
// Model: each rank has a compute stream that runs its op list in order; an op starts when the
// stream is free and its requirement (dependencies.hpp) is available, plus one point-to-point
// transfer when the requirement was produced on another rank. Transfers travel over the directed
// link between the two ranks, one at a time per link (a link is busy while a transfer is on it).
// Vocabulary barriers are collectives over the pipeline group on each rank's communication
// stream: one starts when every rank has reached it and its comm stream is free.
//
// Offload tier (KARMA), on a stage whose CostTable offload time c is positive: each rank has two
// copy streams, offload (device -> host) and reload (host -> device), each one copy at a time.
//  - After an F of (micro-batch m, chunk k) ends, its offload starts when the offload stream is
//    free and lasts c; the F's activation units leave the device as it ends (on the host until
//    the reload). An F whose own backward (B or BW of m, k) is the rank's next op keeps its
//    units: they would be copied out and straight back, freeing nothing and stalling the B.
//  - The B or BW of an offloaded (m, k) needs its reload: it starts at the latest of the reload
//    stream being free, the offload's end and the start of the rank's previous op (a prefetch one
//    op ahead), lasts c, and the B starts no earlier than its end. The units are back on the
//    device from the reload's start. W, S, T, IF and IB move nothing.
//  - CostTable::copies_block_compute (the rank's thread copies): the offload occupies the
//    compute stream right after its F and the reload right before its B (which starts c later).
//
// Overlapped pairs (Op::overlaps_previous, DualPipeV's "F & B"): the pair starts when the stream
// is free and both inputs are there. Each op's cost c splits into compute c - k and the
// communication k inside it (StageCosts::comm). The two computes share the device and run one
// after the other; each op's communication runs beside the other's compute, so op X hides
// h_X = min(k_X, c_Y - k_Y) of its communication, and the pair lasts
//   (c_X - h_X) + (c_Y - h_Y) = (c_X - k_X) + (c_Y - k_Y) + max(0, k_X - (c_Y - k_Y))
//                                                          + max(0, k_Y - (c_X - k_X)),
// never less than either stream's work, max(computes, communications). It is traced as X for
// c_X - h_X, then Y for c_Y - h_Y (their order in the list), and each product is available at
// its op's end. With k = 0 a pair costs what the two ops cost in sequence.
//
// Layered gradient reduction (OpKind::R, costed by CostTable's R entry, seconds per layer group):
// each rank has a reduction stream beside its compute stream. An R starts when the op before it
// on the rank has ended (the group's weight gradients are complete) and the stream is free, and
// takes its cost; the compute stream goes on (the model assumes the reduction takes no compute
// from the passes it overlaps, as DP collectives on their own stream mostly do). The iteration
// ends when the last reduction has ended too.
//
// Unreliable peers (StageCosts::slowdown, failures; CostTable::reroute_pool):
//  - A slow stage's passes take `slowdown` times their cost. With a re-routing pool of n
//    replicas (SWARM's stochastic wiring, by throughput), k of them slow, the pool shares the
//    stage's micro-batches and takes n / (n - k + k / slowdown) of the usual time.
//  - Without re-routing, a stage that fails at time t is down until t + restart_delay: an op
//    that would run in that time, or was running at t (its work is lost), starts at the restart.
//    Each of a stage's failures does so in turn (an op a restart moved can meet the next one).
//  - With re-routing the pool's other replicas take over at t: an op running at t runs again
//    from t, and every op from t on takes n / (n - k) times as long (k replicas failed by then:
//    each failure adds the replicas it takes down first). A pool whose replicas all fail stalls
//    as without re-routing.
//  StageSummary::fault_stall counts the time lost: the downtime and the lost work.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/schedule/costs.hpp"
#include "engine/schedule/schedule.hpp"
#include "profiler/trace.hpp"

namespace pipetune::sim {

struct SimOptions {
  bool record_trace = true;
  // Bytes of activations one micro-batch leaves on each stage after its forward through the
  // stage's layers (all chunks). Empty = unknown; peak_activation_bytes then stays negative.
  std::vector<double> activation_bytes_per_microbatch;
  // The schedule came from schedule::generate, which checked its structure: not checked again
  // (the search simulates thousands of generated schedules). False for a schedule from elsewhere.
  bool structure_checked = false;
};

struct StageSummary {
  int stage = 0;
  double busy = 0.0;          // compute time (the ops; copies on the compute stream are stall)
  double bubble = 0.0;        // iteration time - busy
  double bubble_ratio = 0.0;  // bubble / iteration time
  double comm = 0.0;          // time on the communication stream (barriers)
  // Peak activations held on the device, in micro-batches of one stage's layers (1F1B stage r:
  // p - r without offload).
  double peak_activation_microbatches = 0.0;
  double peak_activation_bytes = -1.0;  // negative when no model is given
  // Offload tier: peak activations on the host (moved there by offload copies, not yet reloaded).
  double peak_host_activation_microbatches = 0.0;
  double peak_host_activation_bytes = -1.0;  // negative when no model is given
  // Seconds the compute stream waited for reloads; with copies_block_compute, the copies' time.
  double copy_stall = 0.0;
  // Seconds of communication inside ops that overlapped pairs hid behind the other op's compute
  // (what the pairs saved against running their ops in sequence).
  double overlap_hidden = 0.0;
  // Layered gradient reduction: seconds on the rank's reduction stream, and how long the last
  // reduction ran past the rank's last compute op (what the backwards could not hide).
  double gradient_reduction = 0.0;
  double exposed_gradient_reduction = 0.0;
  // Unreliable peers: seconds the stage's failure cost it (downtime waited, work lost).
  double fault_stall = 0.0;
  std::size_t ops = 0;
};

struct SimResult {
  double iteration_time = 0.0;  // makespan: last op end on any rank (all start at 0)
  double bubble_ratio = 0.0;    // sum of bubbles / (stages * iteration time)
  std::vector<StageSummary> stages;
  profiler::Trace trace;  // empty unless options.record_trace
  std::size_t op_count = 0;
};

// Throws ScheduleError for a malformed schedule, DeadlockError when ops can never all run, and
// InputError when the cost table does not cover every stage, a cost breaks schedule::check_costs,
// or the iteration would last schedule::kMaxScheduleTime or longer.
SimResult simulate(const schedule::Schedule& schedule, const schedule::CostTable& costs,
                   const SimOptions& options = {});

}  // namespace pipetune::sim
