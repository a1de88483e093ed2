#include "gui/core/plan_export.hpp"

#include <QFile>
#include <QFileInfo>
#include <QSaveFile>
#include <stdexcept>

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
  if (!overwrite && QFileInfo::exists(path)) return ExportWrite::ExistsNotOverwritten;
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly))
    throw std::runtime_error("cannot write '" + path.toStdString() +
                             "': " + file.errorString().toStdString());
  file.write(text.data(), static_cast<qint64>(text.size()));
  if (!file.commit())
    throw std::runtime_error("cannot write '" + path.toStdString() +
                             "': " + file.errorString().toStdString());
  if (format == tuner::ExportFormat::Megatron)
    QFile::setPermissions(path, QFile::permissions(path) | QFileDevice::ExeOwner |
                                    QFileDevice::ExeGroup | QFileDevice::ExeOther);
  return ExportWrite::Written;
}

}  // namespace pipetune::gui
