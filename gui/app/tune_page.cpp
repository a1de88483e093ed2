#include "gui/app/tune_page.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>
#include <exception>

#include "gui/app/pareto_scatter.hpp"
#include "gui/core/plan_export.hpp"
#include "gui/core/plan_form_model.hpp"
#include "gui/timeline/timeline_widget.hpp"

namespace pipetune::gui {

namespace {

// The cluster box's first item: no preset, the target is hardware x GPUs.
constexpr const char* kNoCluster = "(hardware x GPUs)";

}  // namespace

TunePage::TunePage(TuneController* tuner, const PlanFormModel* form, QWidget* parent)
    : QWidget(parent), tuner_(tuner), form_(form) {
  auto* outer = new QVBoxLayout(this);
  outer->addLayout(build_target_row());
  outer->addLayout(build_progress_row());
  outer->addWidget(build_panes(), 1);
  connect_search();
  connect_selection();
  refresh_buttons();
}

// Model, hardware, GPUs, global batch, schedules and keep, then "From Set up", Search and Cancel.
QHBoxLayout* TunePage::build_target_row() {
  auto* target = new QHBoxLayout;
  model_ = new QComboBox;
  model_->addItems(PlanFormModel::model_presets());
  model_->setCurrentText("llama3-8b");
  hardware_ = new QComboBox;
  hardware_->addItems(PlanFormModel::hardware_presets());
  hardware_->setCurrentText("h100-sxm");
  gpus_ = new QLineEdit("8");
  gpus_->setObjectName("tune_gpus");
  gpus_->setMaximumWidth(70);
  cluster_ = new QComboBox;
  cluster_->setObjectName("tune_cluster");
  cluster_->addItem(kNoCluster);
  cluster_->addItems(PlanFormModel::cluster_presets());
  cluster_->setToolTip(
      "A cluster preset gives the hardware, GPUs and node groups (NICs that "
      "differ between groups)");
  // A cluster gives the hardware and GPUs: their fields are for hardware x GPUs only.
  connect(cluster_, &QComboBox::currentIndexChanged, this, [this](int index) {
    hardware_->setEnabled(index == 0);
    gpus_->setEnabled(index == 0);
  });
  global_batch_ = new QLineEdit("32");
  global_batch_->setObjectName("tune_global_batch");
  global_batch_->setMaximumWidth(70);
  schedules_ = new QLineEdit;
  schedules_->setPlaceholderText("all schedules (or e.g. 1f1b,zb-h1)");
  keep_ = new QLineEdit("100");
  keep_->setObjectName("tune_keep");
  keep_->setMaximumWidth(60);
  keep_->setToolTip(
      "Results ranked exactly; plans whose lower bound cannot reach them or the "
      "Pareto front are not simulated (0 = simulate every plan)");
  failure_rate_ = new QLineEdit;
  failure_rate_->setObjectName("tune_failure_rate");
  failure_rate_->setMaximumWidth(70);
  failure_rate_->setPlaceholderText("none");
  failure_rate_->setToolTip(
      "Unreliable peers: rank by expected throughput with devices failing at this rate per "
      "device-hour, each back after 600 s (pipetune tune --failure-rate)");
  reroute_ = new QCheckBox("Re-route");
  reroute_->setObjectName("tune_reroute");
  reroute_->setToolTip(
      "Each stage's data-parallel replicas take a failed or slow one's micro-batches (SWARM), "
      "for the failure rate and the cluster's faults (pipetune tune --reroute)");
  moe_imbalance_ = new QLineEdit;
  moe_imbalance_->setObjectName("tune_moe_imbalance");
  moe_imbalance_->setMaximumWidth(60);
  moe_imbalance_->setPlaceholderText("1");
  moe_imbalance_->setToolTip(
      "MoE routing: the busiest expert-parallel rank's tokens over the mean rank's (>= 1; "
      "pipetune report gives a training run's); its expert GEMMs and all-to-all cost that much "
      "more (pipetune tune --moe-imbalance)");
  embedding_rows_ = new QLineEdit;
  embedding_rows_->setObjectName("tune_embedding_rows");
  embedding_rows_->setMaximumWidth(60);
  embedding_rows_->setPlaceholderText("1");
  embedding_rows_->setToolTip(
      "Sparse embedding gradient: the input embedding rows a batch touches over what uniformly "
      "drawn tokens would touch (> 0; below 1 for text; pipetune tune --embedding-rows-from "
      "measures it from a training run); the exchanged rows cost that much");
  moe_chunks_ = new QCheckBox("A2A chunks");
  moe_chunks_->setObjectName("tune_moe_chunks");
  moe_chunks_->setChecked(true);
  moe_chunks_->setToolTip(
      "MoE plans with ep > 1 also try each layer's all-to-all in 2 and 4 chunks overlapped with "
      "the experts' GEMMs, which the Megatron-LM, torchtitan and DeepSpeed exports refuse "
      "(unchecked: pipetune tune --no-moe-chunks)");
  whole_experts_ = new QCheckBox("Whole experts");
  whole_experts_->setObjectName("tune_whole_experts");
  whole_experts_->setChecked(true);
  whole_experts_->setToolTip(
      "MoE plans with tp > 1 also try each EP rank's experts whole, divided among the TP ranks "
      "(PPMoE), which the Megatron-LM, torchtitan and DeepSpeed exports refuse (unchecked: "
      "pipetune tune --no-whole-experts)");
  dedup_experts_ = new QCheckBox("Dedup experts");
  dedup_experts_->setObjectName("tune_dedup_experts");
  dedup_experts_->setChecked(true);
  dedup_experts_->setToolTip(
      "MoE plans with tp > 1 and ep > 1 also try sharded experts deduplicated over TP (Parm): "
      "each TP rank sends its share of the slots through the all-to-all, gathered over TP around "
      "the experts' GEMMs (unchecked: pipetune tune --no-dedup-experts)");
  two_phase_a2a_ = new QCheckBox("2DH all-to-all");
  two_phase_a2a_->setObjectName("tune_two_phase_a2a");
  two_phase_a2a_->setChecked(true);
  two_phase_a2a_->setToolTip(
      "MoE plans whose EP group spans nodes also try Tutel's two-phase all-to-all: among a "
      "node's EP ranks, then across nodes, fewer and larger inter-node messages (unchecked: "
      "pipetune tune --no-two-phase-a2a)");
  sparse_embedding_ = new QCheckBox("Sparse embedding");
  sparse_embedding_->setObjectName("tune_sparse_embedding");
  sparse_embedding_->setChecked(true);
  sparse_embedding_->setToolTip(
      "Plans with dp > 1 also try EmbRace's sparse embedding gradient: the rows the tokens "
      "touched exchanged (under ZeRO sent to their owners) instead of the table reduced, which "
      "the Megatron-LM, torchtitan and DeepSpeed exports refuse (unchecked: pipetune tune "
      "--no-sparse-embedding)");
  for (auto [label, w] : {std::pair<const char*, QWidget*>{"Model", model_},
                          {"Cluster", cluster_},
                          {"Hardware", hardware_},
                          {"GPUs", gpus_},
                          {"Global batch", global_batch_},
                          {"Schedules", schedules_},
                          {"Keep", keep_},
                          {"Failures/dev-h", failure_rate_},
                          {"", reroute_},
                          {"MoE imbalance", moe_imbalance_},
                          {"", moe_chunks_},
                          {"", whole_experts_},
                          {"", dedup_experts_},
                          {"", two_phase_a2a_},
                          {"", sparse_embedding_},
                          {"Embedding rows", embedding_rows_}}) {
    target->addWidget(new QLabel(label));
    target->addWidget(w);
  }
  auto* from_form = new QPushButton("From Set up");
  from_form->setObjectName("tune_from_setup");
  from_form->setEnabled(form_ != nullptr);
  target->addWidget(from_form);
  connect(from_form, &QPushButton::clicked, this, [this] { take_target_from_form(); });
  start_ = new QPushButton("Search");
  start_->setObjectName("tune_start");
  cancel_ = new QPushButton("Cancel");
  cancel_->setObjectName("tune_cancel");
  target->addWidget(start_);
  target->addWidget(cancel_);
  return target;
}

QHBoxLayout* TunePage::build_progress_row() {
  auto* progress_row = new QHBoxLayout;
  progress_ = new QProgressBar;
  progress_->setRange(0, 1);
  progress_->setValue(0);
  progress_->setFormat("%v / %m plans");
  status_ = new QLabel("Search the plans of a model on a cluster at a global batch.");
  status_->setObjectName("tune_status");
  status_->setWordWrap(true);
  progress_row->addWidget(progress_, 1);
  progress_row->addWidget(status_, 2);
  return progress_row;
}

// The results pane and the scatter side by side above the selected plan's timeline.
QSplitter* TunePage::build_panes() {
  auto* vertical = new QSplitter(Qt::Vertical);
  auto* upper = new QSplitter(Qt::Horizontal);
  upper->addWidget(build_results_pane());
  upper->addWidget(build_scatter_pane());
  upper->setStretchFactor(0, 3);
  upper->setStretchFactor(1, 2);
  vertical->addWidget(upper);
  timeline_ = new TimelineWidget;
  vertical->addWidget(timeline_);
  vertical->setStretchFactor(0, 3);
  vertical->setStretchFactor(1, 2);
  return vertical;
}

// The results table with the export format, Export and "Run at small scale" under it.
QWidget* TunePage::build_results_pane() {
  auto* left = new QWidget;
  auto* left_layout = new QVBoxLayout(left);
  left_layout->setContentsMargins(0, 0, 0, 0);
  table_ = new QTableView;
  table_->setModel(tuner_->results());
  table_->setSortingEnabled(true);
  table_->sortByColumn(ResultsTableModel::TokensPerS, Qt::DescendingOrder);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->horizontalHeader()->setSectionResizeMode(ResultsTableModel::Plan, QHeaderView::Stretch);
  table_->verticalHeader()->setDefaultSectionSize(22);
  left_layout->addWidget(table_, 1);
  auto* actions = new QHBoxLayout;
  format_ = new QComboBox;
  for (const auto& n : tuner::export_format_names()) format_->addItem(QString::fromStdString(n));
  export_ = new QPushButton("Export...");
  export_->setObjectName("tune_export");
  small_ = new QPushButton("Run at small scale");
  small_->setObjectName("tune_small_scale");
  explain_ = new QPushButton("Why the best?");
  explain_->setObjectName("tune_explain");
  explain_->setToolTip(
      "Why the best plan beat the selected one (the runner-up when the best is "
      "selected): where the time goes, which stage binds, which link");
  actions->addWidget(new QLabel("Format:"));
  actions->addWidget(format_);
  actions->addWidget(export_);
  actions->addWidget(small_);
  actions->addWidget(explain_);
  actions->addStretch();
  left_layout->addLayout(actions);
  return left;
}

// The scatter with the "why pruned" counts under it.
QWidget* TunePage::build_scatter_pane() {
  auto* right = new QWidget;
  auto* right_layout = new QVBoxLayout(right);
  right_layout->setContentsMargins(0, 0, 0, 0);
  scatter_ = new ParetoScatter;
  right_layout->addWidget(scatter_, 3);
  right_layout->addWidget(new QLabel("Why plans were pruned:"));
  pruned_ = new QListWidget;
  pruned_->setObjectName("tune_pruned");
  right_layout->addWidget(pruned_, 1);
  explanation_ = new QPlainTextEdit;
  explanation_->setObjectName("tune_explanation");
  explanation_->setReadOnly(true);
  explanation_->setPlaceholderText("Why the best? explains the selected plan here");
  right_layout->addWidget(explanation_, 2);
  return right;
}

// Search, Cancel and the tuner's reports: progress, the end of a search, a failure.
void TunePage::connect_search() {
  connect(start_, &QPushButton::clicked, this, &TunePage::start_search);
  connect(cancel_, &QPushButton::clicked, this, [this] {
    tuner_->cancel();
    status_->setText("Cancelling...");
  });
  connect(tuner_, &TuneController::progress, this, [this](qint64 done, qint64 total) {
    // QProgressBar counts in int: scale big searches down.
    const double scale = total > 1000000 ? 1000000.0 / static_cast<double>(total) : 1.0;
    progress_->setRange(0, static_cast<int>(static_cast<double>(total) * scale));
    progress_->setValue(static_cast<int>(static_cast<double>(done) * scale));
    progress_->setFormat(QString("%1 / %2 plans").arg(done).arg(total));
  });
  connect(tuner_, &TuneController::finished, this, [this](bool, QString message) {
    status_->setStyleSheet(QString());
    status_->setText(message);
    scatter_->set_points(tuner_->results()->points(), tuner_->results()->pareto_points());
    pruned_->clear();
    pruned_->addItems(tuner_->results()->pruned_lines());
    table_->sortByColumn(table_->horizontalHeader()->sortIndicatorSection(),
                         table_->horizontalHeader()->sortIndicatorOrder());
    if (tuner_->results()->rowCount() > 0) select_row(0);
    refresh_buttons();
  });
  connect(tuner_, &TuneController::failed, this, [this](QString message) {
    show_error(message);
    refresh_buttons();
  });
}

// A row chosen in the table or on the scatter, its preview, Export and "Run at small scale".
void TunePage::connect_selection() {
  connect(table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& current) {
            if (!current.isValid()) return;
            scatter_->set_selected(tuner_->results()->result_index(current.row()));
            tuner_->preview(current.row());
            refresh_buttons();
          });
  connect(scatter_, &ParetoScatter::point_clicked, this,
          [this](int index) { select_row(tuner_->results()->row_of(index)); });
  connect(tuner_, &TuneController::preview_ready, this,
          [this](int, std::shared_ptr<const profiler::Trace> trace, QString title) {
            timeline_->set_trace(std::move(trace), title);
          });
  connect(tuner_, &TuneController::preview_failed, this,
          [this](int, QString message) { show_error("Cannot simulate this plan: " + message); });
  connect(export_, &QPushButton::clicked, this, &TunePage::export_selected);
  connect(small_, &QPushButton::clicked, this, &TunePage::run_small_scale);
  connect(explain_, &QPushButton::clicked, this, &TunePage::explain_selected);
}

