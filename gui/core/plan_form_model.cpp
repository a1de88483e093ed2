#include "gui/core/plan_form_model.hpp"

#include <exception>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/schedule.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/plan_schedule.hpp"
#include "engine/spec/presets.hpp"
#include "engine/spec/run_spec.hpp"
#include "engine/spec/validate.hpp"

namespace pipetune::gui {

namespace {

constexpr std::array<const char*, kPlanFieldCount> kKeys = {"model",
                                                            "cluster",
                                                            "hardware",
                                                            "gpus",
                                                            "tp",
                                                            "pp",
                                                            "dp",
                                                            "ep",
                                                            "schedule",
                                                            "vocab",
                                                            "micro_batch_size",
                                                            "microbatches",
                                                            "chunks",
                                                            "recompute",
                                                            "stage_recompute",
                                                            "zero_stage",
                                                            "sequence_parallel",
                                                            "offload_activations",
                                                            "offload_optimizer",
                                                            "global_batch",
                                                            "rank_order",
                                                            "node_group_order",
                                                            "stage_tp",
                                                            "slices",
                                                            "skip_ratio",
                                                            "layered_reduction",
                                                            "modular",
                                                            "moe_chunks",
                                                            "moe_a2a_node_ranks",
                                                            "expert_layout",
                                                            "sparse_embedding_gradient"};

std::size_t slot(PlanField f) {
  return static_cast<std::size_t>(f);
}

QStringList to_qt(const std::vector<std::string>& names) {
  QStringList out;
  for (const auto& n : names) out << QString::fromStdString(n);
  return out;
}

// The form's own error: text that is not a number. Carries the field it belongs to.
struct ParseError {
  PlanField field;
  QString message;
};

int parse_int(const QString& text, PlanField field) {
  bool ok = false;
  const int v = text.trimmed().toInt(&ok);
  if (!ok)
    throw ParseError{
        field, plan_field_key(field) + " must be a whole number (got '" + text.trimmed() + "')"};
  return v;
}

// A boolean field: "true" or "false", as the check boxes write them and a run file spells them;
// any other text is the form's error at the field.
bool parse_bool(const QString& text, PlanField field) {
  if (text == "true") return true;
  if (text == "false") return false;
  throw ParseError{field, plan_field_key(field) + " must be true or false (got '" + text + "')"};
}

// A list of whole numbers as its field shows it, "1, 0" (node group indices, TP degrees per
// stage); "" = none. Whether the list fits the plan is spec::validate's rule.
QString int_list_text(const std::vector<int>& values) {
  QStringList parts;
  for (int v : values) parts << QString::number(v);
  return parts.join(", ");
}

// The form fields a library error is about (engine/errors.hpp): the plan's fields by their keys
// ("plan.tp"), and the GPUs field for the cluster's devices when the plan is checked against the
// cluster. Fields the form does not show (model sizes, plan.group_size) mark nothing.
std::array<bool, kPlanFieldCount> fields_of(const InputError& error, PlanPurpose purpose) {
  std::array<bool, kPlanFieldCount> marked{};
  for (const std::string& key : error.fields()) {
    if (key == "cluster.devices") {
      if (purpose == PlanPurpose::Simulate) marked[slot(PlanField::Gpus)] = true;
      continue;
    }
    for (std::size_t f = slot(PlanField::Tp); f < kKeys.size(); ++f)
      if (key == std::string("plan.") + kKeys[f]) marked[f] = true;
  }
  return marked;
}

}  // namespace

QString plan_field_key(PlanField field) {
  return QString::fromLatin1(kKeys[slot(field)]);
}

PlanFormModel::PlanFormModel(QObject* parent) : QObject(parent) {
  values_[slot(PlanField::Tp)] = "1";
  values_[slot(PlanField::Pp)] = "1";
  values_[slot(PlanField::Dp)] = "1";
  values_[slot(PlanField::Ep)] = "1";
  values_[slot(PlanField::Schedule)] = "1f1b";
  values_[slot(PlanField::Vocab)] = "none";
  values_[slot(PlanField::MicroBatchSize)] = "1";
  values_[slot(PlanField::Chunks)] = "1";
  values_[slot(PlanField::Recompute)] = "none";
  values_[slot(PlanField::ZeroStage)] = "0";
  values_[slot(PlanField::SequenceParallel)] = "false";
  values_[slot(PlanField::OffloadActivations)] = "false";
  values_[slot(PlanField::OffloadOptimizer)] = "false";
  values_[slot(PlanField::LayeredReduction)] = "false";
  values_[slot(PlanField::SparseEmbeddingGradient)] = "false";
  values_[slot(PlanField::Modular)] = "false";
  values_[slot(PlanField::RankOrder)] = "tp-dp-pp";
  message_ = "choose a model";
}

QStringList PlanFormModel::model_presets() {
  return to_qt(spec::list_presets(spec::PresetKind::Models));
}
QStringList PlanFormModel::hardware_presets() {
  return to_qt(spec::list_presets(spec::PresetKind::Hardware));
}
QStringList PlanFormModel::cluster_presets() {
  return to_qt(spec::list_presets(spec::PresetKind::Clusters));
}
QStringList PlanFormModel::schedule_names() {
  QStringList out;
  for (auto n : schedule::schedule_names()) out << QString::fromUtf8(n.data(), n.size());
  return out;
}
QStringList PlanFormModel::vocab_names() {
  QStringList out;
  for (auto m : {schedule::VocabMode::None, schedule::VocabMode::Vocab1,
                 schedule::VocabMode::Vocab2, schedule::VocabMode::Interlaced}) {
    const auto n = schedule::vocab_mode_name(m);
    out << QString::fromUtf8(n.data(), n.size());
  }
  return out;
}
QStringList PlanFormModel::recompute_names() {
  QStringList out;
  for (auto r : {spec::Recompute::None, spec::Recompute::Selective, spec::Recompute::Full}) {
    const auto n = spec::recompute_name(r);
    out << QString::fromUtf8(n.data(), n.size());
  }
  return out;
}

QStringList PlanFormModel::rank_order_names() {
  QStringList out;
  for (auto o : {spec::RankOrder::TpDpPp, spec::RankOrder::TpPpDp}) {
    const auto n = spec::rank_order_name(o);
    out << QString::fromUtf8(n.data(), n.size());
  }
  return out;
}

QString PlanFormModel::value(PlanField field) const {
  return values_[slot(field)];
}

QString PlanFormModel::field_error(PlanField field) const {
  return error_fields_[slot(field)] ? message_ : QString();
}

void PlanFormModel::set_value(PlanField field, const QString& text) {
  values_[slot(field)] = text;
  if (field == PlanField::Cluster && !text.isEmpty()) {
    try {
      const spec::ClusterSpec& c = cluster_spec(text.toStdString());
      values_[slot(PlanField::Hardware)] = QString::fromStdString(c.hardware.name);
      values_[slot(PlanField::Gpus)] = QString::number(c.devices);
    } catch (const std::exception&) {  // validate() reports the bad preset
    }
  } else if (field == PlanField::Hardware || field == PlanField::Gpus) {
    values_[slot(PlanField::Cluster)].clear();
  }
  validate();
}

void PlanFormModel::set_purpose(PlanPurpose purpose) {
  purpose_ = purpose;
  validate();
}

void PlanFormModel::load_run_preset(const QString& name) {
  try {
    const spec::RunSpec run = spec::load_run(name.toStdString(), spec::RunCheck::KeysOnly);
    const QStringList models = model_presets(), clusters = cluster_presets();
    const QString model_name = QString::fromStdString(run.model.name);
    values_[slot(PlanField::Model)] = models.contains(model_name) ? model_name : QString();
    const QString cluster_name = QString::fromStdString(run.cluster.name);
    values_[slot(PlanField::Cluster)] = clusters.contains(cluster_name) ? cluster_name : QString();
    values_[slot(PlanField::Hardware)] = QString::fromStdString(run.cluster.hardware.name);
    values_[slot(PlanField::Gpus)] = QString::number(run.cluster.devices);
    const spec::ParallelPlan& p = run.plan;
    values_[slot(PlanField::Tp)] = QString::number(p.tp);
    values_[slot(PlanField::Pp)] = QString::number(p.pp);
    values_[slot(PlanField::Dp)] = QString::number(p.dp);
    values_[slot(PlanField::Ep)] = QString::number(p.ep);
    values_[slot(PlanField::Schedule)] = QString::fromStdString(p.schedule);
    const auto vocab = schedule::vocab_mode_name(p.vocab);
    values_[slot(PlanField::Vocab)] = QString::fromUtf8(vocab.data(), vocab.size());
    values_[slot(PlanField::MicroBatchSize)] = QString::number(p.micro_batch_size);
    values_[slot(PlanField::Microbatches)] =
        p.microbatches > 0 ? QString::number(p.microbatches) : QString();
    values_[slot(PlanField::Chunks)] = QString::number(p.chunks);
    const auto recompute = spec::recompute_name(p.recompute);
    values_[slot(PlanField::Recompute)] = QString::fromUtf8(recompute.data(), recompute.size());
    values_[slot(PlanField::StageRecompute)] =
        QString::fromStdString(spec::stage_recompute_text(p.stage_recompute));
    values_[slot(PlanField::ZeroStage)] = QString::number(p.zero_stage);
    values_[slot(PlanField::SequenceParallel)] = p.sequence_parallel ? "true" : "false";
    values_[slot(PlanField::OffloadActivations)] = p.offload_activations ? "true" : "false";
    values_[slot(PlanField::OffloadOptimizer)] = p.offload_optimizer ? "true" : "false";
    values_[slot(PlanField::LayeredReduction)] = p.layered_reduction ? "true" : "false";
    values_[slot(PlanField::SparseEmbeddingGradient)] =
        p.sparse_embedding_gradient ? "true" : "false";
    values_[slot(PlanField::Slices)] = p.slices > 0 ? QString::number(p.slices) : QString();
    values_[slot(PlanField::MoeChunks)] =
        p.moe_chunks != 1 ? QString::number(p.moe_chunks) : QString();
    values_[slot(PlanField::MoeA2aNodeRanks)] =
        p.moe_a2a_node_ranks != 0 ? QString::number(p.moe_a2a_node_ranks) : QString();
    values_[slot(PlanField::ExpertLayout)] =
        QString::fromStdString(spec::expert_layouts_text(p.expert_layouts));
    values_[slot(PlanField::SkipRatio)] =
        p.skip_ratio ? QString::number(*p.skip_ratio, 'g', 17) : QString();
    // A global batch the plan's sizes imply stays derived, so editing them keeps it consistent.
    const bool derived = p.global_batch == std::int64_t{p.micro_batch_size} * p.microbatches * p.dp;
    values_[slot(PlanField::GlobalBatch)] =
        p.global_batch > 0 && !derived ? QString::number(p.global_batch) : QString();
    const auto rank_order = spec::rank_order_name(p.rank_order);
    values_[slot(PlanField::RankOrder)] = QString::fromUtf8(rank_order.data(), rank_order.size());
    values_[slot(PlanField::NodeGroupOrder)] = int_list_text(p.node_group_order);
    values_[slot(PlanField::StageTp)] = int_list_text(p.stage_tp);
    validate();
  } catch (const std::exception& e) {
    message_ = QString::fromStdString(e.what());
    error_fields_ = {};
    selection_.reset();
    emit validated();
  }
}

const spec::ModelSpec& PlanFormModel::model_spec(const std::string& name) {
  auto it = models_.find(name);
  if (it == models_.end()) it = models_.emplace(name, spec::load_model(name)).first;
  return it->second;
}
const spec::ClusterSpec& PlanFormModel::cluster_spec(const std::string& name) {
  auto it = clusters_.find(name);
  if (it == clusters_.end()) it = clusters_.emplace(name, spec::load_cluster(name)).first;
  return it->second;
}
const spec::HardwareSpec& PlanFormModel::hardware_spec(const std::string& name) {
  auto it = hardware_.find(name);
  if (it == hardware_.end()) it = hardware_.emplace(name, spec::load_hardware(name)).first;
  return it->second;
}

void PlanFormModel::validate() {
  message_.clear();
  error_fields_ = {};
  selection_.reset();
  try {
    PlanSelection s;
    select_model(s);
    select_cluster(s);
    read_plan(s.plan);
    // Modular placement: the chunks it gives replace the Chunks field's (as --modular does).
    if (parse_bool(text(PlanField::Modular), PlanField::Modular)) {
      try {
        s.plan.chunks = spec::modular_chunks(s.model, s.plan);
      } catch (const InputError& e) {
        throw ParseError{PlanField::Modular, QString::fromStdString(e.what())};
      }
    }
    check_plan(s);
    s.global_batch = s.plan.global_batch;
    selection_ = std::move(s);
  } catch (const ParseError& e) {
    message_ = e.message;
    error_fields_[slot(e.field)] = true;
  } catch (const InputError& e) {
    message_ = QString::fromStdString(e.what());
    error_fields_ = fields_of(e, purpose_);
  }
  emit validated();
}

QString PlanFormModel::text(PlanField field) const {
  return values_[slot(field)].trimmed();
}

void PlanFormModel::select_model(PlanSelection& s) {
  if (text(PlanField::Model).isEmpty()) throw ParseError{PlanField::Model, "choose a model preset"};
  s.model_preset = text(PlanField::Model).toStdString();
  try {
    s.model = model_spec(s.model_preset);
  } catch (const InputError& e) {
    throw ParseError{PlanField::Model, QString::fromStdString(e.what())};
  }
}

// A cluster preset gives the hardware and GPUs; without one, hardware x GPUs make the cluster.
void PlanFormModel::select_cluster(PlanSelection& s) {
  if (!text(PlanField::Cluster).isEmpty()) {
    try {
      s.cluster = cluster_spec(text(PlanField::Cluster).toStdString());
    } catch (const InputError& e) {
      throw ParseError{PlanField::Cluster, QString::fromStdString(e.what())};
    }
    s.cluster_preset = text(PlanField::Cluster).toStdString();
    s.hardware_preset = s.cluster.hardware.name;
    s.gpus = s.cluster.devices;
  } else {
    if (text(PlanField::Hardware).isEmpty())
      throw ParseError{PlanField::Hardware, "choose a cluster or a hardware preset"};
    s.hardware_preset = text(PlanField::Hardware).toStdString();
    s.gpus = parse_int(text(PlanField::Gpus), PlanField::Gpus);
    if (s.gpus < 1)
      throw ParseError{PlanField::Gpus, "gpus=" + text(PlanField::Gpus) + " must be positive"};
    try {
      s.cluster = spec::make_cluster(hardware_spec(s.hardware_preset), s.gpus);
    } catch (const InputError& e) {
      throw ParseError{PlanField::Hardware, QString::fromStdString(e.what())};
    }
  }
}

// The plan's fields as typed: numbers parsed here, names by the libraries.
void PlanFormModel::read_plan(spec::ParallelPlan& p) const {
  try {  // the count and the sizes are spec::validate's rules (pp entries, dividing heads...)
    p.stage_tp = spec::parse_stage_tp(text(PlanField::StageTp).toStdString());
  } catch (const InputError& e) {
    throw ParseError{PlanField::StageTp, QString::fromStdString(e.what())};
  }
  // tp is the first stage's: an empty Tp takes it from the stages' list, as a run file does.
  if (text(PlanField::Tp).isEmpty() && !p.stage_tp.empty())
    p.tp = p.stage_tp.front();
  else
    p.tp = parse_int(text(PlanField::Tp), PlanField::Tp);
  p.pp = parse_int(text(PlanField::Pp), PlanField::Pp);
  p.dp = parse_int(text(PlanField::Dp), PlanField::Dp);
  p.ep = parse_int(text(PlanField::Ep), PlanField::Ep);
  p.chunks = parse_int(text(PlanField::Chunks), PlanField::Chunks);
  p.micro_batch_size = parse_int(text(PlanField::MicroBatchSize), PlanField::MicroBatchSize);
  if (!text(PlanField::Microbatches).isEmpty())
    p.microbatches = parse_int(text(PlanField::Microbatches), PlanField::Microbatches);
  if (!text(PlanField::GlobalBatch).isEmpty())
    p.global_batch = parse_int(text(PlanField::GlobalBatch), PlanField::GlobalBatch);
  p.zero_stage = parse_int(text(PlanField::ZeroStage), PlanField::ZeroStage);
  p.schedule = text(PlanField::Schedule).toStdString();
  p.sequence_parallel = parse_bool(text(PlanField::SequenceParallel), PlanField::SequenceParallel);
  p.offload_activations =
      parse_bool(text(PlanField::OffloadActivations), PlanField::OffloadActivations);
  p.offload_optimizer = parse_bool(text(PlanField::OffloadOptimizer), PlanField::OffloadOptimizer);
  p.layered_reduction = parse_bool(text(PlanField::LayeredReduction), PlanField::LayeredReduction);
  p.sparse_embedding_gradient =
      parse_bool(text(PlanField::SparseEmbeddingGradient), PlanField::SparseEmbeddingGradient);
  if (!text(PlanField::Slices).isEmpty())
    p.slices = parse_int(text(PlanField::Slices), PlanField::Slices);
  if (!text(PlanField::MoeChunks).isEmpty())
    p.moe_chunks = parse_int(text(PlanField::MoeChunks), PlanField::MoeChunks);
  if (!text(PlanField::MoeA2aNodeRanks).isEmpty())
    p.moe_a2a_node_ranks = parse_int(text(PlanField::MoeA2aNodeRanks), PlanField::MoeA2aNodeRanks);
  try {
    p.expert_layouts = spec::parse_expert_layouts(text(PlanField::ExpertLayout).toStdString());
  } catch (const InputError& e) {
    throw ParseError{PlanField::ExpertLayout, QString::fromStdString(e.what())};
  }
  if (!text(PlanField::SkipRatio).isEmpty()) {
    bool ok = false;
    const double ratio = text(PlanField::SkipRatio).trimmed().toDouble(&ok);
    if (!ok)
      throw ParseError{PlanField::SkipRatio, "skip_ratio must be a number (got '" +
                                                 text(PlanField::SkipRatio).trimmed() + "')"};
    p.skip_ratio = ratio;
  }
  // The names are parsed by the libraries, whose messages list the valid ones.
  try {
    p.vocab = schedule::parse_vocab_mode(text(PlanField::Vocab).toStdString());
  } catch (const InputError& e) {
    throw ParseError{PlanField::Vocab, QString::fromStdString(e.what())};
  }
  try {
    p.recompute = spec::parse_recompute(text(PlanField::Recompute).toStdString());
  } catch (const InputError& e) {
    throw ParseError{PlanField::Recompute, QString::fromStdString(e.what())};
  }
  try {  // the count is spec::validate's rule (one entry per pipeline stage)
    p.stage_recompute = spec::parse_stage_recompute(text(PlanField::StageRecompute).toStdString());
  } catch (const InputError& e) {
    throw ParseError{PlanField::StageRecompute, QString::fromStdString(e.what())};
  }
  try {
    p.rank_order = spec::parse_rank_order(text(PlanField::RankOrder).toStdString());
  } catch (const InputError& e) {
    throw ParseError{PlanField::RankOrder, QString::fromStdString(e.what())};
  }
  try {
    p.node_group_order =
        spec::parse_node_group_order(text(PlanField::NodeGroupOrder).toStdString());
  } catch (const InputError& e) {
    throw ParseError{PlanField::NodeGroupOrder, QString::fromStdString(e.what())};
  }
}

// The libraries' rules for what the form is checked for.
void PlanFormModel::check_plan(PlanSelection& s) const {
  spec::ParallelPlan& p = s.plan;
  // Zero sizes must reach the libraries' rules, but apply_defaults divides by them.
  if (p.micro_batch_size > 0 && p.dp > 0) spec::apply_defaults(p);
  if (purpose_ == PlanPurpose::Train) {
    runtime::TrainOptions o;
    o.model = s.model;
    o.plan = p;
    runtime::check_train_options(o);
  } else {
    spec::validate(s.model, s.cluster, p);
    (void)spec::plan_schedule(p);  // the schedule's own rules (micro-batch minimum, chunks)
  }
}

}  // namespace pipetune::gui
