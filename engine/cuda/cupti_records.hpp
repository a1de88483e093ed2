// CUPTI Activity API records (CUPTI 13: CUpti_ActivityKernel10, Memcpy6, Memset4, API) into the
// profiler's GpuCapture, the form that joins a rank's Trace (profiler/gpu/gpu_capture.hpp). The
// collector (cupti_collector.hpp) feeds it every record of a completed buffer; tests feed it
// records they construct, so this runs without a GPU.
#pragma once

#include <cupti_activity.h>

#include "profiler/gpu/gpu_capture.hpp"

namespace pipetune::cuda {

// A kernel, copy or memset record without its timestamps (start or end 0, or end before start):
// what a forced flush delivers for work still running (cuptiActivityFlushAll says so), e.g. when
// one rank flushes while another rank's kernels run on the same GPU. Its times never arrive.
bool is_incomplete_device_record(const CUpti_Activity& record);

// Appends `record` to `capture` when it is a kernel (KERNEL, CONCURRENT_KERNEL), a copy, a
// memset or a runtime / driver API call; returns false for every other kind and for incomplete
// device records (left out: their zero timestamps would land 1.8e18 ns before the run).
bool append_cupti_record(const CUpti_Activity& record, profiler::GpuCapture& capture);

// A kernel's name as the timeline shows it: demangled when CUPTI gives the mangled symbol.
std::string kernel_display_name(const char* name);

}  // namespace pipetune::cuda