void TunePage::refresh_buttons() {
  start_->setEnabled(!tuner_->running());
  cancel_->setEnabled(tuner_->running());
  const bool selected = !tuner_->running() && selected_row() >= 0;
  export_->setEnabled(selected);
  small_->setEnabled(selected);
  explain_->setEnabled(selected && tuner_->results()->rowCount() > 1);
}

void TunePage::explain_selected() {
  try {
    explanation_->setPlainText(tuner_->explanation_text(selected_row()));
  } catch (const std::exception& e) {  // the plan no longer evaluates (a changed preset)
    show_error(QString("Cannot explain this plan: ") + e.what());
  }
}

void TunePage::show_error(const QString& text) {
  status_->setStyleSheet("color: #c0392b;");
  status_->setText(text);
}

void TunePage::set_target(const QString& model, const QString& hardware, int gpus,
                          std::int64_t global_batch, const QString& schedules, std::int64_t keep) {
  model_->setCurrentText(model);
  hardware_->setCurrentText(hardware);
  gpus_->setText(QString::number(gpus));
  global_batch_->setText(QString::number(global_batch));
  schedules_->setText(schedules);
  keep_->setText(QString::number(keep));
}

bool TunePage::take_target_from_form() {
  if (form_ == nullptr) return false;
  const auto& s = form_->selection();
  if (!s) {
    show_error("The Set up plan is not valid: " + form_->message());
    return false;
  }
  set_target(QString::fromStdString(s->model_preset), QString::fromStdString(s->hardware_preset),
             s->gpus, s->global_batch, schedules_->text(), keep_->text().toLongLong());
  set_cluster(QString::fromStdString(s->cluster_preset));
  status_->setStyleSheet(QString());
  status_->setText("Target from Set up: " + model_->currentText() + " on " +
                   QString::number(s->gpus) + " x " + hardware_->currentText() + ", global batch " +
                   QString::number(s->global_batch));
  return true;
}

