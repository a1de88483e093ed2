// What `import-nsys` and `import-trace` are told about the profiled run: its model, cluster and
// plan, from a run file (--config) or from flags (--model --hardware --tp --pp --dp ...), so
// that the imported run is grouped into stages by its plan and can be compared with a
// prediction of it.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "cli/plan_flags.hpp"
#include "engine/spec/run_spec.hpp"

namespace pipetune::cli {

struct ImportDescriptionArgs {
  std::string config, model, hardware, schedule;
  PlanFlags plan;
};

void add_import_description_options(CLI::App* cmd, ImportDescriptionArgs& a);

// The run the flags describe; nullopt when none was given. InputError naming the missing or
// conflicting flag, or the rule the description breaks: the specs' (spec::validate) and the
// schedule's (spec::plan_schedule), the one validation predict and train apply. Whether the
// profile agrees with it is db::check_profile_against_plan's.
std::optional<spec::RunSpec> import_description(const ImportDescriptionArgs& a);

}  // namespace pipetune::cli
