#include "gui/app/inspect_page.hpp"

#include <QFileDialog>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

#include "db/store/run_layout.hpp"
#include "db/store/run_match.hpp"
#include "gui/app/expert_load_chart.hpp"
#include "gui/core/expert_load_series.hpp"
#include "gui/timeline/timeline_widget.hpp"

namespace pipetune::gui {

InspectPage::InspectPage(WorkspaceModel* workspace, QWidget* parent)
    : QWidget(parent), workspace_(workspace) {
  auto* outer = new QVBoxLayout(this);
  outer->addLayout(build_toolbar());
  message_ = new QLabel("Open a workspace to list its runs.");
  message_->setObjectName("inspect_message");
  message_->setWordWrap(true);
  outer->addWidget(message_);
  outer->addWidget(build_panes(), 1);
  connect_workspace();
  connect_timeline();
}

// The workspace path, Open workspace..., Reload, "Open in timeline" and "Compare two runs",
// connected here since only this bar holds them.
QHBoxLayout* InspectPage::build_toolbar() {
  auto* bar = new QHBoxLayout;
  path_ = new QLineEdit;
  path_->setObjectName("inspect_path");
  path_->setPlaceholderText("workspace .db");
  auto* browse = new QPushButton("Open workspace...");
  auto* reload = new QPushButton("Reload");
  auto* open = new QPushButton("Open in timeline");
  open->setObjectName("inspect_open_run");
  auto* compare = new QPushButton("Compare two runs");
  compare->setObjectName("inspect_compare");
  bar->addWidget(path_, 1);
  bar->addWidget(browse);
  bar->addWidget(reload);
  bar->addWidget(open);
  bar->addWidget(compare);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, "Open a workspace", QString(),
                                                      "pipetune workspace (*.db);;All files (*)");
    if (!path.isEmpty()) open_workspace(path);
  });
  connect(path_, &QLineEdit::returnPressed, this, [this] { open_workspace(path_->text()); });
  connect(reload, &QPushButton::clicked, this, [this] { open_workspace(path_->text()); });
  connect(open, &QPushButton::clicked, this, &InspectPage::open_selected);
  connect(compare, &QPushButton::clicked, this, &InspectPage::compare_selected);
  return bar;
}

// The runs table and the details text side by side above the timeline.
QSplitter* InspectPage::build_panes() {
  auto* split = new QSplitter(Qt::Vertical);
  auto* upper = new QSplitter(Qt::Horizontal);
  table_ = new QTableView;
  table_->setModel(workspace_);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  table_->horizontalHeader()->setSectionResizeMode(WorkspaceModel::Name, QHeaderView::Stretch);
  table_->verticalHeader()->setVisible(false);
  details_ = new QPlainTextEdit;
  details_->setReadOnly(true);
  details_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));  // tables align
  details_->setPlaceholderText(
      "Click a block or select a range for details; compare two runs "
      "for the per-stage diff.");
  auto* right = new QSplitter(Qt::Vertical);
  right->addWidget(details_);
  expert_load_ = new ExpertLoadChart;
  expert_load_->hide();
  right->addWidget(expert_load_);
  upper->addWidget(table_);
  upper->addWidget(right);
  upper->setStretchFactor(0, 3);
  upper->setStretchFactor(1, 2);
  split->addWidget(upper);
  timeline_ = new TimelineWidget;
  split->addWidget(timeline_);
  split->setStretchFactor(1, 3);
  return split;
}

