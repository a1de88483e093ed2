// PlanFormModel: the Set up form's state. Model, cluster and hardware presets (spec::list_presets)
// and the plan's fields as the user types them; every change is validated at once with the
// libraries' own rules (spec::validate, the schedule generators, runtime::check_train_options
// for training), and the first broken rule is shown next to the fields the error is about
// (InputError::fields()), or as one message when it is about none of them. No rule is
// re-implemented here: the form only parses its text.
#pragma once

#include <QObject>
#include <QString>
#include <QStringList>
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::gui {

enum class PlanField {
  Model,
  Cluster,  // a cluster preset, or "" for hardware x GPUs
  Hardware,
  Gpus,
  Tp,
  Pp,
  Dp,
  Ep,
  Schedule,
  Vocab,
  MicroBatchSize,
  Microbatches,  // "" = the plan's default (pp)
  Chunks,
  Recompute,
  StageRecompute,  // "full,selective,none,...": one mode per pipeline stage; "" = Recompute
  ZeroStage,
  SequenceParallel,    // "true" / "false"
  OffloadActivations,  // "true" / "false": each F's activations in host memory until its B
  OffloadOptimizer,    // "true" / "false": AdamW's moments and update on the host
  GlobalBatch,         // "" = micro-batch size x micro-batches x dp
  RankOrder,           // "tp-dp-pp" / "tp-pp-dp"
  NodeGroupOrder,      // node group indices, "1, 0"; "" = as the cluster lists them
  // Per-stage layouts: one TP degree per pipeline stage, "4, 2, 2"; "" = every stage uses Tp.
  // dp is shared, so stage s holds stage_tp[s] * dp GPUs; Tp may be left empty (the first entry).
  StageTp,
  Slices,            // terapipe's token slices per micro-batch; "" = the schedule's default
  SkipRatio,         // skippipe(-ca)'s share of stages a micro-batch skips; "" = its default
  LayeredReduction,  // "true" / "false": each layer group's DP reduction as its backward ends
  Modular,           // "true" / "false": one layer per group (chunks = layers / pp; --modular)
  MoeChunks,         // MoE all-to-all chunks overlapped with the experts' GEMMs; "" = 1
  MoeA2aNodeRanks,   // Tutel's two-phase all-to-all: EP ranks per node; "" = flat
  // MoE experts inside the TP group: "sharded", "whole" (PPMoE), or one per MoE layer
  // ("whole,sharded,..."); "" = sharded.
  ExpertLayout,
  SparseEmbeddingGradient,  // "true" / "false": EmbRace, the embedding gradient's touched rows
};
inline constexpr int kPlanFieldCount = 31;

// The field's key as a run file's [plan] spells it ("tp", "micro_batch_size"...): a library
// error about the plan field "plan.<key>" (engine/errors.hpp) is shown at this field.
QString plan_field_key(PlanField field);

// What the form is checked for: a prediction/simulation on the chosen cluster (tp*pp*dp must
// equal its devices), or a training run of the embedded engine (rank threads; cluster unused).
enum class PlanPurpose { Simulate, Train };

// A plan the form accepted, with the specs it was checked against.
struct PlanSelection {
  std::string model_preset;
  std::string cluster_preset;  // "" for hardware x GPUs
  std::string hardware_preset;
  int gpus = 0;
  spec::ModelSpec model;
  spec::ClusterSpec cluster;
  spec::ParallelPlan plan;  // apply_defaults'ed
  std::int64_t global_batch = 0;
};

class PlanFormModel : public QObject {
  Q_OBJECT
 public:
  explicit PlanFormModel(QObject* parent = nullptr);

  // Preset names for the combo boxes (sorted file stems).
  static QStringList model_presets();
  static QStringList hardware_presets();
  static QStringList cluster_presets();
  static QStringList schedule_names();
  static QStringList vocab_names();
  static QStringList recompute_names();
  static QStringList rank_order_names();

  QString value(PlanField field) const;
  // Sets one field and validates the form. Choosing a cluster preset fills hardware and GPUs
  // from it; editing hardware or GPUs by hand leaves the preset (cluster becomes "").
  void set_value(PlanField field, const QString& text);
  // Loads a run preset's model, cluster and plan (presets/runs/<name>.toml) into the form.
  void load_run_preset(const QString& name);
  void set_purpose(PlanPurpose purpose);
  PlanPurpose purpose() const { return purpose_; }

  bool valid() const { return message_.isEmpty(); }
  // The broken rule, one line ("tp=3 does not divide heads=4"); empty when valid.
  QString message() const { return message_; }
  // The broken rule when it names this field, else empty.
  QString field_error(PlanField field) const;
  // The checked plan; empty while the form is invalid.
  const std::optional<PlanSelection>& selection() const { return selection_; }

 signals:
  // After every change (valid or not): widgets refresh their inline errors.
  void validated();

 private:
  void validate();
  QString text(PlanField field) const;  // the field's text, trimmed
  // validate's steps, in order; each throws at the first broken rule.
  void select_model(PlanSelection& s);
  void select_cluster(PlanSelection& s);
  void read_plan(spec::ParallelPlan& p) const;
  void check_plan(PlanSelection& s) const;
  const spec::ModelSpec& model_spec(const std::string& name);
  const spec::ClusterSpec& cluster_spec(const std::string& name);
  const spec::HardwareSpec& hardware_spec(const std::string& name);

  std::array<QString, kPlanFieldCount> values_;
  PlanPurpose purpose_ = PlanPurpose::Simulate;
  QString message_;
  std::array<bool, kPlanFieldCount> error_fields_{};
  std::optional<PlanSelection> selection_;
  // Loaded presets by name: typing must not re-read TOML files on every key.
  std::map<std::string, spec::ModelSpec> models_;
  std::map<std::string, spec::ClusterSpec> clusters_;
  std::map<std::string, spec::HardwareSpec> hardware_;
};

}  // namespace pipetune::gui
