// What kind of work a GPU activity is — GEMM, attention, normalisation, softmax/loss,
// elementwise, reduction, optimizer, communication or a copy — from its kernel name and, when the
// name says nothing, the op it was launched from. One table (kernel_class.cpp) holds every name
// pattern; it covers the kernel libraries and frameworks named there (cuBLAS/cuBLASLt, CUTLASS,
// nvjet (cuBLAS 12.8+ on Hopper), FlashAttention 2/3, cuDNN SDPA, PyTorch ATen native kernels,
// Apex/Transformer Engine fused kernels, Megatron-LM's fused kernels, NCCL, and this engine's own
// CUDA backend), and the PyTorch op names (aten::*) and torch.nn module names their ranges carry.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "profiler/gpu/kernel_record.hpp"
#include "profiler/trace.hpp"

namespace pipetune::profiler {

enum class KernelClass : std::uint8_t {
  Gemm,
  Attention,
  Normalization,
  Softmax,  // softmax, log-softmax, cross-entropy / NLL loss
  Elementwise,
  Reduction,
  Optimizer,
  Communication,  // NCCL kernels
  Copy,           // memcpy and memset
  Other,
};
inline constexpr int kKernelClassCount = static_cast<int>(KernelClass::Other) + 1;
std::string_view kernel_class_name(KernelClass c);  // "GEMM", "attention", ...

// The span kind a record gets on a Gpu lane: Memcpy / Memset for copies (no grid), the
// collective of a NCCL kernel (span_kind_of), else Kernel.
SpanKind gpu_span_kind(const KernelRecord& r);

// Class of a GPU activity of span kind `kind` named `kernel_name`, launched from the op named
// `op_name` (empty when unknown). Communication kinds and NCCL names -> Communication; Memcpy /
// Memset -> Copy; else the first pattern of the kernel name that matches; a generic class
// (elementwise, reduction, none) gives way to a specific one the op name matches (GEMM, attention,
// norm, softmax/loss, optimizer). Case-insensitive.
KernelClass classify_gpu_activity(SpanKind kind, std::string_view kernel_name,
                                  std::string_view op_name);
KernelClass classify_gpu_activity(const KernelRecord& r);

}  // namespace pipetune::profiler
