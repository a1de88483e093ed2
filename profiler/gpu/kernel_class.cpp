#include "profiler/gpu/kernel_class.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include "profiler/gpu/gpu_activity_names.hpp"

namespace pipetune::profiler {

namespace {

struct Pattern {
  std::string_view text;  // lower-case substring
  KernelClass kind;
};

// Kernel names, in order: the first match wins, so the specific patterns (attention kernels are
// often CUTLASS templates, fused norms often "vectorized") come before the generic ones.
constexpr Pattern kKernelPatterns[] = {
    // FlashAttention 2/3 (flash_fwd_kernel, flash_bwd_dq_dk_dv_loop...), xFormers/PyTorch
    // memory-efficient attention (fmha_cutlassF), cuDNN SDPA (cudnn_generated_fort_native_sdpa),
    // PyTorch's flash kernels, this engine's attention kernels (pipetune_attention_*).
    {"flash", KernelClass::Attention},
    {"fmha", KernelClass::Attention},
    {"sdpa", KernelClass::Attention},
    {"attention", KernelClass::Attention},
    {"attn", KernelClass::Attention},
    {"mha_", KernelClass::Attention},
    // Norms: ATen (vectorized_layer_norm_kernel, layer_norm_grad_input_kernel), Apex /
    // Transformer Engine (ln_fwd_kernel, rmsnorm_bwd), Megatron (cuApplyLayerNorm).
    {"layer_norm", KernelClass::Normalization},
    {"layernorm", KernelClass::Normalization},
    {"rms_norm", KernelClass::Normalization},
    {"rmsnorm", KernelClass::Normalization},
    {"ln_fwd", KernelClass::Normalization},
    {"ln_bwd", KernelClass::Normalization},
    {"batch_norm", KernelClass::Normalization},
    {"group_norm", KernelClass::Normalization},
    {"applylayernorm", KernelClass::Normalization},
    // Softmax and losses: ATen (cunn_SoftMaxForward, softmax_warp_forward, nll_loss_forward),
    // Megatron's scaled masked softmax, vocabulary-parallel cross-entropy.
    {"softmax", KernelClass::Softmax},
    {"cross_entropy", KernelClass::Softmax},
    {"crossentropy", KernelClass::Softmax},
    {"nll_loss", KernelClass::Softmax},
    {"vocab_ce", KernelClass::Softmax},
    // Optimizers: ATen's fused/foreach Adam (multi_tensor_apply_kernel), Apex FusedAdam.
    {"adam", KernelClass::Optimizer},
    {"multi_tensor_apply", KernelClass::Optimizer},
    // ("lamb" and "sgd" are left out: ATen's elementwise kernels are templates over lambdas,
    // "{lambda(int)#1}", and a substring "lamb" would take them all.)
    // GEMMs: cuBLAS/cuBLASLt (ampere_sgemm_128x64_nn, sm90_xmma_gemm_..., cublasLt::splitKreduce),
    // nvjet_tst_... (cuBLAS 12.8+ on Hopper), CUTLASS (cutlass::Kernel2<...gemm...>).
    {"gemm", KernelClass::Gemm},
    {"nvjet", KernelClass::Gemm},
    {"xmma", KernelClass::Gemm},
    {"cutlass", KernelClass::Gemm},
    {"cublas", KernelClass::Gemm},
    {"splitk", KernelClass::Gemm},
    {"matmul", KernelClass::Gemm},
    {"wgmma", KernelClass::Gemm},
    // Reductions: ATen's reduce_kernel (sum, mean, norm), CUB.
    {"reduce_kernel", KernelClass::Reduction},
    {"reduce", KernelClass::Reduction},
    {"cub::", KernelClass::Reduction},
    // Elementwise: ATen's vectorized / unrolled elementwise kernels, activations, dropout,
    // copies and fills as kernels, embeddings, indexing, RoPE.
    {"elementwise", KernelClass::Elementwise},
    {"gelu", KernelClass::Elementwise},
    {"silu", KernelClass::Elementwise},
    {"swiglu", KernelClass::Elementwise},
    {"relu", KernelClass::Elementwise},
    {"dropout", KernelClass::Elementwise},
    {"embedding", KernelClass::Elementwise},
    {"rotary", KernelClass::Elementwise},
    {"rope", KernelClass::Elementwise},
    {"copy_kernel", KernelClass::Elementwise},
    {"fill_kernel", KernelClass::Elementwise},
    {"cat_", KernelClass::Elementwise},
    {"index", KernelClass::Elementwise},
    {"scatter", KernelClass::Elementwise},
    {"gather", KernelClass::Elementwise},
    {"transpose", KernelClass::Elementwise},
    {"pipetune_", KernelClass::Elementwise},  // the engine's remaining kernels (add, scale...)
};

// Op (range) names, used when the kernel name matched nothing: PyTorch op names and
// torch.nn / Megatron module names.
constexpr Pattern kOpPatterns[] = {
    {"scaled_dot_product", KernelClass::Attention},
    {"flashattn", KernelClass::Attention},
    {"attention", KernelClass::Attention},
    {"layer_norm", KernelClass::Normalization},
    {"layernorm", KernelClass::Normalization},
    {"rms_norm", KernelClass::Normalization},
    {"softmax", KernelClass::Softmax},
    {"cross_entropy", KernelClass::Softmax},
    {"nll_loss", KernelClass::Softmax},
    {"aten::mm", KernelClass::Gemm},
    {"aten::addmm", KernelClass::Gemm},
    {"aten::bmm", KernelClass::Gemm},
    {"aten::baddbmm", KernelClass::Gemm},
    {"aten::matmul", KernelClass::Gemm},
    {"aten::linear", KernelClass::Gemm},
    {"linear", KernelClass::Gemm},
    {"adam", KernelClass::Optimizer},
    {"optimizer", KernelClass::Optimizer},
    {"aten::sum", KernelClass::Reduction},
    {"aten::mean", KernelClass::Reduction},
    {"aten::norm", KernelClass::Reduction},
    {"aten::gelu", KernelClass::Elementwise},
    {"aten::add", KernelClass::Elementwise},
    {"aten::mul", KernelClass::Elementwise},
    {"aten::copy_", KernelClass::Elementwise},
    {"aten::dropout", KernelClass::Elementwise},
    {"aten::embedding", KernelClass::Elementwise},
};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

template <std::size_t N>
bool match(const Pattern (&table)[N], std::string_view name, KernelClass& out) {
  if (name.empty()) return false;
  const std::string l = lower(name);
  for (const Pattern& p : table) {
    if (l.find(p.text) != std::string::npos) {
      out = p.kind;
      return true;
    }
  }
  return false;
}

}  // namespace

std::string_view kernel_class_name(KernelClass c) {
  switch (c) {
    case KernelClass::Gemm:
      return "GEMM";
    case KernelClass::Attention:
      return "attention";
    case KernelClass::Normalization:
      return "norm";
    case KernelClass::Softmax:
      return "softmax/loss";
    case KernelClass::Elementwise:
      return "elementwise";
    case KernelClass::Reduction:
      return "reduction";
    case KernelClass::Optimizer:
      return "optimizer";
    case KernelClass::Communication:
      return "communication";
    case KernelClass::Copy:
      return "copy";
    case KernelClass::Other:
      return "other";
  }
  return "other";
}

SpanKind gpu_span_kind(const KernelRecord& r) {
  if (r.grid[0] == 0 && r.block[0] == 0) {  // not a kernel: a copy or a memset
    return r.name.rfind("memset", 0) == 0 ? SpanKind::Memset : SpanKind::Memcpy;
  }
  if (const auto nccl = classify_nccl_kernel(r.name)) return span_kind_of(*nccl);
  return SpanKind::Kernel;
}

KernelClass classify_gpu_activity(SpanKind kind, std::string_view kernel_name,
                                  std::string_view op_name) {
  if (is_communication(kind) || classify_nccl_kernel(kernel_name))
    return KernelClass::Communication;
  if (kind == SpanKind::Memcpy || kind == SpanKind::Memset) return KernelClass::Copy;
  KernelClass c = KernelClass::Other;
  match(kKernelPatterns, kernel_name, c);
  // A generic kernel (an elementwise, reduction or unknown one) is part of the op that launched
  // it when the op says more: the bias add of aten::linear, the permutes of an attention.
  if (c == KernelClass::Elementwise || c == KernelClass::Reduction || c == KernelClass::Other) {
    KernelClass by_op = KernelClass::Other;
    if (match(kOpPatterns, op_name, by_op) && by_op != KernelClass::Elementwise &&
        by_op != KernelClass::Reduction)
      return by_op;
  }
  return c;
}

KernelClass classify_gpu_activity(const KernelRecord& r) {
  return classify_gpu_activity(gpu_span_kind(r), r.name, r.op);
}

}  // namespace pipetune::profiler
