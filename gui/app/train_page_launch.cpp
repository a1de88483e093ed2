// The Train page's launch choices: where the engine computes and where the ranks go, each choice
// this build or machine cannot run greyed out with the reason; and the cluster launch it writes.
#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QStandardItemModel>

#include "engine/session/training_session.hpp"
#include "engine/spec/run_file_writer.hpp"
#include "engine/spec/slurm_launch.hpp"
#include "gui/app/train_page.hpp"
#include "gui/core/process_launch.hpp"

namespace pipetune::gui {

namespace {

// Greys out item `index` of a combo box, saying why in its tooltip.
void disable_item(QComboBox* box, int index, const QString& why) {
  auto* model = qobject_cast<QStandardItemModel*>(box->model());
  if (model == nullptr) return;
  QStandardItem* item = model->item(index);
  item->setEnabled(false);
  item->setToolTip(why);
  item->setData(why, Qt::StatusTipRole);
}

void enable_item(QComboBox* box, int index) {
  auto* model = qobject_cast<QStandardItemModel*>(box->model());
  if (model == nullptr) return;
  model->item(index)->setEnabled(true);
  model->item(index)->setToolTip(QString());
}

QComboBox* make_choice(const char* name, const QStringList& items) {
  auto* box = new QComboBox;
  box->setObjectName(name);
  box->addItems(items);
  return box;
}

// Why ranks cannot run as processes from here ("" when they can).
QString processes_problem() {
  if (!session::runs_processes())
    return "this pipetune was built without MPI (configure with -DPIPETUNE_MPI=ON)";
  if (find_mpirun_program().isEmpty())
    return "mpirun is not on PATH (Open MPI's openmpi-bin starts the processes)";
  return {};
}

}  // namespace

QWidget* TrainPage::make_engine_bar() {
  auto* bar = new QWidget;
  auto* row = new QHBoxLayout(bar);
  row->setContentsMargins(0, 0, 0, 0);
  backend_ = make_choice("train_backend", {"cpu", "cuda"});
  if (const std::string problem = session::cuda_backend_problem(); !problem.empty())
    disable_item(backend_, 1, "cuda: " + QString::fromStdString(problem));
  precision_ = make_choice("train_precision", {"fp32", "bf16"});
  attention_ =
      make_choice("train_attention", {"default", "stored", "flash", "flash-tc", "flash-mma"});
  attention_->setToolTip(
      "default: stored on the cpu, flash on cuda in fp32, flash-mma on cuda in bf16");
  ranks_ = make_choice("train_ranks", {"rank threads", "processes (mpirun)"});
  if (const QString problem = processes_problem(); !problem.isEmpty())
    disable_item(ranks_, 1, problem);
  processes_ = new QSpinBox;
  processes_->setObjectName("train_processes");
  processes_->setRange(2, 1024);
  processes_->setValue(2);
  processes_->setToolTip("Processes of the mpirun job; the plan's ranks are split among them");
  cluster_launch_ = new QPushButton("Write cluster launch...");
  cluster_launch_->setObjectName("train_cluster_launch");
  cluster_launch_->setToolTip(
      "Write the Set up plan's run file and an sbatch script that runs it with srun");
  row->addWidget(new QLabel("Backend:"));
  row->addWidget(backend_);
  row->addWidget(new QLabel("Precision:"));
  row->addWidget(precision_);
  row->addWidget(new QLabel("Attention:"));
  row->addWidget(attention_);
  row->addSpacing(16);
  row->addWidget(new QLabel("Ranks as:"));
  row->addWidget(ranks_);
  row->addWidget(processes_);
  row->addStretch();
  row->addWidget(cluster_launch_);
  for (QComboBox* box : {backend_, precision_, ranks_})
    connect(box, &QComboBox::currentIndexChanged, this, [this] { refresh_engine_choices(); });
  connect(cluster_launch_, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getSaveFileName(
        this, "Write a cluster launch", "pipetune-train.sbatch", "sbatch script (*.sbatch *.sh)");
    if (!path.isEmpty()) write_cluster_launch(path);
  });
  return bar;
}

// bf16 and the GPU kernels only with cuda; the process count only for processes.
void TrainPage::refresh_engine_choices() {
  if (backend_ == nullptr) return;
  const bool cuda = backend_->currentIndex() == 1;
  if (!cuda) {
    precision_->setCurrentIndex(0);
    disable_item(precision_, 1, "bf16 is for the cuda backend (the cpu computes in fp32)");
    for (int i : {3, 4}) {
      if (attention_->currentIndex() == i) attention_->setCurrentIndex(0);
      disable_item(attention_, i, "a tensor-core kernel of the cuda backend");
    }
  } else {
    enable_item(precision_, 1);
    for (int i : {3, 4}) enable_item(attention_, i);
  }
  processes_->setEnabled(ranks_->currentIndex() == 1 && !runs_->running());
}

RunRequest TrainPage::with_launch_choices(RunRequest request) const {
  spec::TrainingEngine& e = request.engine;
  e.backend = backend_->currentIndex() == 1 ? spec::EngineBackend::cuda : spec::EngineBackend::cpu;
  e.precision = spec::parse_engine_precision(precision_->currentText().toStdString());
  e.attention = attention_->currentIndex() == 0
                    ? spec::default_engine_attention(e.backend, e.precision)
                    : spec::parse_engine_attention(attention_->currentText().toStdString());
  request.processes = ranks_->currentIndex() == 1 ? processes_->value() : 1;
  return request;
}

bool TrainPage::write_cluster_launch(const QString& script) {
  if (!form_->selection()) {
    show_error("The Set up plan is not valid: " + form_->message());
    return false;
  }
  const PlanSelection& chosen = *form_->selection();
  RunRequest request;
  request.processes = 1;
  request = with_launch_choices(request);
  spec::RunSpec run;
  run.model = chosen.model;
  run.cluster = chosen.cluster;
  run.plan = chosen.plan;
  run.backend = request.engine.backend;
  run.precision = request.engine.precision;
  run.attention = request.engine.attention;
  const QFileInfo where(script);
  const QString run_file = where.absolutePath() + "/" + where.completeBaseName() + ".toml";
  try {
    spec::write_run_file(run, run_file.toStdString());
    spec::SlurmLaunch launch = spec::slurm_launch(run);
    launch.run_file = run_file.toStdString();
    launch.workspace = QFileInfo(runs_->workspace()).absoluteFilePath().toStdString();
    // Rank threads per task as this page runs them as processes; one a task otherwise.
    if (request.processes > 1 && launch.world_size % request.processes == 0)
      launch.ranks_per_process = launch.world_size / request.processes;
    spec::write_sbatch_script(launch, where.absoluteFilePath().toStdString());
  } catch (const std::exception& e) {
    show_error("Cannot write the cluster launch: " + QString::fromStdString(e.what()));
    return false;
  }
  status_->setStyleSheet(QString());
  status_->setText("Wrote " + where.absoluteFilePath() +
                   " (submit it with sbatch) and its run file " + run_file);
  return true;
}

}  // namespace pipetune::gui
