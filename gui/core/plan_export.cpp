#include "gui/core/plan_export.hpp"

#include <filesystem>

#include "db/output_file.hpp"

namespace pipetune::gui {

QString export_suffix(tuner::ExportFormat format) {
  switch (format) {
    case tuner::ExportFormat::Megatron:
      return "sh";
    case tuner::ExportFormat::Torchtitan:
      return "py";
    case tuner::ExportFormat::TorchtitanToml:
      return "toml";
    case tuner::ExportFormat::Deepspeed:
      return "json";
    case tuner::ExportFormat::Pipetune:
      return "toml";
  }
  return "txt";
}

ExportWrite write_export(tuner::ExportFormat format, const tuner::ExportRequest& request,
                         const QString& path, bool overwrite) {
  // Render first: a plan the framework refuses leaves no file behind. What goes beside the file
  // (torchtitan's schedule CSV, DeepSpeed's model code) is checked with it, as the CLI does.
  const std::string text = tuner::export_plan(format, request);
  const tuner::ExportSideFile side = tuner::export_side_file(format, request);
  const std::string file = path.toStdString();
  const std::string side_path = (std::filesystem::path(file).parent_path() / side.name).string();
  try {
    db::check_output_file(file, overwrite);
    if (!side.text.empty()) db::check_output_file(side_path, overwrite);
  } catch (const db::OutputFileExists&) {
    return ExportWrite::ExistsNotOverwritten;
  }
  db::write_output_file(file, text, {.executable = format == tuner::ExportFormat::Megatron});
  if (!side.text.empty()) db::write_output_file(side_path, side.text);
  return ExportWrite::Written;
}

}  // namespace pipetune::gui
