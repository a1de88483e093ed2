// Details of one GPU activity (kernel, memcpy, memset) from an imported profile, beyond what its
// Span says. The Span (lane = the rank's Gpu lane for the stream, kind Kernel / Memcpy / Memset or
// a collective for NCCL kernels) carries the timing; the store keeps these fields in its kernels
// table, linked to the span by (lane, start_ns).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "profiler/trace.hpp"

namespace pipetune::profiler {

struct KernelRecord {
  std::int32_t rank = 0;
  std::int32_t device = -1;       // CUDA device id
  std::int32_t stream = -1;       // CUDA stream id
  std::int64_t correlation = -1;  // links to the CUDA API call that launched it
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::string name;                           // demangled (kernels) or e.g. "memcpy DtoD"
  std::array<std::int32_t, 3> grid{0, 0, 0};  // 0 when not a kernel
  std::array<std::int32_t, 3> block{0, 0, 0};
  std::int64_t bytes = 0;  // memcpy / memset size; 0 for kernels
  // The op it is attributed to (the innermost host range open on the launching thread when it
  // was launched, e.g. "aten::addmm"); empty when unknown. `phase`: the pipeline phase (F, B, W,
  // BW...) enclosing that launch, when one does, with its micro-batch and chunk (-1: none).
  std::string op;
  std::optional<SpanKind> phase;
  std::int32_t microbatch = -1;
  std::int16_t chunk = -1;
};

}  // namespace pipetune::profiler
