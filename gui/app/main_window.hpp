// The pipetune-gui main window: Set up, Train, Tune and Inspect tabs over one workspace (.db).
// It owns the core models and controllers and wires the pages together (a tuned plan run at
// small scale goes to Train; finished runs and searches refresh Inspect).
#pragma once

#include <QMainWindow>

#include "gui/core/plan_form_model.hpp"
#include "gui/core/run_controller.hpp"
#include "gui/core/tune_controller.hpp"
#include "gui/core/workspace_model.hpp"

class QTabWidget;

namespace pipetune::gui {

class SetupPage;
class TrainPage;
class TunePage;
class InspectPage;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  // workspace: where runs and searches are stored and what Inspect opens (created when missing
  // by the first run or search).
  explicit MainWindow(const QString& workspace, QWidget* parent = nullptr);
  ~MainWindow() override;

  void set_workspace(const QString& path);
  QString workspace() const { return workspace_; }

  PlanFormModel* form() { return &form_; }
  RunController* runs() { return &runs_; }
  TuneController* tuner() { return &tuner_; }
  WorkspaceModel* workspace_model() { return &workspace_model_; }
  QTabWidget* tabs() const { return tabs_; }
  SetupPage* setup_page() const { return setup_; }
  TrainPage* train_page() const { return train_; }
  TunePage* tune_page() const { return tune_; }
  InspectPage* inspect_page() const { return inspect_; }

 private:
  QString workspace_;
  PlanFormModel form_;
  RunController runs_;
  TuneController tuner_;
  WorkspaceModel workspace_model_;
  QTabWidget* tabs_ = nullptr;
  SetupPage* setup_ = nullptr;
  TrainPage* train_ = nullptr;
  TunePage* tune_ = nullptr;
  InspectPage* inspect_ = nullptr;
};

}  // namespace pipetune::gui
