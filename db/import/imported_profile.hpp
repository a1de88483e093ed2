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
  // Numbered by device or process order rather than named by the profile (MPI_RANKS, a rank in a
  // thread or process name, distributedInfo): such numbers may be renumbered by what the profile
  // shows later (a launcher's node rank, a pipeline's stage order).
  bool ordered = false;
};

// A GPU described by the source (nsys TARGET_INFO_GPU).
struct ImportedGpu {
  std::int32_t id = 0;
  std::string name;                     // "NVIDIA A100-SXM4-40GB"
  std::int64_t total_memory_bytes = 0;  // 0 when unknown
  std::int32_t sm_count = 0;            // 0 when unknown
};

// How the GPU activities were tied to the host ranges they were launched from
// (kernel_attribution.hpp).
struct KernelAttributionCounts {
  std::size_t attributed = 0;      // launched inside a range: KernelRecord::op set
  std::size_t in_phase = 0;        // of those, inside a pipeline phase: KernelRecord::phase set
  std::size_t outside_ranges = 0;  // launch call found, but no range open around it
  std::size_t without_launch = 0;  // no launch call with its correlation id in the profile
};

struct ImportedProfile {
  profiler::Trace trace;  // kind Imported; spans sorted by (lane, start_ns, longest first)
  std::vector<profiler::KernelRecord> kernels;  // kernels, copies and memsets, in span order
  std::string schema_version;  // "3.25.0" (nsys export schema); empty when not given
  std::vector<std::string> warnings;
  std::vector<ImportedRank> ranks;  // ascending rank
  std::vector<ImportedGpu> gpus;
  KernelAttributionCounts attribution;
  std::string launch;  // the launch command the profile records (torchrun ...); "" when none
  std::int32_t launch_world_size = 0;  // ranks that command starts in all; 0 when it does not say
};

}  // namespace pipetune::db