// Opening a run by double click, and the workspace's reports: opened, runs loaded, failures.
// A loaded run completes a comparison once both of its runs have arrived.
void InspectPage::connect_workspace() {
  connect(table_, &QTableView::doubleClicked, this,
          [this](const QModelIndex& i) { open_row(i.row()); });
  connect(workspace_, &WorkspaceModel::opened, this, [this](QString path, int runs) {
    show_message(QString("%1: %2 runs").arg(path).arg(runs), false);
  });
  connect(workspace_, &WorkspaceModel::open_failed, this,
          [this](QString, QString message) { show_message(message, true); });
  connect(
      workspace_, &WorkspaceModel::run_loaded, this,
      [this](qint64 id, std::shared_ptr<const profiler::Trace> trace, QString title, QString note) {
        for (int k = 0; k < 2; ++k) {
          if (compare_ids_[k] != id || compare_traces_[k]) continue;
          compare_traces_[k] = std::move(trace);
          compare_titles_[k] = title;
          if (!note.isEmpty()) show_message(note, false);
          break;
        }
        if (!compare_traces_[0] || !compare_traces_[1]) return;
        timeline_->set_trace(compare_traces_[0], compare_titles_[0]);
        // Plan-less imports compare idle time, as the CLI's diff does.
        const bool pipelines = db::run_layout(compare_records_[0], *compare_traces_[0]).pipeline &&
                               db::run_layout(compare_records_[1], *compare_traces_[1]).pipeline;
        timeline_->set_comparison(compare_traces_[1], compare_titles_[1], pipelines);
        details_->setPlainText(timeline_->comparison_text());
        show_message("Comparing " + compare_titles_[0] + " with " + compare_titles_[1], false);
        compare_ids_[0] = compare_ids_[1] = -1;
        compare_traces_[0].reset();
        compare_traces_[1].reset();
      });
  connect(workspace_, &WorkspaceModel::load_failed, this,
          [this](qint64, QString message) { show_message(message, true); });
  connect(workspace_, &WorkspaceModel::expert_load_loaded, this,
          [this](qint64 id, std::shared_ptr<const profiler::analysis::ExpertLoad> load,
                 QString message) {
            if (id != opened_id_) return;  // another run was opened since
            if (!message.isEmpty()) show_message("Expert load: " + message, true);
            ExpertLoadSeries series = expert_load_series(*load);
            expert_load_->setVisible(!series.empty());
            expert_load_->set_series(std::move(series));
          });
}

// The timeline's errors as messages; a clicked block or selected range in the details.
void InspectPage::connect_timeline() {
  connect(timeline_, &TimelineWidget::error_message, this,
          [this](QString message) { show_message(message, true); });
  connect(timeline_, &TimelineWidget::span_selected, details_, &QPlainTextEdit::setPlainText);
  connect(timeline_, &TimelineWidget::range_selected, details_, &QPlainTextEdit::setPlainText);
}

void InspectPage::show_message(const QString& text, bool error) {
  message_->setStyleSheet(error ? "color: #c0392b;" : QString());
  message_->setText(text);
}

void InspectPage::open_workspace(const QString& path) {
  path_->setText(path);
  if (path.trimmed().isEmpty()) {
    show_message("Give the path of a workspace (.db).", true);
    return;
  }
  show_message("Opening " + path + "...", false);
  timeline_->clear();
  workspace_->open(path.trimmed());
}

void InspectPage::open_row(int row) {
  if (row < 0 || row >= workspace_->rowCount()) return;
  const db::RunRecord& run = workspace_->run_at(row);
  timeline_->open_run(workspace_->path(), run.id);
  // Only training runs record routing statistics.
  opened_id_ = run.id;
  expert_load_->hide();
  if (run.kind == profiler::TraceKind::Measured) workspace_->load_expert_load(run.id);
  const QString note = running_run_note(run);
  show_message(note.isEmpty() ? "Showing " + run_title(run) : note, false);
}

void InspectPage::compare_rows(int first, int second) {
  if (first < 0 || second < 0 || first >= workspace_->rowCount() ||
      second >= workspace_->rowCount())
    return;
  // The CLI's diff refuses the same (db/store/run_match.hpp).
  if (const std::string unlike =
          db::unlike_time_units(workspace_->run_at(first), workspace_->run_at(second));
      !unlike.empty()) {
    show_message(QString::fromStdString(unlike), true);
    return;
  }
  const int rows[2] = {first, second};
  for (int k = 0; k < 2; ++k) {
    compare_records_[k] = workspace_->run_at(rows[k]);
    compare_ids_[k] = compare_records_[k].id;
    compare_traces_[k].reset();
  }
  show_message("Loading both runs...", false);
  for (int k = 0; k < 2; ++k) workspace_->load_run(compare_ids_[k]);
}

void InspectPage::open_selected() {
  const QModelIndexList rows = table_->selectionModel()->selectedRows();
  if (rows.isEmpty()) {
    show_message("Select a run first.", true);
    return;
  }
  open_row(rows.front().row());
}

void InspectPage::compare_selected() {
  QModelIndexList rows = table_->selectionModel()->selectedRows();
  if (rows.size() != 2) {
    show_message("Select exactly two runs to compare (Ctrl+click).", true);
    return;
  }
  std::sort(rows.begin(), rows.end(),
            [](const QModelIndex& a, const QModelIndex& b) { return a.row() < b.row(); });
  compare_rows(rows[0].row(), rows[1].row());
}

}  // namespace pipetune::gui
