// The job a run as processes starts: `mpirun -np N pipetune train --config RUNFILE --db ... `,
// with the run file kept beside the workspace (WORKSPACE.launch/NAME-TIME.toml) so the run can be
// launched again, by hand or from a cluster script.
#pragma once

#include <QString>
#include <QStringList>
#include <cstdint>

namespace pipetune::gui {

struct ProcessLaunchRequest {
  QString pipetune;  // the CLI program
  QString mpirun;
  QString workspace;
  QString run_name;
  int world = 1;      // the plan's ranks
  int processes = 2;  // of the job; world / processes rank threads each
  bool on_gpu = false;
  int steps = 60;
  std::uint64_t seed = 1234;
  float learning_rate = 3e-3f;
  int threads_per_rank = 0;
};

struct ProcessLaunch {
  QString program;
  QStringList arguments;
  QString run_file;  // where the run file goes (written by the caller)
};

// InputError when the processes cannot hold the plan's ranks (they must divide them; on GPUs,
// one rank per process) or a program is missing.
ProcessLaunch process_launch(const ProcessLaunchRequest& request);

// The `pipetune` program beside this one (an installed bin/ or the build tree's cli/), else on
// PATH; "" when there is none.
QString find_pipetune_program();
// mpirun on PATH; "" when there is none.
QString find_mpirun_program();
// The last non-empty line of a job's error output that says what failed (mpirun's own banner
// lines are skipped), "" when there is none.
QString last_error_line(const QString& errors);

}  // namespace pipetune::gui
