// CUPTI Activity API records (CUPTI 13: CUpti_ActivityKernel10, Memcpy6, Memset4, API) into the
// profiler's GpuCapture, the form that joins a rank's Trace (profiler/gpu/gpu_capture.hpp). The
// collector (cupti_collector.hpp) feeds it every record of a completed buffer; tests feed it
// records they construct, so this runs without a GPU.
#pragma once

#include <cupti_activity.h>

#include <cstdint>
#include <string>
#include <unordered_map>

#include "profiler/gpu/gpu_capture.hpp"

namespace pipetune::cuda {

// A kernel, copy or memset record without its timestamps (start or end 0, or end before start):
// what a forced flush delivers for work still running (cuptiActivityFlushAll says so), e.g. when
// one rank flushes while another rank's kernels run on the same GPU. Its times never arrive.
bool is_incomplete_device_record(const CUpti_Activity& record);

// A kernel's name as the timeline shows it: demangled when CUPTI gives the mangled symbol.
std::string kernel_display_name(const char* name);

// The names records show, each worked out once: CUPTI shares one name string among all the
// records of a kernel, so a kernel's display name is kept by that pointer (checked against the
// name it was made from, in case CUPTI reuses the address for another kernel), and an API call's
// by its callback id. A step of short kernels delivers hundreds of records at its flush, and
// working out each one's name again was three quarters of the walk's host time
// (cupti_records_bench).
// Not thread-safe: the collector uses it under its lock.
class CuptiNameCache {
 public:
  const std::string& kernel(const char* name);
  const std::string& api(CUpti_ActivityKind kind, CUpti_CallbackId cbid);
  // Whether the call creates device work (profiler::is_launch_call of its name).
  bool launches(CUpti_ActivityKind kind, CUpti_CallbackId cbid);
  std::size_t kernels() const { return kernels_.size(); }

 private:
  struct KernelName {
    std::string mangled;  // what the pointer held when it was demangled
    std::string display;
  };
  struct ApiName {
    std::string name;
    bool launches = false;
  };
  const ApiName& api_name(CUpti_ActivityKind kind, CUpti_CallbackId cbid);
  std::unordered_map<const char*, KernelName> kernels_;
  std::unordered_map<std::uint64_t, ApiName> apis_;  // kind << 32 | callback id
  std::string unnamed_ = kernel_display_name(nullptr);
};

// Which runtime and driver call records a walk keeps: all, or only the calls that create device
// work (profiler::is_launch_call), which is all the engine's router keeps of them: the others are
// then dropped as the buffer is read instead of copied out with their names (a GPT-2 step on an
// H100 recorded three of them for each launch).
enum class ApiCallsKept { all, launches };

// Appends `record` to `capture` when it is a kernel (KERNEL, CONCURRENT_KERNEL), a copy, a
// memset or a runtime / driver API call `kept` keeps; returns false for every other kind and
// call and for incomplete device records (left out: their zero timestamps would land 1.8e18 ns
// before the run). Names come from `names`.
bool append_cupti_record(const CUpti_Activity& record, profiler::GpuCapture& capture,
                         CuptiNameCache& names, ApiCallsKept kept = ApiCallsKept::all);
// The same with names worked out afresh (tests).
bool append_cupti_record(const CUpti_Activity& record, profiler::GpuCapture& capture);

}  // namespace pipetune::cuda
