// Internal to engine/spec: turning one TOML table into a spec, shared by the file loaders
// (load.cpp) and the run loader, whose `model` and `cluster` may be inline tables. Like
// toml_reader.hpp it needs toml++, so only engine/ sources may include it.
#pragma once

#include <filesystem>
#include <string>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/hardware_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/toml_reader.hpp"

namespace pipetune::spec::detail {

// Where a table came from: the file (for messages), the dotted prefix of its keys ("model." in
// a run file, "" for a whole file), the folder relative paths start from, and the name the spec
// gets when the table has no `name` key.
struct TableContext {
  std::string source;
  std::string prefix;
  std::filesystem::path base_dir;
  std::string default_name;
};

// Each reads every key of the table (rejecting unknown ones), follows `preset` chains, applies
// defaults and validates the result, prefixing rule violations with the source.
ModelSpec read_model_table(const toml::table& table, const TableContext& ctx);
HardwareSpec read_hardware_table(const toml::table& table, const TableContext& ctx);
ClusterSpec read_cluster_table(const toml::table& table, const TableContext& ctx);

// Context for a whole file: source = its path, base_dir = its folder, name = its stem.
TableContext file_context(const std::filesystem::path& file);

}  // namespace pipetune::spec::detail
