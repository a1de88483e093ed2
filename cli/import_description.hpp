// What `import-nsys` and `import-trace` are told about the profiled run: its model, cluster and
// plan, from a run file (--config) or from flags (--model --hardware --tp --pp --dp ...), so
// that the imported run is grouped into stages by its plan and can be compared with a
// prediction of it. The profile's ranks must agree with the plan.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "db/import/imported_profile.hpp"
#include "engine/spec/run_spec.hpp"

namespace pipetune::cli {

struct ImportDescriptionArgs {
  std::string config, model, hardware, schedule;
  std::optional<int> tp, pp, dp, ep, chunks, microbatches, micro_batch_size;
};

void add_import_description_options(CLI::App* cmd, ImportDescriptionArgs& a);

// The run the flags describe; nullopt when none was given. InputError naming the missing or
// conflicting flag, or the rule the description breaks.
std::optional<spec::RunSpec> import_description(const ImportDescriptionArgs& a);

// InputError when the profile's ranks contradict the plan (another number of ranks, or a rank
// number outside the plan's world), naming both.
void check_profile_against_plan(const db::ImportedProfile& profile, const spec::RunSpec& run);

}  // namespace pipetune::cli