void TunePage::set_cluster(const QString& preset) {
  cluster_->setCurrentIndex(preset.isEmpty() ? 0 : std::max(0, cluster_->findText(preset)));
}

bool TunePage::start_search() {
  TuneRequest r;
  r.model_preset = model_->currentText().toStdString();
  const bool cluster = cluster_->currentIndex() > 0;
  if (cluster) r.cluster_preset = cluster_->currentText().toStdString();
  if (!cluster) r.hardware_preset = hardware_->currentText().toStdString();
  bool ok_gpus = false, ok_batch = false, ok_keep = false;
  r.keep = keep_->text().trimmed().toLongLong(&ok_keep);
  if (!ok_keep) {
    show_error("keep must be a whole number (got '" + keep_->text() + "')");
    return false;
  }
  r.gpus = cluster ? 0 : gpus_->text().trimmed().toInt(&ok_gpus);
  r.global_batch = global_batch_->text().trimmed().toLongLong(&ok_batch);
  if (!cluster && !ok_gpus) {
    show_error("GPUs must be a whole number (got '" + gpus_->text() + "')");
    return false;
  }
  if (!ok_batch) {
    show_error("global batch must be a whole number (got '" + global_batch_->text() + "')");
    return false;
  }
  for (const QString& s : schedules_->text().split(',', Qt::SkipEmptyParts))
    r.schedules.push_back(s.trimmed().toStdString());
  if (!failure_rate_->text().trimmed().isEmpty()) {
    bool ok_rate = false;
    r.failures.rate_per_device_hour = failure_rate_->text().trimmed().toDouble(&ok_rate);
    if (!ok_rate) {
      show_error("the failure rate must be a number of failures per device-hour (got '" +
                 failure_rate_->text() + "')");
      return false;
    }
  }
  r.failures.reroute = reroute_->isChecked();
  r.moe_chunks = moe_chunks_->isChecked();
  r.whole_experts = whole_experts_->isChecked();
  r.dedup_experts = dedup_experts_->isChecked();
  r.two_phase_all_to_all = two_phase_a2a_->isChecked();
  r.sparse_embedding = sparse_embedding_->isChecked();
  if (!moe_imbalance_->text().trimmed().isEmpty()) {
    bool ok_imbalance = false;
    r.moe_imbalance = moe_imbalance_->text().trimmed().toDouble(&ok_imbalance);
    if (!ok_imbalance) {
      show_error("the MoE imbalance must be a number >= 1 (got '" + moe_imbalance_->text() + "')");
      return false;
    }
  }
  if (!embedding_rows_->text().trimmed().isEmpty()) {
    bool ok_rows = false;
    r.embedding_rows = embedding_rows_->text().trimmed().toDouble(&ok_rows);
    if (!ok_rows) {
      show_error("the embedding rows must be a number above 0 (got '" + embedding_rows_->text() +
                 "')");
      return false;
    }
  }
  timeline_->clear();
  scatter_->set_points({}, {});
  pruned_->clear();
  if (!tuner_->start(r)) {
    show_error(tuner_->error_message());
    return false;
  }
  status_->setStyleSheet(QString());
  status_->setText("Searching...");
  progress_->setRange(0, 0);  // busy until the first report
  refresh_buttons();
  return true;
}

