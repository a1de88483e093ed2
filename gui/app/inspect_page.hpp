// Inspect: open a workspace (.db), browse its runs, open any run (simulated, measured,
// imported) in the timeline, and compare two runs (stacked, aligned, with the per-stage diff).
// An MoE training run also shows its expert load per step (the routing statistics it recorded).
// Every read goes through WorkspaceModel's workers or the timeline's own; errors (not a
// workspace, a run still being written) appear as a message in the page.
#pragma once

#include <QWidget>

#include "gui/core/workspace_model.hpp"

class QHBoxLayout;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSplitter;
class QTableView;

namespace pipetune::gui {

class ExpertLoadChart;
class TimelineWidget;

class InspectPage : public QWidget {
  Q_OBJECT
 public:
  explicit InspectPage(WorkspaceModel* workspace, QWidget* parent = nullptr);

  void open_workspace(const QString& path);
  // Opens the run of a row in the timeline; with a second row, stacks it for comparison.
  void open_row(int row);
  void compare_rows(int first, int second);

  QLabel* message_label() const { return message_; }
  QTableView* table() const { return table_; }
  TimelineWidget* timeline() const { return timeline_; }
  QPlainTextEdit* details() const { return details_; }
  // Shown under the details while the opened run has MoE routing statistics.
  ExpertLoadChart* expert_load_chart() const { return expert_load_; }

 private:
  QHBoxLayout* build_toolbar();
  QSplitter* build_panes();
  void connect_workspace();
  void connect_timeline();

  void show_message(const QString& text, bool error);
  void open_selected();
  void compare_selected();

  WorkspaceModel* workspace_;
  QLineEdit* path_ = nullptr;
  QTableView* table_ = nullptr;
  QLabel* message_ = nullptr;
  TimelineWidget* timeline_ = nullptr;
  QPlainTextEdit* details_ = nullptr;
  ExpertLoadChart* expert_load_ = nullptr;
  std::int64_t opened_id_ = -1;  // the run open in the timeline (its expert load is awaited)
  // A comparison loads both runs whole (the per-stage diff needs them in memory): the ids
  // awaited and what has arrived.
  std::int64_t compare_ids_[2] = {-1, -1};
  std::shared_ptr<const profiler::Trace> compare_traces_[2];
  QString compare_titles_[2];
  db::RunRecord compare_records_[2];
};

}  // namespace pipetune::gui
