// What an importer returns: the profile as a Trace (kind Imported) plus the GPU activity details
// the Trace has no room for, the source's schema version and what the importer had to guess or
// skip (warnings, one line each).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/gpu/kernel_record.hpp"
#include "profiler/trace.hpp"

namespace pipetune::db {

// How a rank of the imported Trace was found in the source.
struct ImportedRank {
  std::int32_t rank = 0;
  std::int64_t pid = -1;              // OS process id, -1 when the source has none
  std::string process_name;           // "python3", "./saxpy-mpi-cuda"; empty when unknown
  std::vector<std::int32_t> devices;  // CUDA devices the process ran work on, ascending
  std::string source;  // why this rank number: "thread name 'MPI Rank 0'", "device order"...
};

// A GPU described by the source (nsys TARGET_INFO_GPU).
struct ImportedGpu {
  std::int32_t id = 0;
  std::string name;                     // "NVIDIA A100-SXM4-40GB"
  std::int64_t total_memory_bytes = 0;  // 0 when unknown
  std::int32_t sm_count = 0;            // 0 when unknown
};

struct ImportedProfile {
  profiler::Trace trace;  // kind Imported; spans sorted by (lane, start_ns, longest first)
  std::vector<profiler::KernelRecord> kernels;  // kernels, copies and memsets, in span order
  std::string schema_version;  // "3.25.0" (nsys export schema); empty when not given
  std::vector<std::string> warnings;
  std::vector<ImportedRank> ranks;  // ascending rank
  std::vector<ImportedGpu> gpus;
};

}  // namespace pipetune::db
