// Memory model of the tuner: what one device of each pipeline stage holds at its peak.
//
//  - Parameters, gradients and optimizer state of the stage's layers, sharded as the plan says:
//    matrices over TP (norms and the router replicated), experts over EP, the embedding on the
//    stage of the first layer group and the output layer on the stage of the last (or both
//    sharded over every pipeline rank under vocabulary parallelism; a tied output layer keeps
//    its own copy on the last stage, as Megatron does). Bytes per parameter follow mixed-
//    precision Adam (reference/tuners.md 3.3): bf16 weights (2), fp32 main gradients (4, or 2 for
//    DeepSpeed-style bf16 gradients) and fp32 master weights + m + v (12), sharded over the data-
//    parallel group by the ZeRO stage: 1 (and Megatron's distributed optimizer) the optimizer
//    state, 2 also the gradients, 3 also the weights. Expert parameters shard over the expert
//    data-parallel group (dp / ep).
//  - Under ZeRO-2 and 3, the full units a device opens beside its shards: a layer's gradient
//    (and under ZeRO-3 its values) while the layer computes, which the engine then keeps for the
//    next layer, and a vocabulary table's while its pass runs. So a stage holds, at most, its
//    largest layer's and its largest table's full units minus their shards, as the engine's
//    memory ledger counts them (engine/model/parameters.hpp; DeepSpeed's ZeRO-3 estimate
//    likewise adds its largest layer).
//  - Activations: the stage's peak in flight, as the simulator reports it for the schedule
//    (activation bytes per micro-batch times the micro-batches held; Korthikanti et al. per
//    layer with the plan's recomputation, see tuner/cost/analytic_costs.hpp).
//  - A fixed framework overhead (CUDA context, communication buffers, allocator slack).
//  - Offload tier (KARMA): with offload_activations the simulator's device peak is what stays on
//    the device, and its host peak is held in host memory; with offload_optimizer the optimizer
//    state (master weights, m, v) lives in host memory (ZeRO-Offload).
// A plan fits when every stage's device total is at most the device's memory and, where the
// hardware gives host_memory_bytes, every stage's host total at most that.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/schedule/schedule.hpp"
#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "tuner/cost/recent_ring.hpp"

namespace pipetune::tuner {

struct MemoryModelOptions {
  double weight_bytes = 2.0;      // per parameter: bf16 weights
  double gradient_bytes = 4.0;    // fp32 main gradients (Megatron); 2 for bf16 gradients
  double optimizer_bytes = 12.0;  // fp32 master weights, Adam m and v
  // CUDA context, NCCL buffers, allocator fragmentation: an assumption (about 2 GiB is what
  // PyTorch jobs commonly lose to these); 0 to leave it out.
  double framework_overhead_bytes = 2.0 * 1024 * 1024 * 1024;
};

// What runs on the hardware keeps per parameter: the defaults above on a Gpu; on a Cpu device
// the embedded engine's fp32 weights and gradients, Adam m and v (no master copy), and no
// framework overhead.
MemoryModelOptions default_memory_options(const spec::HardwareSpec& hardware);

// Parameters one device of a pipeline stage holds (after TP / EP / vocabulary sharding, before
// ZeRO sharding).
struct StageParameters {
  double dense = 0.0;        // transformer layers without experts (per device)
  double expert = 0.0;       // this device's experts
  double vocabulary = 0.0;   // its share of the embedding and the output layer
  double input_table = 0.0;  // of `vocabulary`, its share of the input embedding table
  double total() const { return dense + expert + vocabulary; }
  // One layer's parameters on this device: its dense part (sharded over DP under ZeRO) and its
  // experts (over the expert-DP group). Zero when the stage has no such layer.
  struct Layer {
    double dense = 0.0, expert = 0.0;
    bool operator==(const Layer&) const = default;
  };
  Layer dense_layer;           // the stage's largest layer without experts
  Layer moe_layer;             // the stage's largest layer with experts
  double largest_table = 0.0;  // the largest vocabulary table (or table share) on this device
  Layer largest_group;         // the layers of the stage's largest layer group (chunk), summed
  bool operator==(const StageParameters&) const = default;
};

// Layered reduction under ZeRO-2 and 3 (engine/schedule/group_holds.hpp): the most layer groups
// a rank holds the full gradients of at once (0 for other plans). The generators' schedules
// reach it: group_holds' peak_gradient_groups.
int held_gradient_groups(const spec::ParallelPlan& plan);

// One entry per pipeline rank. Throws SpecError when the plan's layer split does not match.
// Reads the plan's pp, chunks, tp, stage_tp, ep, vocab and layer_split only: StageParameterMemo
// keys on exactly these, so a setting read here later must join its key.
std::vector<StageParameters> stage_parameters(const spec::ModelSpec& model,
                                              const spec::ParallelPlan& plan,
                                              schedule::Placement placement);

// stage_parameters of one model's plans, kept for the last few plan shapes they depend on
// (placement, pp, chunks, tp, per-stage tp, ep, vocabulary mode and layer split): the search prices
// some 10^5 plans over a few hundred such shapes. A model unlike the last one empties it.
class StageParameterMemo {
 public:
  // The reference lasts until the next call.
  const std::vector<StageParameters>& get(const spec::ModelSpec& model,
                                          const spec::ParallelPlan& plan,
                                          schedule::Placement placement);

