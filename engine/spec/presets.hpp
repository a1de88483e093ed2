// Preset lookup. Presets are TOML files under <presets dir>/<kind>/<name>.toml. Wherever a preset
// name is asked for, a path to a TOML file of the same format works too.
//
// The presets directory is, in order: $PIPETUNE_PRESETS_DIR when set; the source tree's presets/
// (compiled in) when it exists; <executable dir>/../share/pipetune/presets for an installed copy.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace pipetune::spec {

enum class PresetKind { Models, Hardware, Clusters, Runs };

std::string_view preset_kind_name(PresetKind kind);   // folder name: "models", "hardware", ...
PresetKind parse_preset_kind(std::string_view name);  // throws SpecError listing valid kinds
std::vector<PresetKind> all_preset_kinds();

// Throws SpecError when $PIPETUNE_PRESETS_DIR names something that is not a directory.
std::filesystem::path presets_dir();

// Sorted preset names of a kind (file stems); empty when the folder is missing.
std::vector<std::string> list_presets(PresetKind kind);

// A string with a '/' or ending in ".toml" is a path; anything else is a preset name.
bool is_preset_path(std::string_view name_or_path);
// Why `p` is no spec file to read: "not found", "is a directory, ...", "is not a regular file
// (...)".
std::string not_a_file_reason(const std::filesystem::path& p);

// The file a name or path stands for. A relative path is taken relative to base_dir when given
// (the folder of the file that refers to it), else to the working directory. Throws SpecError
// for an unknown name (listing the valid names of that kind) or a path that does not exist.
std::filesystem::path resolve_preset(PresetKind kind, std::string_view name_or_path,
                                     const std::filesystem::path& base_dir = {});

}  // namespace pipetune::spec
