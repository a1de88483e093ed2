// Names of GPU activities shared by the importers: which collective a NCCL kernel runs (from its
// name alone) and how a CUDA copy kind is written ("memcpy DtoD").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "profiler/trace.hpp"

namespace pipetune::profiler {

// What a NCCL kernel's name says. Kernels are "ncclKernel_<Coll>_..." (older NCCL) or
// "ncclDevKernel_<Coll>_..." (NCCL >= 2.19), optionally after "void " in demangled form.
enum class NcclKernel : std::uint8_t {
  AllReduce,
  AllGather,
  ReduceScatter,
  Broadcast,
  Reduce,
  AllToAll,
  SendRecv,  // point-to-point, direction not in the name
  Send,
  Recv,
  Unknown,  // a NCCL kernel of no collective named above
};

// nullopt when `name` is not a NCCL kernel.
std::optional<NcclKernel> classify_nccl_kernel(std::string_view name);

// The span kind of a NCCL kernel: its collective, Send for point-to-point (SendRecv included),
// Kernel for Reduce and the unknown ones.
SpanKind span_kind_of(NcclKernel k);

// Label of a CUDA memcpy kind code (CUPTI / nsys ENUM_CUDA_MEMCPY_OPER): 1 -> "HtoD",
// 8 -> "DtoD", 11 -> "UVM HtoD"; codes outside 0..13 -> "unknown".
std::string_view memcpy_kind_label(std::int64_t code);

// The same label from an ENUM_CUDA_MEMCPY_OPER name ("CUDA_MEMCPY_KIND_DTOD" -> "DtoD");
// empty when the name is none of the known kinds.
std::string memcpy_kind_label_from_enum_name(std::string_view enum_name);

}  // namespace pipetune::profiler
