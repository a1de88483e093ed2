// Writing an exported plan (tuner::export_plan) to a file by the rule every output file follows
// (db/output_file.hpp: a regular file only, written beside the target and renamed into place)
// and never over an existing file unless the caller says the user confirmed it.
#pragma once

#include <QString>

#include "tuner/export/exporters.hpp"

namespace pipetune::gui {

enum class ExportWrite { Written, ExistsNotOverwritten };

// Renders the file with the exporter (InputError naming the framework rule the plan breaks) and
// writes it with what goes beside it (tuner::export_side_file); InputError for a path that cannot
// take a file (a folder, a FIFO, a device, a missing folder), std::runtime_error naming the file
// when the file system refuses. A Megatron script is made executable, as `pipetune export` does.
ExportWrite write_export(tuner::ExportFormat format, const tuner::ExportRequest& request,
                         const QString& path, bool overwrite);

// The file name filter and default suffix of a format for a file dialog ("*.sh", "sh").
QString export_suffix(tuner::ExportFormat format);

}  // namespace pipetune::gui
