// Writing an exported plan (tuner::export_plan) to a file: atomically (QSaveFile: written next
// to the target and renamed into place, never a half-written file) and never over an existing
// file unless the caller says the user confirmed it.
#pragma once

#include <QString>

#include "tuner/export/exporters.hpp"

namespace pipetune::gui {

enum class ExportWrite { Written, ExistsNotOverwritten };

// Renders the file with the exporter (InputError naming the framework rule the plan breaks) and
// writes it; std::runtime_error naming the file when it cannot be written. A Megatron script is
// made executable, as `pipetune export` does.
ExportWrite write_export(tuner::ExportFormat format, const tuner::ExportRequest& request,
                         const QString& path, bool overwrite);

// The file name filter and default suffix of a format for a file dialog ("*.sh", "sh").
QString export_suffix(tuner::ExportFormat format);

}  // namespace pipetune::gui
