#include "engine/spec/presets.hpp"

#include <algorithm>
#include <cstdlib>
#include <system_error>

#include "engine/errors.hpp"

#ifndef PIPETUNE_PRESETS_DIR
#define PIPETUNE_PRESETS_DIR ""
#endif

namespace fs = std::filesystem;

namespace pipetune::spec {

namespace {

// Singular noun for messages ("unknown model preset").
std::string_view kind_noun(PresetKind kind) {
  switch (kind) {
    case PresetKind::Models:
      return "model";
    case PresetKind::Hardware:
      return "hardware";
    case PresetKind::Clusters:
      return "cluster";
    case PresetKind::Runs:
      return "run";
  }
  return "?";
}

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return !p.empty() && fs::is_directory(p, ec);
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

std::string_view preset_kind_name(PresetKind kind) {
  switch (kind) {
    case PresetKind::Models:
      return "models";
    case PresetKind::Hardware:
      return "hardware";
    case PresetKind::Clusters:
      return "clusters";
    case PresetKind::Runs:
      return "runs";
  }
  return "?";
}

std::vector<PresetKind> all_preset_kinds() {
  return {PresetKind::Models, PresetKind::Hardware, PresetKind::Clusters, PresetKind::Runs};
}

PresetKind parse_preset_kind(std::string_view name) {
  for (PresetKind k : all_preset_kinds()) {
    if (preset_kind_name(k) == name) return k;
  }
  throw SpecError("unknown preset kind '" + std::string(name) +
                  "' (valid: models, hardware, clusters, runs)");
}

fs::path presets_dir() {
  if (const char* env = std::getenv("PIPETUNE_PRESETS_DIR"); env != nullptr && *env != '\0') {
    if (!is_dir(env)) {
      throw SpecError("PIPETUNE_PRESETS_DIR='" + std::string(env) + "' is not a directory");
    }
    return env;
  }
  const fs::path compiled_in = PIPETUNE_PRESETS_DIR;
  if (is_dir(compiled_in)) return compiled_in;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path() / ".." / "share" / "pipetune" / "presets";
    if (is_dir(installed)) return installed.lexically_normal();
  }
  return compiled_in;
}

std::vector<std::string> list_presets(PresetKind kind) {
  std::vector<std::string> names;
  const fs::path dir = presets_dir() / preset_kind_name(kind);
  std::error_code ec;
  if (!is_dir(dir)) return names;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".toml" && entry.is_regular_file(ec)) {
      names.push_back(entry.path().stem().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool is_preset_path(std::string_view name_or_path) {
  return name_or_path.find('/') != std::string_view::npos || name_or_path.ends_with(".toml");
}

std::string not_a_file_reason(const fs::path& p) {
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (ec || !fs::exists(st)) return "not found";
  if (fs::is_directory(st)) return "is a directory, not a TOML file";
  if (!fs::is_regular_file(st)) return "is not a regular file (a device, pipe or socket)";
  return "cannot be read";
}

fs::path resolve_preset(PresetKind kind, std::string_view name_or_path, const fs::path& base_dir) {
  std::error_code ec;
  if (name_or_path.empty()) {
    throw SpecError("empty " + std::string(kind_noun(kind)) + " preset name");
  }
  if (is_preset_path(name_or_path)) {
    fs::path p{std::string(name_or_path)};
    if (p.is_relative() && !base_dir.empty()) p = base_dir / p;
    if (!fs::is_regular_file(p, ec))
      throw SpecError(std::string(kind_noun(kind)) + " file '" + p.string() + "' " +
                      not_a_file_reason(p));
    return p;
  }
  const fs::path file =
      presets_dir() / preset_kind_name(kind) / (std::string(name_or_path) + ".toml");
  if (fs::is_regular_file(file, ec)) return file;
  // Not a preset: an existing file of that name (say `run.pipetune` from `pipetune export`).
  fs::path local{std::string(name_or_path)};
  if (!base_dir.empty()) local = base_dir / local;
  if (fs::is_regular_file(local, ec)) return local;
  throw SpecError("unknown " + std::string(kind_noun(kind)) + " preset '" +
                  std::string(name_or_path) + "' (valid: " + joined(list_presets(kind)) +
                  "; or give a path to a .toml file)");
}

}  // namespace pipetune::spec
