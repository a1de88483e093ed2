// A RunSpec as the text of a run file (the format of run_spec.hpp): what a front end writes for
// a launch elsewhere (a cluster's `sbatch` script runs `pipetune train --config` on it).
// load_run of the written file gives back the same RunSpec, all but `source`:
//  - the model and the cluster are a preset name when they equal that preset exactly, else full
//    [model] and [cluster] tables; the cluster's hardware likewise a preset name or a
//    [cluster.hardware] table;
//  - [plan] holds every field; global_batch only when the run states it (global_batch_given),
//    and fields left 0 to be derived (dp, chunks, microbatches) stay out for the reader;
//  - numbers read back to the same doubles, and strings take any UTF-8 text.
#pragma once

#include <string>

#include "engine/spec/run_spec.hpp"

namespace pipetune::spec {

// SpecError when the run would not load (validate(run), precision or attention against the
// backend); InputError when a name or description is not UTF-8.
std::string run_file_toml(const RunSpec& run);

// run_file_toml written by write_spec_file's rule (a temporary file renamed into place; only a
// regular file is replaced); InputError naming the path when it cannot be written.
void write_run_file(const RunSpec& run, const std::string& path);

}  // namespace pipetune::spec
