#include "gui/app/setup_page.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QVBoxLayout>

#include "engine/spec/presets.hpp"

namespace pipetune::gui {

namespace {

QComboBox* combo(const QStringList& items, bool with_empty = false) {
  auto* c = new QComboBox;
  if (with_empty) c->addItem("");
  c->addItems(items);
  return c;
}

}  // namespace

SetupPage::SetupPage(PlanFormModel* form, QWidget* parent) : QWidget(parent), form_(form) {
  auto* outer = new QVBoxLayout(this);
  auto* top = new QHBoxLayout;
  run_presets_ = new QComboBox;
  for (const auto& n : spec::list_presets(spec::PresetKind::Runs))
    run_presets_->addItem(QString::fromStdString(n));
  auto* load = new QPushButton("Load run preset");
  purpose_ = new QComboBox;
  purpose_->addItems({"check for a prediction on the cluster", "check for a training run"});
  top->addWidget(new QLabel("Run preset:"));
  top->addWidget(run_presets_);
  top->addWidget(load);
  top->addSpacing(24);
  top->addWidget(new QLabel("Validate:"));
  top->addWidget(purpose_);
  top->addStretch();
  outer->addLayout(top);

  auto* columns = new QHBoxLayout;
  auto* left = new QFormLayout;
  auto* right = new QFormLayout;
  add_row(left, PlanField::Model, "Model", combo(PlanFormModel::model_presets(), true));
  add_row(left, PlanField::Cluster, "Cluster", combo(PlanFormModel::cluster_presets(), true));
  add_row(left, PlanField::Hardware, "Hardware", combo(PlanFormModel::hardware_presets(), true));
  add_row(left, PlanField::Gpus, "GPUs", new QLineEdit);
  add_row(left, PlanField::Tp, "Tensor parallel (tp)", new QLineEdit);
  add_row(left, PlanField::Pp, "Pipeline stages (pp)", new QLineEdit);
  add_row(left, PlanField::Dp, "Data parallel (dp)", new QLineEdit);
  add_row(left, PlanField::Ep, "Expert parallel (ep)", new QLineEdit);
  add_row(left, PlanField::StageTp, "Tensor parallel per stage (empty: all tp)", new QLineEdit);
  add_row(right, PlanField::Schedule, "Schedule", combo(PlanFormModel::schedule_names()));
  add_row(right, PlanField::Vocab, "Vocabulary", combo(PlanFormModel::vocab_names()));
  add_row(right, PlanField::MicroBatchSize, "Micro-batch size", new QLineEdit);
  add_row(right, PlanField::Microbatches, "Micro-batches (empty: pp)", new QLineEdit);
  add_row(right, PlanField::Chunks, "Chunks per stage", new QLineEdit);
  add_row(right, PlanField::GlobalBatch, "Global batch (empty: derived)", new QLineEdit);
  add_row(right, PlanField::Recompute, "Recomputation", combo(PlanFormModel::recompute_names()));
  add_row(right, PlanField::StageRecompute, "Recomputation per stage (empty: all alike)",
          new QLineEdit);
  add_row(right, PlanField::ZeroStage, "ZeRO stage", combo({"0", "1", "2", "3"}));
  add_row(right, PlanField::SequenceParallel, "Sequence parallel", new QCheckBox);
  add_row(right, PlanField::OffloadActivations, "Offload activations to host", new QCheckBox);
  add_row(right, PlanField::OffloadOptimizer, "Offload optimizer to host", new QCheckBox);
  add_row(right, PlanField::LayeredReduction, "Reduce gradients per layer group", new QCheckBox);
  add_row(right, PlanField::SparseEmbeddingGradient,
          "Sparse embedding gradient (touched rows only)", new QCheckBox);
  add_row(right, PlanField::Modular, "Modular placement (one layer per group)", new QCheckBox);
  add_row(right, PlanField::Slices, "Token slices (terapipe; empty: 4)", new QLineEdit);
  add_row(right, PlanField::MoeChunks, "MoE all-to-all chunks (empty: 1)", new QLineEdit);
  add_row(right, PlanField::MoeA2aNodeRanks, "MoE 2DH all-to-all: EP ranks a node (empty: flat)",
          new QLineEdit);
  add_row(right, PlanField::ExpertLayout,
          "MoE experts in TP: sharded, whole, dedup, adaptive (empty: sharded)", new QLineEdit);
  add_row(right, PlanField::SkipRatio, "Skip ratio (skippipe, skippipe-ca; empty: 1/3)",
          new QLineEdit);
  add_row(right, PlanField::RankOrder, "Rank order", combo(PlanFormModel::rank_order_names()));
  add_row(right, PlanField::NodeGroupOrder, "Node group order (empty: as listed)", new QLineEdit);
  columns->addLayout(left);
  columns->addSpacing(24);
  columns->addLayout(right);
  outer->addLayout(columns);
  message_ = new QLabel;
  message_->setWordWrap(true);
  message_->setObjectName("plan_message");
  outer->addWidget(message_);
  outer->addStretch();

  connect(load, &QPushButton::clicked, this,
          [this] { form_->load_run_preset(run_presets_->currentText()); });
  connect(purpose_, &QComboBox::currentIndexChanged, this, [this](int i) {
    if (!syncing_) form_->set_purpose(i == 1 ? PlanPurpose::Train : PlanPurpose::Simulate);
  });
  connect(form_, &PlanFormModel::validated, this, &SetupPage::sync_from_model);
  sync_from_model();
}

void SetupPage::add_row(QFormLayout* layout, PlanField field, const QString& label,
                        QWidget* editor) {
  const auto i = static_cast<std::size_t>(field);
  editors_[i] = editor;
  auto* error = new QLabel;
  error->setStyleSheet("color: #c0392b;");
  error->setWordWrap(true);
  error->setVisible(false);
  errors_[i] = error;
  auto* cell = new QWidget;
  auto* v = new QVBoxLayout(cell);
  v->setContentsMargins(0, 0, 0, 0);
  v->setSpacing(1);
  v->addWidget(editor);
  v->addWidget(error);
  layout->addRow(label, cell);
  if (auto* line = qobject_cast<QLineEdit*>(editor)) {
    line->setObjectName(plan_field_key(field));
    connect(line, &QLineEdit::textEdited, this,
            [this, field](const QString& text) { form_->set_value(field, text); });
  } else if (auto* box = qobject_cast<QComboBox*>(editor)) {
    box->setObjectName(plan_field_key(field));
    connect(box, &QComboBox::currentTextChanged, this, [this, field](const QString& text) {
      if (!syncing_) form_->set_value(field, text);
    });
  } else if (auto* check = qobject_cast<QCheckBox*>(editor)) {
    check->setObjectName(plan_field_key(field));
    connect(check, &QCheckBox::toggled, this, [this, field](bool on) {
      if (!syncing_) form_->set_value(field, on ? "true" : "false");
    });
  }
}

void SetupPage::sync_from_model() {
  syncing_ = true;
  for (int f = 0; f < kPlanFieldCount; ++f) {
    const auto field = static_cast<PlanField>(f);
    const auto i = static_cast<std::size_t>(f);
    const QString value = form_->value(field);
    if (auto* line = qobject_cast<QLineEdit*>(editors_[i])) {
      if (line->text() != value) line->setText(value);
    } else if (auto* box = qobject_cast<QComboBox*>(editors_[i])) {
      if (box->currentText() != value) {
        const int at = box->findText(value);
        if (at >= 0) box->setCurrentIndex(at);
      }
    } else if (auto* check = qobject_cast<QCheckBox*>(editors_[i])) {
      check->setChecked(value == "true");
    }
    const QString error = form_->field_error(field);
    errors_[i]->setText(error);
    errors_[i]->setVisible(!error.isEmpty());
    editors_[i]->setStyleSheet(error.isEmpty() ? QString() : "border: 1px solid #c0392b;");
  }
  purpose_->setCurrentIndex(form_->purpose() == PlanPurpose::Train ? 1 : 0);
  if (form_->valid()) {
    message_->setStyleSheet("color: #1e8449;");
    message_->setText("The plan is valid.");
  } else {
    message_->setStyleSheet("color: #c0392b;");
    message_->setText("Broken rule: " + form_->message());
  }
  syncing_ = false;
}

}  // namespace pipetune::gui
