// How the training framework executes a plan: facts about the implementation that change op
// costs but are not part of the parallel plan (attention kernels, communication overlap, message
// precision). The defaults describe current Megatron-Core in bf16; other frameworks and older
// runs set the fields that differ (see tests/tuner/validation for published runs).
#pragma once

#include <map>
#include <optional>

#include "engine/spec/hardware_spec.hpp"
#include "engine/spec/run_spec.hpp"

namespace pipetune::tuner {

// MoE routing imbalance: the tokens the busiest expert-parallel rank of an MoE layer gets, over
// the mean rank's. A step waits for that rank's expert GEMMs and all-to-all, so they cost this
// many times the even split's. One rank holding every expert (ep 1) computes every token whatever
// the routing: 1 there. From a measured run (`pipetune report` reads a training run's tokens per
// expert), the factor at each ep the experts' split allows; else one value for every ep > 1.
struct MoeImbalance {
  double any_ep = 1.0;          // >= 1: for an ep not in by_ep
  std::map<int, double> by_ep;  // ep -> factor (>= 1)
  double at(int ep) const;
  // u for every ep > 1 (a value given, not measured).
  bool operator==(const MoeImbalance&) const = default;
  static MoeImbalance everywhere(double u) {
    MoeImbalance m;
    m.any_ep = u;
    return m;
  }
};

struct ExecutionOptions {
  // Fused attention (FlashAttention, cuDNN): no s^2 score tensors in memory, attention FLOPs
  // executed by a fused kernel (causal blocks skipped). False: attention scores as batched
  // GEMMs over the full s x s square plus memory-bound softmax and dropout (Megatron 2021).
  bool flash_attention = true;
  // Attention keeps its softmax probabilities (micro_batch x heads x s x s per layer, at
  // activation_bytes each) for the backward although its kernel is timed like a fused one (the
  // embedded engine's CPU attention).
  bool stores_attention_probabilities = false;
  // The embedding's backward builds a dense gradient of the whole table per micro-batch
  // (PyTorch's embedding_dense_backward); false: it adds the token rows into the gradient.
  bool dense_embedding_gradient = true;
  // TP collectives hidden behind the GEMMs next to them (Megatron --tp-comm-overlap): only the
  // part longer than the pass's GEMM time is exposed.
  bool tp_comm_overlap = false;
  // DP gradient reduction starts during the last micro-batch's backward (Megatron
  // --overlap-grad-reduce, PyTorch DDP); false: after the pipeline flush (Megatron "local" DDP).
  bool overlap_grad_reduce = true;
  // ZeRO / distributed-optimizer parameter all-gather overlapped with the next iteration's first
  // forward (--overlap-param-gather); false: after the optimizer step.
  bool overlap_param_gather = true;
  // Unreliable peers (ClusterSpec::faults): SWARM-style re-routing, the data-parallel replicas of
  // a stage sharing its micro-batches by throughput and taking over a failed one's. False: a
  // pipeline waits for its slow stage and stalls while a failed one restarts.
  bool reroute_failures = false;
  // ZeRO-2 and 3's per-layer collectives (the values' all-gather before a layer's pass, the
  // gradients' reduce-scatter after its weight gradients) beside the layers' compute, as
  // DeepSpeed prefetches and buckets them: only what is longer than the pass is exposed. False:
  // in series with each layer's compute (the embedded engine gathers and reduces a layer before
  // and after computing it, on the rank's thread).
  bool overlap_sharded_comm = true;
  // A pipeline send carries 1/tp of an activation per TP rank (SC21 scatter-gather, and what
  // sequence parallelism does anyway); false: every TP rank sends the whole activation.
  bool pp_scatter_gather = true;
  int activation_bytes = 2;          // bf16 / fp16 activations and TP, PP, EP messages
  int gradient_reduce_bytes = 4;     // DP gradient reduction in fp32 (Megatron's bf16 default)
  double moe_capacity_factor = 0.0;  // > 0: expert compute and all-to-all padded to capacity
  // Without a capacity (no token dropped), the busiest EP rank's share of the expert work: its
  // expert GEMMs and all-to-all cost moe_imbalance.at(ep) times the even split's. With one,
  // every expert computes its padded capacity whatever the routing, and the factor is unused.
  MoeImbalance moe_imbalance;
  // EmbRace's sparse embedding gradient: the rows a batch's tokens touch over what uniform draws
  // of as many tokens would touch (expected_touched_rows), measured by a run of real text
  // (`--embedding-rows-from RUN`, profiler/analysis/embedding_rows.hpp). Text repeats its tokens,
  // so below 1; 1 = the uniform estimate, an upper bound.
  double embedding_rows_factor = 1.0;
  // GEMMs / attention on a GPU's fp32 units (HardwareSpec::fp32_peak_flops) instead of its
  // bf16 tensor cores (peak_flops): the CUDA engine in fp32. No effect on a CPU.
  bool fp32_gemms = false;
  bool fp32_attention = false;
  // Offload tier (ParallelPlan::offload_activations): the copies of activations to and from host
  // memory hold the compute stream (the rank's own thread copies them: the embedded engine on
  // its CPU backend); false: a GPU's copy engines run them on copy streams beside the compute.
  bool copies_block_compute = false;
  // Offload tier (ParallelPlan::offload_optimizer): bytes/s of host memory traffic one device's
  // share of the host-side optimizer update (ZeRO-Offload's CPU Adam) gets. An assumption, not a
  // measurement: a two-socket server's ~200 GB/s of memory bandwidth shared by its 8 GPUs.
  // 0: the device's own element-wise rate (efficiency.memory * hbm_bandwidth), for a CPU device,
  // whose host memory is its memory.
  double host_update_bandwidth = 25e9;

  bool operator==(const ExecutionOptions&) const = default;
};

// The embedded engine on its CPU backend (engine/runtime, engine/tensor/cpu): fp32 activations
// and messages; a tiled attention kernel over the causal half that stores its probabilities;
// TP collectives between the GEMMs, not beside them; every TP rank sends the whole activation
// down the pipeline; the DP gradient reduction and ZeRO-1 parameter gather run in the optimizer
// step, after the pipeline flush; ZeRO-2 and 3's per-layer collectives in series with the layers;
// offload copies by the rank's thread, between its ops; the host update in the same memory.
ExecutionOptions cpu_engine_execution();

// The embedded engine on its CUDA backend (engine/cuda): fp32 activations, weights and messages;
// GEMMs in fp32, or with bf16 inputs on the tensor cores (bf16_gemms); attention timed at the
// fp32 peak (flash-tc's tensor-core tiles included: see execution.cpp), keeping its probabilities
// only with the stored kernel; collectives and the optimizer step as on the CPU backend; offload
// copies on copy streams and the host update in host memory, as on any GPU.
ExecutionOptions cuda_engine_execution(
    bool bf16_gemms, spec::EngineAttention attention = spec::EngineAttention::flash);

// How what runs on this hardware executes a plan: cpu_engine_execution() on a Cpu device, the
// defaults above (Megatron-Core, bf16) on a Gpu.
ExecutionOptions default_execution(const spec::HardwareSpec& hardware);

// How `train` executes a run file's plan, and so what `predict`, `tune` and `simulate --config`
// cost it with: the CUDA engine's execution for backend = "cuda" (in its precision), else unset
// (default_execution of the hardware: a CPU run plans with the framework the hardware stands for).
std::optional<ExecutionOptions> engine_execution(spec::EngineBackend backend,
                                                 spec::EnginePrecision precision,
                                                 spec::EngineAttention attention);

}  // namespace pipetune::tuner
