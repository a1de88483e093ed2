// Rows read from an nsys export before ranks and lanes are known (private to db/import).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "db/import/imported_profile.hpp"
#include "profiler/gpu/gpu_activity_names.hpp"
#include "profiler/gpu/kernel_record.hpp"
#include "profiler/trace.hpp"

namespace pipetune::db::import_detail {

// A kernel, copy or memset; record.rank is filled once ranks are known.
struct GpuActivity {
  std::int64_t process = 0;  // process_key(globalPid)
  profiler::SpanKind kind = profiler::SpanKind::Kernel;
  std::optional<profiler::NcclKernel> nccl;  // set for NCCL kernels
  std::uint32_t span_name = 0;               // interned
  profiler::KernelRecord record;
};

// A CUDA runtime/driver call.
struct ApiCall {
  std::int64_t process = 0;
  std::int32_t tid = 0;
  std::int64_t start_ns = 0, end_ns = 0;
  std::int64_t correlation = -1;
  std::uint32_t name = 0;
};

// What a NCCL API range is, for telling SendRecv kernels' direction.
enum class NcclCall : std::uint8_t { None, Send, Recv, GroupStart, GroupEnd, Other };

struct NvtxRange {
  std::int64_t process = 0;
  std::int32_t tid = 0;
  std::int64_t start_ns = 0, end_ns = 0;
  std::uint32_t name = 0;
  NcclCall nccl = NcclCall::None;
};

struct ProcessInfo {
  std::int32_t pid = 0;
  std::string name;
};

// Everything the rank rule looks at.
struct RankInputs {
  std::set<std::int64_t> gpu_processes;                    // with kernels/copies/memsets
  std::set<std::int64_t> host_processes;                   // with NVTX ranges or API calls
  std::map<std::int64_t, std::set<std::int32_t>> devices;  // process -> device ids
  std::map<std::int64_t, std::pair<std::int32_t, std::string>> explicit_ranks;  // rank, why
  std::unordered_map<std::int64_t, ProcessInfo> processes;                      // PROCESSES
};

// Ranks per the rule documented in nsys_sqlite.hpp; appends warnings.
std::map<std::int64_t, std::int32_t> assign_ranks(const RankInputs& in,
                                                  std::vector<ImportedRank>& ranks,
                                                  std::vector<std::string>& warnings);

}  // namespace pipetune::db::import_detail
