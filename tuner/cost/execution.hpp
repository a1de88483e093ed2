// How the training framework executes a plan: facts about the implementation that change op
// costs but are not part of the parallel plan (attention kernels, communication overlap, message
// precision). The defaults describe current Megatron-Core in bf16; other frameworks and older
// runs set the fields that differ (see tests/tuner/validation for published runs).
#pragma once

namespace pipetune::tuner {

struct ExecutionOptions {
  // Fused attention (FlashAttention, cuDNN): no s^2 score tensors in memory, attention FLOPs
  // executed by a fused kernel (causal blocks skipped). False: attention scores as batched
  // GEMMs over the full s x s square plus memory-bound softmax and dropout (Megatron 2021).
  bool flash_attention = true;
  // TP collectives hidden behind the GEMMs next to them (Megatron --tp-comm-overlap): only the
  // part longer than the pass's GEMM time is exposed.
  bool tp_comm_overlap = false;
  // DP gradient reduction starts during the last micro-batch's backward (Megatron
  // --overlap-grad-reduce, PyTorch DDP); false: after the pipeline flush (Megatron "local" DDP).
  bool overlap_grad_reduce = true;
  // ZeRO / distributed-optimizer parameter all-gather overlapped with the next iteration's first
  // forward (--overlap-param-gather); false: after the optimizer step.
  bool overlap_param_gather = true;
  // A pipeline send carries 1/tp of an activation per TP rank (SC21 scatter-gather, and what
  // sequence parallelism does anyway); false: every TP rank sends the whole activation.
  bool pp_scatter_gather = true;
  int activation_bytes = 2;          // bf16 / fp16 activations and TP, PP, EP messages
  int gradient_reduce_bytes = 4;     // DP gradient reduction in fp32 (Megatron's bf16 default)
  double moe_capacity_factor = 0.0;  // > 0: expert compute and all-to-all padded to capacity
};

}  // namespace pipetune::tuner
