// Writes what Nsight Systems leaves of a Megatron-LM pipeline-parallel run, for tests: one
// process per pipeline rank (PID 100 + rank, device = rank), "forward-compute mb=M" /
// "backward-compute mb=M" NVTX push/pop ranges (Megatron's pipeline schedule names), a CUDA
// launch call at each op's start inside its range, and one GEMM kernel on stream 7 for the op's
// whole duration. Built from the ops a test chooses, so every figure is known.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "nsys_export_writer.hpp"  // same folder: the CLI tests include this file too

namespace pipetune::db::testing {

struct PipelineOp {
  std::int32_t rank = 0;
  bool forward = true;  // else a full backward (input and weight gradients: kind BW)
  std::int32_t microbatch = 0;
  std::int64_t start_ns = 0, end_ns = 0;
};

// A point-to-point transfer between two pipeline ranks: one ncclDevKernel_SendRecv on stream 20
// of each, over the same interval (NCCL runs both sides together).
struct PipelineTransfer {
  std::int32_t from = 0, to = 0;
  std::int64_t start_ns = 0, end_ns = 0;
};

// `device_of[rank]`: the CUDA device of that rank's process (default: the rank), so a test can
// make the importer's device-order ranks differ from the pipeline order.
inline void write_pipeline_export(const std::filesystem::path& file,
                                  const std::vector<PipelineOp>& ops,
                                  const std::vector<PipelineTransfer>& transfers = {},
                                  const std::vector<int>& device_of = {}) {
  NsysExportWriter w(file);
  w.metadata("META_DATA_EXPORT", "3.25.0");
  w.string_id(1, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64");
  w.string_id(2, "cudaLaunchKernel_v7000");
  w.string_id(3, "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096>)");
  const auto device = [&](std::int32_t rank) {
    return rank < static_cast<std::int32_t>(device_of.size())
               ? device_of[static_cast<std::size_t>(rank)]
               : rank;
  };
  std::set<std::int32_t> ranks;
  for (const PipelineOp& op : ops) ranks.insert(op.rank);
  for (std::int32_t r : ranks) w.process(100 + r, "python");
  std::int64_t correlation = 1;
  for (const PipelineOp& op : ops) {
    const std::int64_t pid = 100 + op.rank;
    w.nvtx(59, pid, pid, op.start_ns, op.end_ns,
           std::string(op.forward ? "forward" : "backward") +
               "-compute mb=" + std::to_string(op.microbatch));
    w.runtime(pid, pid, correlation, op.start_ns, op.start_ns + 1, 2);
    w.kernel(pid, device(op.rank), 7, correlation, op.start_ns, op.end_ns, 1, 1);
    ++correlation;
  }
  for (const PipelineTransfer& t : transfers)
    for (std::int32_t rank : {t.from, t.to}) {
      const std::int64_t pid = 100 + rank;
      w.runtime(pid, pid, correlation, t.start_ns - 2, t.start_ns - 1, 2);
      w.kernel(pid, device(rank), 20, correlation, t.start_ns, t.end_ns, 3, 3);
      ++correlation;
    }
  w.close();
}

}  // namespace pipetune::db::testing
