#include "engine/cuda/cupti_records.hpp"

#include <cupti.h>
#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "engine/cuda/cupti_library.hpp"
#include "profiler/gpu/capture_router.hpp"
#include "profiler/gpu/gpu_activity_names.hpp"

namespace pipetune::cuda {

namespace {

std::int64_t ns(std::uint64_t t) {
  return static_cast<std::int64_t>(t);
}

std::string callback_name(CUpti_ActivityKind kind, CUpti_CallbackId cbid) {
  const CUpti_CallbackDomain domain =
      kind == CUPTI_ACTIVITY_KIND_DRIVER ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API;
  const char* name = nullptr;
  if (cupti().GetCallbackName(domain, cbid, &name) == CUPTI_SUCCESS && name != nullptr) return name;
  return std::string(kind == CUPTI_ACTIVITY_KIND_DRIVER ? "driver" : "runtime") + " call " +
         std::to_string(cbid);
}

// The fields every device record shares (CUPTI names them alike in each record type).
template <typename Record>
profiler::KernelRecord device_record(const Record& a, std::string name) {
  profiler::KernelRecord r;
  r.device = static_cast<std::int32_t>(a.deviceId);
  r.stream = static_cast<std::int32_t>(a.streamId);
  r.correlation = a.correlationId;
  r.start_ns = ns(a.start);
  r.end_ns = ns(a.end);
  r.name = std::move(name);
  return r;
}

}  // namespace

std::string kernel_display_name(const char* name) {
  if (name == nullptr) return "kernel";
  if (name[0] != '_' || name[1] != 'Z') return name;
  int status = 0;
  const std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free);
  return status == 0 && demangled ? std::string(demangled.get()) : std::string(name);
}

namespace {

template <typename Record>
bool without_times(const CUpti_Activity& record) {
  const auto& a = reinterpret_cast<const Record&>(record);
  return a.start == 0 || a.end == 0 || a.end < a.start;
}

}  // namespace

bool is_incomplete_device_record(const CUpti_Activity& record) {
  switch (record.kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return without_times<CUpti_ActivityKernel10>(record);
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return without_times<CUpti_ActivityMemcpy6>(record);
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return without_times<CUpti_ActivityMemset4>(record);
    default:
      return false;
  }
}

const std::string& CuptiNameCache::kernel(const char* name) {
  if (name == nullptr) return unnamed_;
  auto [it, inserted] = kernels_.try_emplace(name);
  if (inserted || it->second.mangled != name) it->second = {name, kernel_display_name(name)};
  return it->second.display;
}

const CuptiNameCache::ApiName& CuptiNameCache::api_name(CUpti_ActivityKind kind,
                                                        CUpti_CallbackId cbid) {
  const std::uint64_t key = (static_cast<std::uint64_t>(kind) << 32) | cbid;
  auto [it, inserted] = apis_.try_emplace(key);
  if (inserted) {
    it->second.name = callback_name(kind, cbid);
    it->second.launches = profiler::is_launch_call(it->second.name);
  }
  return it->second;
}

const std::string& CuptiNameCache::api(CUpti_ActivityKind kind, CUpti_CallbackId cbid) {
  return api_name(kind, cbid).name;
}

bool CuptiNameCache::launches(CUpti_ActivityKind kind, CUpti_CallbackId cbid) {
  return api_name(kind, cbid).launches;
}

bool append_cupti_record(const CUpti_Activity& record, profiler::GpuCapture& capture) {
  CuptiNameCache names;
  return append_cupti_record(record, capture, names);
}

bool append_cupti_record(const CUpti_Activity& record, profiler::GpuCapture& capture,
                         CuptiNameCache& names, ApiCallsKept kept) {
  if (is_incomplete_device_record(record)) return false;
  switch (record.kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto& k = reinterpret_cast<const CUpti_ActivityKernel10&>(record);
      profiler::KernelRecord r = device_record(k, names.kernel(k.name));
      r.grid = {k.gridX, k.gridY, k.gridZ};
      r.block = {k.blockX, k.blockY, k.blockZ};
      capture.activities.push_back(std::move(r));
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto& m = reinterpret_cast<const CUpti_ActivityMemcpy6&>(record);
      profiler::KernelRecord r =
          device_record(m, "memcpy " + std::string(profiler::memcpy_kind_label(m.copyKind)));
      r.bytes = static_cast<std::int64_t>(m.bytes);
      capture.activities.push_back(std::move(r));
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto& m = reinterpret_cast<const CUpti_ActivityMemset4&>(record);
      profiler::KernelRecord r = device_record(m, "memset");
      r.bytes = static_cast<std::int64_t>(m.bytes);
      capture.activities.push_back(std::move(r));
      return true;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const auto& a = reinterpret_cast<const CUpti_ActivityAPI&>(record);
      if (kept == ApiCallsKept::launches && !names.launches(record.kind, a.cbid)) return false;
      capture.api_calls.push_back(
          {a.correlationId, a.threadId, ns(a.start), ns(a.end), names.api(record.kind, a.cbid)});
      return true;
    }
    default:
      return false;
  }
}

}  // namespace pipetune::cuda