int TunePage::selected_row() const {
  const QModelIndex i = table_->selectionModel()->currentIndex();
  return i.isValid() ? i.row() : -1;
}

void TunePage::select_row(int row) {
  if (row < 0 || row >= tuner_->results()->rowCount()) return;
  table_->selectionModel()->setCurrentIndex(
      tuner_->results()->index(row, 0),
      QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  table_->scrollTo(tuner_->results()->index(row, 0));
}

void TunePage::export_selected() {
  const int row = selected_row();
  if (row < 0) return;
  const tuner::ExportFormat format =
      tuner::parse_export_format(format_->currentText().toStdString());
  const QString suffix = export_suffix(format);
  // The dialog asks before replacing an existing file; only then is it overwritten.
  QFileDialog dialog(this, "Export the plan", QString(),
                     QString("%1 (*.%2);;All files (*)").arg(format_->currentText(), suffix));
  dialog.setAcceptMode(QFileDialog::AcceptSave);
  dialog.setDefaultSuffix(suffix);
  if (dialog.exec() != QDialog::Accepted || dialog.selectedFiles().isEmpty()) return;
  const QString path = dialog.selectedFiles().front();
  try {
    const ExportWrite w = write_export(format, tuner_->export_request(row), path, true);
    if (w == ExportWrite::Written) {
      status_->setStyleSheet(QString());
      status_->setText("Exported to " + path);
    }
  } catch (const std::exception& e) {
    show_error("Export failed: " + QString::fromStdString(e.what()));
  }
}

void TunePage::run_small_scale() {
  const int row = selected_row();
  if (row < 0) return;
  try {
    emit run_requested(tuner_->small_scale_request(row));
  } catch (const std::exception& e) {
    show_error("Cannot run at small scale: " + QString::fromStdString(e.what()));
  }
}

}  // namespace pipetune::gui
