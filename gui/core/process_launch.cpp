#include "gui/core/process_launch.hpp"

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QThread>
#include <string>

#include "engine/errors.hpp"

namespace pipetune::gui {

namespace {

// A run name as a file name: letters, digits, '-', '_' and '.' kept, the rest '_'.
QString file_stem(const QString& name) {
  QString out;
  for (const QChar c : name)
    out +=
        (c.isLetterOrNumber() && c.unicode() < 128) || c == '-' || c == '_' || c == '.' ? c : '_';
  return out.left(80);
}

bool executable(const QString& path) {
  const QFileInfo f(path);
  return f.isFile() && f.isExecutable();
}

}  // namespace

ProcessLaunch process_launch(const ProcessLaunchRequest& r) {
  if (r.processes < 2 || r.world % r.processes != 0)
    throw InputError("the plan's " + std::to_string(r.world) + " ranks do not divide into " +
                     std::to_string(r.processes) + " processes");
  const int per_process = r.world / r.processes;
  if (r.on_gpu && per_process != 1)
    throw InputError(
        "backend cuda with ranks as processes runs one rank per process, each on "
        "its own GPU: " +
        std::to_string(r.world) + " processes for this plan");
  if (r.pipetune.isEmpty())
    throw InputError("the pipetune program was not found beside this one or on PATH");
  if (r.mpirun.isEmpty())
    throw InputError("mpirun was not found on PATH (Open MPI's openmpi-bin starts the processes)");
  ProcessLaunch launch;
  const QString stamp = QDateTime::currentDateTimeUtc().toString("yyyyMMdd-HHmmss-zzz");
  launch.run_file =
      QDir(r.workspace + ".launch").filePath(file_stem(r.run_name) + "-" + stamp + ".toml");
  launch.program = r.mpirun;
  launch.arguments << "-np" << QString::number(r.processes);
  // More processes than cores: Open MPI refuses unless told that it is meant.
  if (r.processes > QThread::idealThreadCount()) launch.arguments << "--oversubscribe";
  launch.arguments << r.pipetune << "train"
                   << "--config" << launch.run_file << "--db" << r.workspace << "--name"
                   << r.run_name << "--steps" << QString::number(r.steps) << "--seed"
                   << QString::number(r.seed) << "--lr"
                   << QString::number(static_cast<double>(r.learning_rate), 'g', 9) << "--threads"
                   << QString::number(r.threads_per_rank);
  if (per_process > 1) launch.arguments << "--ranks-per-process" << QString::number(per_process);
  return launch;
}

QString find_pipetune_program() {
  const QString here = QCoreApplication::applicationDirPath();
  for (const QString& candidate : {here + "/pipetune", here + "/../cli/pipetune"})
    if (executable(candidate)) return QFileInfo(candidate).canonicalFilePath();
  return QStandardPaths::findExecutable("pipetune");
}

QString find_mpirun_program() {
  return QStandardPaths::findExecutable("mpirun");
}

QString last_error_line(const QString& errors) {
  const QStringList lines = errors.split('\n', Qt::SkipEmptyParts);
  // pipetune's own line first ("pipetune: ..."), else the last line that is not a rule of dashes.
  for (auto it = lines.rbegin(); it != lines.rend(); ++it)
    if (it->startsWith("pipetune:")) return it->trimmed();
  static const QRegularExpression rule("^[-=*\\s]*$");
  for (auto it = lines.rbegin(); it != lines.rend(); ++it)
    if (!rule.match(*it).hasMatch()) return it->trimmed();
  return {};
}

}  // namespace pipetune::gui
