// The GPU part of `pipetune report`: each rank's GPU time by kind of work (GEMM, attention,
// norm... profiler/gpu/kernel_class.hpp) and by the pipeline phase that launched it, for runs
// with GPU activity records (imports, the engine's CUPTI capture).
#pragma once

#include <nlohmann/json.hpp>

#include "cli/workspace_cli.hpp"

namespace pipetune::cli {

// Nothing when the run has no GPU activity in the window.
void print_gpu_op_time(const LoadedRun& r);
// null when the run has no GPU activity in the window.
nlohmann::json gpu_op_time_json(const LoadedRun& r);

}  // namespace pipetune::cli
