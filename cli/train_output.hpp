// What `pipetune train` prints when a run ends: the JSON of --json (losses, steps, ranks, the plan
// as run, the engine's choices and the GPU capture's counts) or the text summary.
#pragma once

#include <cstdint>
#include <string>

#include "engine/runtime/trainer.hpp"

namespace pipetune::cli {

// The engine choices the command line made, as --json reports them.
struct TrainEngineChoices {
  std::string precision = "fp32";
  std::string attention;    // as given (--attention or the run file's); "" when not given
  std::string gemm_inputs;  // --gemm-inputs as given; "" when not given
  bool gelu_epilogue = false;
};

// --json's object on stdout; run_id < 0 when the run was not stored.
void print_train_json(const runtime::TrainOptions& o, const runtime::TrainResult& r,
                      std::int64_t run_id, const TrainEngineChoices& choices);
// The text summary: the last step's pipeline time and tokens/s, each rank's compute, bubble and
// memory, and the GPU capture's counts when there was any.
void print_train_summary(const runtime::TrainResult& r);

}  // namespace pipetune::cli
