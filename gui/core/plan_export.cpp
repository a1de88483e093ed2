#include "gui/core/plan_export.hpp"

#include "db/output_file.hpp"

namespace pipetune::gui {

QString export_suffix(tuner::ExportFormat format) {
  switch (format) {
    case tuner::ExportFormat::Megatron:
      return "sh";
    case tuner::ExportFormat::Torchtitan:
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
  // Render first: a plan the framework refuses leaves no file behind.
  const std::string text = tuner::export_plan(format, request);
  const std::string file = path.toStdString();
  try {
    db::check_output_file(file, overwrite);
  } catch (const db::OutputFileExists&) {
    return ExportWrite::ExistsNotOverwritten;
  }
  db::write_output_file(file, text, {.executable = format == tuner::ExportFormat::Megatron});
  return ExportWrite::Written;
}

}  // namespace pipetune::gui
