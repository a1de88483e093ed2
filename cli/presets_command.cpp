// `pipetune presets`: the presets shipped (or found under $PIPETUNE_PRESETS_DIR), by kind.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/json_output.hpp"
#include "engine/spec/presets.hpp"

namespace pipetune::cli {

void add_presets_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto kind = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("presets", "List model, hardware, cluster and run presets");
  cmd->add_option("kind", *kind, "Only this kind: models, hardware, clusters, runs");
  cmd->add_flag("--json", *json, "Print one JSON object on stdout");
  cmd->callback([json, kind] {
    std::vector<spec::PresetKind> kinds = spec::all_preset_kinds();
    if (!kind->empty()) kinds = {spec::parse_preset_kind(*kind)};
    nlohmann::json j = nlohmann::json::object();
    for (spec::PresetKind k : kinds) {
      const auto names = spec::list_presets(k);
      if (*json) {
        j[std::string(spec::preset_kind_name(k))] = names;
        continue;
      }
      std::cout << spec::preset_kind_name(k) << ":";
      for (const auto& n : names) std::cout << " " << n;
      std::cout << "\n";
    }
    if (*json) print_json_value(j);
  });
}

}  // namespace pipetune::cli