 private:
  struct Entry {  // what stage_parameters reads, and what it gave
    schedule::Placement placement;
    int pp, chunks, tp, ep;
    schedule::VocabMode vocab;
    std::vector<int> layer_split, stage_tp;
    std::vector<StageParameters> params;
  };
  RecentRing<Entry, 16> entries_;
  std::optional<spec::ModelSpec> model_;  // the model they are of
};

struct StageMemory {
  int stage = 0;
  double parameters = 0.0;  // bytes of weights
  double gradients = 0.0;
  double optimizer = 0.0;    // on the device: 0 under offload_optimizer (see host_optimizer)
  double activations = 0.0;  // peak activations in flight on the device
  double overhead = 0.0;
  // Offload tier: host memory this device's rank uses, its offloaded activations at their host
  // peak and, under offload_optimizer, its optimizer state.
  double host_activations = 0.0;
  double host_optimizer = 0.0;
  double total() const { return parameters + gradients + optimizer + activations + overhead; }
  double host() const { return host_activations + host_optimizer; }
};

struct MemoryEstimate {
  std::vector<StageMemory> stages;
  double device_bytes = 0.0;  // the hardware's memory
  int peak_stage = 0;
  double peak_bytes = 0.0;
  // Host memory one device may use (hardware.host_memory_bytes; 0 = unknown, never binding), and
  // the stage that uses the most of it.
  double host_bytes = 0.0;
  int peak_host_stage = 0;
  double peak_host_bytes = 0.0;
  bool fits() const {
    return peak_bytes <= device_bytes && (host_bytes <= 0.0 || peak_host_bytes <= host_bytes);
  }
  // "stage 3 needs 92.4 GiB of the device's 80.0 GiB (activations 61.2 GiB)", or for host memory
  // "stage 1 needs 300.0 GiB of host memory, over the 256.0 GiB per device the hardware's
  // host_memory_bytes gives (offloaded activations 250.0 GiB)"; empty when it fits.
  std::string binding_constraint() const;
};

// peak_activation_bytes: per pipeline rank, the simulator's StageSummary::peak_activation_bytes.
// host_activation_bytes: per pipeline rank, its peak_host_activation_bytes; empty = none.
MemoryEstimate estimate_memory(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                               const spec::ParallelPlan& plan, schedule::Placement placement,
                               const std::vector<double>& peak_activation_bytes,
                               const MemoryModelOptions& options = {},
                               const std::vector<double>& host_activation_bytes = {});

// The same with the plan's stage_parameters given (a StageParameterMemo's).
MemoryEstimate estimate_memory(const std::vector<StageParameters>& params,
                               const spec::ClusterSpec& cluster, const spec::ParallelPlan& plan,
                               const std::vector<double>& peak_activation_bytes,
                               const MemoryModelOptions& options = {},
                               const std::vector<double>& host_activation_bytes = {});
// Its peaks alone (`stages` left empty, so no binding_constraint): what a search's bounds and
// rules ask of tens of thousands of plans.
MemoryEstimate memory_peaks(const std::vector<StageParameters>& params,
                            const spec::ClusterSpec& cluster, const spec::ParallelPlan& plan,
                            const std::vector<double>& peak_activation_bytes,
                            const MemoryModelOptions& options = {});

// Bytes of weights, gradients and optimizer state per parameter for a ZeRO stage and a data-
// parallel group of `dp` devices: {weights, gradients, optimizer}.
struct BytesPerParameter {
  double weights = 0.0, gradients = 0.0, optimizer = 0.0;
  double total() const { return weights + gradients + optimizer; }
};
BytesPerParameter bytes_per_parameter(int zero_stage, int dp, const MemoryModelOptions& options);

}  // namespace pipetune::tuner
