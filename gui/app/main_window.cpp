#include "gui/app/main_window.hpp"

#include <QFileDialog>
#include <QFileInfo>
#include <QMenuBar>
#include <QStatusBar>
#include <QTabWidget>

#include "gui/app/inspect_page.hpp"
#include "gui/app/setup_page.hpp"
#include "gui/app/train_page.hpp"
#include "gui/app/tune_page.hpp"

namespace pipetune::gui {

MainWindow::MainWindow(const QString& workspace, QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("pipetune");
  // The engine's default run, checked for training: Start on the Train tab works at once.
  form_.load_run_preset("tiny-train");
  form_.set_purpose(PlanPurpose::Train);
  tabs_ = new QTabWidget;
  setup_ = new SetupPage(&form_);
  train_ = new TrainPage(&form_, &runs_);
  tune_ = new TunePage(&tuner_, &form_);
  inspect_ = new InspectPage(&workspace_model_);
  tabs_->addTab(setup_, "Set up");
  tabs_->addTab(train_, "Train");
  tabs_->addTab(tune_, "Tune");
  tabs_->addTab(inspect_, "Inspect");
  setCentralWidget(tabs_);

  QMenu* file = menuBar()->addMenu("&File");
  file->addAction("&Open workspace...", this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, "Open a workspace", QString(),
                                                      "pipetune workspace (*.db);;All files (*)");
    if (!path.isEmpty()) set_workspace(path);
  });
  file->addAction("&Quit", this, &QWidget::close);

  connect(tune_, &TunePage::run_requested, this, [this](RunRequest request) {
    tabs_->setCurrentWidget(train_);
    train_->start_run(train_->with_launch_choices(request));
  });
  // What was just stored shows up in Inspect.
  connect(&runs_, &RunController::finished, this, [this] {
    if (QFileInfo::exists(workspace_)) workspace_model_.open(workspace_);
  });
  connect(&tuner_, &TuneController::finished, this,
          [this](bool, QString message) { statusBar()->showMessage(message, 10000); });
  set_workspace(workspace);
  resize(1400, 900);
}

MainWindow::~MainWindow() {
  // Workers end before the pages they report to.
  runs_.stop();
  tuner_.cancel();
}

void MainWindow::set_workspace(const QString& path) {
  workspace_ = path;
  runs_.set_workspace(path);
  tuner_.set_workspace(path);
  statusBar()->showMessage("workspace: " + path);
  // A workspace that does not exist yet is created by the first run; nothing to list before.
  if (QFileInfo::exists(path)) inspect_->open_workspace(path);
}

}  // namespace pipetune::gui
