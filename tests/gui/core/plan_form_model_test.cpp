// PlanFormModel: presets listed from the presets folder, a run preset loaded into the fields,
// and validation as you type showing the libraries' own rule next to the fields it names.
#include "gui/core/plan_form_model.hpp"

#include <gtest/gtest.h>

#include <QDir>
#include <algorithm>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/errors.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/run_file_writer.hpp"
#include "engine/spec/run_spec.hpp"
#include "engine/spec/validate.hpp"
#include "tests/gui/support/temp_dir.hpp"

namespace pipetune::gui {
namespace {

QStringList preset_stems(const char* kind) {
  QDir dir(QString(PIPETUNE_SOURCE_DIR) + "/presets/" + kind);
  QStringList out;
  for (const QString& f : dir.entryList({"*.toml"}, QDir::Files, QDir::Name)) out << f.chopped(5);
  out.sort();
  return out;
}

std::string all_errors(const PlanFormModel& form) {
  std::string s;
  for (int f = 0; f < kPlanFieldCount; ++f) {
    const QString e = form.field_error(static_cast<PlanField>(f));
    if (!e.isEmpty())
      s += plan_field_key(static_cast<PlanField>(f)).toStdString() + ": " + e.toStdString() + "\n";
  }
  return s;
}

TEST(PlanFormModel, ListsThePresetFolders) {
  EXPECT_EQ(PlanFormModel::model_presets(), preset_stems("models"));
  EXPECT_EQ(PlanFormModel::hardware_presets(), preset_stems("hardware"));
  EXPECT_EQ(PlanFormModel::cluster_presets(), preset_stems("clusters"));
  EXPECT_TRUE(PlanFormModel::schedule_names().contains("interleaved-1f1b"));
  EXPECT_EQ(PlanFormModel::vocab_names(),
            QStringList({"none", "vocab-1", "vocab-2", "interlaced"}));
}

TEST(PlanFormModel, LoadsARunPresetAndAcceptsIt) {
  PlanFormModel form;
  form.load_run_preset("default");
  // presets/runs/default.toml: llama3-8b on dgx-h100-8, tp=2 pp=4 dp=1, 16 micro-batches,
  // selective recomputation, sequence parallel, ZeRO 1.
  EXPECT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_EQ(form.value(PlanField::Model), "llama3-8b");
  EXPECT_EQ(form.value(PlanField::Cluster), "dgx-h100-8");
  EXPECT_EQ(form.value(PlanField::Hardware), "h100-sxm");
  EXPECT_EQ(form.value(PlanField::Gpus), "8");
  EXPECT_EQ(form.value(PlanField::Tp), "2");
  EXPECT_EQ(form.value(PlanField::Pp), "4");
  EXPECT_EQ(form.value(PlanField::Microbatches), "16");
  EXPECT_EQ(form.value(PlanField::Recompute), "selective");
  EXPECT_EQ(form.value(PlanField::SequenceParallel), "true");
  EXPECT_EQ(form.value(PlanField::ZeroStage), "1");
  ASSERT_TRUE(form.selection().has_value());
  const PlanSelection& s = *form.selection();
  EXPECT_EQ(s.plan.tp * s.plan.pp * s.plan.dp, 8);
  EXPECT_EQ(s.plan.global_batch, 16);  // micro-batch 1 x 16 micro-batches x dp 1
  EXPECT_EQ(s.cluster.devices, 8);
  EXPECT_EQ(s.model.layers, 32);
}

TEST(PlanFormModel, ShowsTheSpecRuleAtTheFieldsItNames) {
  PlanFormModel form;
  form.load_run_preset("default");
  ASSERT_TRUE(form.valid());
  form.set_value(PlanField::Tp, "3");
  form.set_value(PlanField::Dp, "1");
  EXPECT_FALSE(form.valid());
  EXPECT_FALSE(form.selection().has_value());
  // The message is the library's, word for word.
  spec::ParallelPlan p;
  p.tp = 3;
  p.pp = 4;
  p.dp = 1;
  p.micro_batch_size = 1;
  p.microbatches = 16;
  p.recompute = spec::Recompute::Selective;
  p.sequence_parallel = true;
  p.zero_stage = 1;
  spec::apply_defaults(p);
  std::string expected;
  try {
    spec::validate(spec::load_model("llama3-8b"), spec::load_cluster("dgx-h100-8"), p);
  } catch (const SpecError& e) {
    expected = e.what();
  }
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(form.message().toStdString(), expected);
  EXPECT_FALSE(form.field_error(PlanField::Tp).isEmpty()) << all_errors(form);
  EXPECT_TRUE(form.field_error(PlanField::Schedule).isEmpty()) << all_errors(form);
  EXPECT_TRUE(form.field_error(PlanField::Model).isEmpty()) << all_errors(form);
  // Fixed as the user types on: 2 x 4 x 1 = 8 devices.
  form.set_value(PlanField::Tp, "2");
  EXPECT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_EQ(all_errors(form), "");
}

TEST(PlanFormModel, ShowsTheScheduleGeneratorsRule) {
  PlanFormModel form;
  form.load_run_preset("default");
  form.set_value(PlanField::Tp, "1");
  form.set_value(PlanField::Pp, "8");
  form.set_value(PlanField::SequenceParallel, "false");
  form.set_value(PlanField::Schedule, "interleaved-1f1b");
  form.set_value(PlanField::Chunks, "2");
  form.set_value(PlanField::Microbatches, "12");  // 12 is not a multiple of the 8 stages
  ASSERT_FALSE(form.valid());
  EXPECT_NE(form.message().indexOf("interleaved-1f1b"), -1) << form.message().toStdString();
  EXPECT_FALSE(form.field_error(PlanField::Microbatches).isEmpty()) << all_errors(form);
  form.set_value(PlanField::Microbatches, "16");
  EXPECT_TRUE(form.valid()) << form.message().toStdString();
}

// Every field of the form is marked by an error about it: the libraries' errors by the fields they
// carry (InputError::fields(), "plan.tp"), the form's own (a preset that does not load, a name
// that does not parse) by the field it read.
TEST(PlanFormModel, AnErrorAboutEachFieldMarksThatField) {
  struct Case {
    PlanField field;
    std::vector<std::pair<PlanField, QString>> edits;  // from presets/runs/default.toml
  };
  const std::vector<Case> cases = {
      {PlanField::Model, {{PlanField::Model, "no-such-model"}}},
      {PlanField::Cluster, {{PlanField::Cluster, "no-such-cluster"}}},
      {PlanField::Hardware, {{PlanField::Hardware, "no-such-hardware"}}},
      {PlanField::Gpus, {{PlanField::Hardware, "h100-sxm"}, {PlanField::Gpus, "16"}}},
      {PlanField::Tp, {{PlanField::Tp, "3"}}},                 // does not divide 32 heads
      {PlanField::Pp, {{PlanField::Pp, "64"}}},                // exceeds 32 layers
      {PlanField::Dp, {{PlanField::Dp, "0"}}},                 // must be positive
      {PlanField::Ep, {{PlanField::Ep, "2"}}},                 // does not divide dp = 1
      {PlanField::Schedule, {{PlanField::Schedule, "2f2b"}}},  // unknown
      {PlanField::Vocab, {{PlanField::Schedule, "gpipe"}, {PlanField::Vocab, "vocab-1"}}},
      {PlanField::MicroBatchSize, {{PlanField::MicroBatchSize, "0"}}},
      {PlanField::Microbatches, {{PlanField::Microbatches, "-1"}}},
      {PlanField::Chunks, {{PlanField::Chunks, "3"}}},  // 1f1b runs one chunk per stage
      {PlanField::Recompute, {{PlanField::Recompute, "everything"}}},
      {PlanField::StageRecompute, {{PlanField::StageRecompute, "full,none"}}},  // pp = 4
      {PlanField::ZeroStage, {{PlanField::ZeroStage, "4"}}},
      {PlanField::SequenceParallel,
       {{PlanField::Tp, "1"}, {PlanField::Dp, "2"}, {PlanField::SequenceParallel, "true"}}},
      {PlanField::OffloadActivations, {{PlanField::OffloadActivations, "yes"}}},  // not a bool
      {PlanField::OffloadOptimizer, {{PlanField::OffloadOptimizer, "1"}}},
      {PlanField::GlobalBatch, {{PlanField::GlobalBatch, "7"}}},        // 1 x 16 x 1 = 16
      {PlanField::RankOrder, {{PlanField::RankOrder, "dp-tp-pp"}}},     // unknown
      {PlanField::NodeGroupOrder, {{PlanField::NodeGroupOrder, "0"}}},  // dgx-h100-8 has no groups
      {PlanField::StageTp, {{PlanField::StageTp, "2,2"}}},              // pp = 4 entries
      {PlanField::Slices, {{PlanField::Slices, "four"}}},               // not a number
      {PlanField::SkipRatio, {{PlanField::SkipRatio, "1.5"}}},          // at most 1
      {PlanField::LayeredReduction,
       {{PlanField::ZeroStage, "1"}, {PlanField::LayeredReduction, "true"}}},  // ZeRO-0 only
      {PlanField::Modular, {{PlanField::Schedule, "zb-v"}, {PlanField::Modular, "true"}}},  // a V
      {PlanField::MoeChunks, {{PlanField::MoeChunks, "2"}}},  // the default model has no experts
      {PlanField::MoeA2aNodeRanks, {{PlanField::MoeA2aNodeRanks, "2"}}},  // nor here
      {PlanField::ExpertLayout, {{PlanField::ExpertLayout, "whole"}}},    // nor here
      {PlanField::SparseEmbeddingGradient,
       {{PlanField::SparseEmbeddingGradient, "yes"}}},  // "true" or "false"
  };
  EXPECT_EQ(cases.size(), static_cast<std::size_t>(kPlanFieldCount)) << "a field without a case";
  for (const Case& c : cases) {
    const std::string name = plan_field_key(c.field).toStdString();
    PlanFormModel form;
    form.load_run_preset("default");
    ASSERT_TRUE(form.valid()) << form.message().toStdString();
    for (const auto& [field, text] : c.edits) form.set_value(field, text);
    EXPECT_FALSE(form.valid()) << name;
    EXPECT_FALSE(form.field_error(c.field).isEmpty())
        << name << " is not marked by \"" << form.message().toStdString() << "\"; marked:\n"
        << all_errors(form);
  }
}

TEST(PlanFormModel, TextThatIsNotANumberIsNamedAtItsField) {
  PlanFormModel form;
  form.load_run_preset("default");
  form.set_value(PlanField::Pp, "four");
  EXPECT_EQ(form.message(), "pp must be a whole number (got 'four')");
  EXPECT_EQ(form.field_error(PlanField::Pp), form.message());
  EXPECT_TRUE(form.field_error(PlanField::Tp).isEmpty());
}

// Placement (issue 46): a run file's rank order and node group order fill their fields, and the
// form gives back the same plan.
TEST(PlanFormModel, PlacementFieldsRoundTripAPlan) {
  testing::TempDir dir;
  const std::string path = dir.file("placed.toml");
  std::ofstream(path) << "description = \"llama3-8b on two node groups\"\n"
                         "model = \"llama3-8b\"\ncluster = \"h100-mixed-nic\"\n\n"
                         "[plan]\ntp = 2\npp = 4\ndp = 4\nmicrobatches = 8\n"
                         "rank_order = \"tp-pp-dp\"\nnode_group_order = [1, 0]\n";
  spec::RunSpec run = spec::load_run(path);
  spec::apply_defaults(run.plan);
  PlanFormModel form;
  form.load_run_preset(QString::fromStdString(path));
  ASSERT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_EQ(form.value(PlanField::Cluster), "h100-mixed-nic");
  EXPECT_EQ(form.value(PlanField::RankOrder), "tp-pp-dp");
  EXPECT_EQ(form.value(PlanField::NodeGroupOrder), "1, 0");
  ASSERT_TRUE(form.selection().has_value());
  EXPECT_EQ(form.selection()->plan.rank_order, spec::RankOrder::TpPpDp);
  EXPECT_EQ(form.selection()->plan.node_group_order, (std::vector<int>{1, 0}));
  EXPECT_TRUE(form.selection()->plan == run.plan);
  // Typed back to the defaults: the cluster's own order, Megatron's rank order.
  form.set_value(PlanField::NodeGroupOrder, "");
  form.set_value(PlanField::RankOrder, "tp-dp-pp");
  ASSERT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_TRUE(form.selection()->plan.node_group_order.empty());
  EXPECT_EQ(form.selection()->plan.rank_order, spec::RankOrder::TpDpPp);
  EXPECT_EQ(PlanFormModel::rank_order_names(), QStringList({"tp-dp-pp", "tp-pp-dp"}));
}

// Offload (KARMA, issue 46): a run file's offload_activations and offload_optimizer fill their
// fields, the form gives back the same plan (spec::load_run's, the reference), and it is valid
// for a prediction and for a training run.
TEST(PlanFormModel, OffloadFieldsRoundTripAPlan) {
  testing::TempDir dir;
  const std::string path = dir.file("offloaded.toml");
  std::ofstream(path) << "description = \"tiny with offload\"\n"
                         "model = \"tiny\"\n\n[cluster]\nhardware = \"h100-sxm\"\ndevices = 4\n\n"
                         "[plan]\ntp = 1\npp = 2\ndp = 2\nmicrobatches = 4\n"
                         "offload_activations = true\noffload_optimizer = true\n";
  spec::RunSpec run = spec::load_run(path);
  spec::apply_defaults(run.plan);
  ASSERT_TRUE(run.plan.offload_activations && run.plan.offload_optimizer);
  PlanFormModel form;
  form.load_run_preset(QString::fromStdString(path));
  ASSERT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_EQ(form.value(PlanField::OffloadActivations), "true");
  EXPECT_EQ(form.value(PlanField::OffloadOptimizer), "true");
  ASSERT_TRUE(form.selection().has_value());
  EXPECT_TRUE(form.selection()->plan.offload_activations);
  EXPECT_TRUE(form.selection()->plan.offload_optimizer);
  EXPECT_TRUE(form.selection()->plan == run.plan);
  form.set_purpose(PlanPurpose::Train);
  EXPECT_TRUE(form.valid()) << form.message().toStdString();
  // Unticked one at a time: each field drives its own setting.
  form.set_value(PlanField::OffloadActivations, "false");
  ASSERT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_FALSE(form.selection()->plan.offload_activations);
  EXPECT_TRUE(form.selection()->plan.offload_optimizer);
  form.set_value(PlanField::OffloadOptimizer, "false");
  ASSERT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_FALSE(form.selection()->plan.offload_optimizer);
}

TEST(PlanFormModel, OffloadIsOffByDefault) {
  PlanFormModel fresh;
  EXPECT_EQ(fresh.value(PlanField::OffloadActivations), "false");
  EXPECT_EQ(fresh.value(PlanField::OffloadOptimizer), "false");
  PlanFormModel form;
  form.load_run_preset("default");  // presets/runs/default.toml sets no offload
  ASSERT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_EQ(form.value(PlanField::OffloadActivations), "false");
  EXPECT_EQ(form.value(PlanField::OffloadOptimizer), "false");
  EXPECT_FALSE(form.selection()->plan.offload_activations);
  EXPECT_FALSE(form.selection()->plan.offload_optimizer);
}

// The boolean fields take "true" or "false" (what their check boxes write) and nothing else: any
// other text is the form's error at that field alone, and the plan is not taken.
TEST(PlanFormModel, ABooleanFieldTakesOnlyTrueOrFalse) {
  for (PlanField field :
       {PlanField::SequenceParallel, PlanField::OffloadActivations, PlanField::OffloadOptimizer}) {
    const std::string key = plan_field_key(field).toStdString();
    PlanFormModel form;
    form.load_run_preset("default");
    ASSERT_TRUE(form.valid()) << key << ": " << form.message().toStdString();
    const QString before = form.value(field);
    for (const QString bad : {"yes", "1", "True", ""}) {
      form.set_value(field, bad);
      EXPECT_FALSE(form.valid()) << key << " took '" << bad.toStdString() << "'";
      EXPECT_FALSE(form.selection().has_value()) << key;
      EXPECT_EQ(form.message().toStdString(),
                key + " must be true or false (got '" + bad.toStdString() + "')");
      EXPECT_EQ(form.field_error(field), form.message()) << key;
      EXPECT_TRUE(form.field_error(PlanField::Tp).isEmpty()) << all_errors(form);
    }
    form.set_value(field, before);
    EXPECT_TRUE(form.valid()) << key << ": " << form.message().toStdString();
  }
}

TEST(PlanFormModel, ABadNodeGroupOrderIsAnErrorAtItsField) {
  PlanFormModel form;
  form.load_run_preset("default");
  form.set_value(PlanField::NodeGroupOrder, "1, x");
  EXPECT_FALSE(form.valid());
  EXPECT_EQ(form.message(),
            "node_group_order must be node group indices separated by commas (got 'x' in '1, x')");
  EXPECT_EQ(form.field_error(PlanField::NodeGroupOrder), form.message());
  EXPECT_TRUE(form.field_error(PlanField::Tp).isEmpty());
  // A group named twice is spec::validate's rule, shown at the same field.
  form.set_value(PlanField::Cluster, "h100-mixed-nic");
  form.set_value(PlanField::Dp, "4");
  form.set_value(PlanField::NodeGroupOrder, "0,0");
  EXPECT_FALSE(form.valid());
  EXPECT_NE(form.message().indexOf("twice"), -1) << form.message().toStdString();
  EXPECT_FALSE(form.field_error(PlanField::NodeGroupOrder).isEmpty()) << all_errors(form);
  form.set_value(PlanField::NodeGroupOrder, "1,0");
  EXPECT_TRUE(form.valid()) << form.message().toStdString();
}

// Per-stage layouts (issue 46 point 5): a run file's stage_tp fills its field, the form gives
// back spec::load_run's plan (the reference), and the plan it accepts writes a run file that
// loads with the same stage_tp (what a launch from the GUI carries).
TEST(PlanFormModel, StageTpFieldRoundTripsAPlan) {
  testing::TempDir dir;
  const std::string path = dir.file("layout.toml");
  // llama3-8b (32 heads, 8 KV heads, FFN 14336, untied) on dgx-h100-8: dp 1 x (4+2+1+1) = 8
  // GPUs; tp is left out (the first stage's).
  std::ofstream(path) << "description = \"llama3-8b, tp 4/2/1/1\"\n"
                         "model = \"llama3-8b\"\ncluster = \"dgx-h100-8\"\n\n"
                         "[plan]\npp = 4\ndp = 1\nmicrobatches = 8\nstage_tp = [4, 2, 1, 1]\n";
  spec::RunSpec run = spec::load_run(path);
  spec::apply_defaults(run.plan);
  ASSERT_EQ(run.plan.tp, 4);
  PlanFormModel form;
  form.load_run_preset(QString::fromStdString(path));
  ASSERT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_EQ(form.value(PlanField::StageTp), "4, 2, 1, 1");
  EXPECT_EQ(form.value(PlanField::Tp), "4");
  ASSERT_TRUE(form.selection().has_value());
  EXPECT_EQ(form.selection()->plan.stage_tp, (std::vector<int>{4, 2, 1, 1}));
  EXPECT_TRUE(form.selection()->plan == run.plan);
  // Typed by hand, tp left empty: taken from the first entry.
  form.set_value(PlanField::Tp, "");
  form.set_value(PlanField::StageTp, "2,4,1,1");
  ASSERT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_EQ(form.selection()->plan.tp, 2);
  EXPECT_EQ(form.selection()->plan.stage_tp, (std::vector<int>{2, 4, 1, 1}));
  // What a launch writes: the accepted plan in a run file, loaded back.
  spec::RunSpec launched;
  launched.model = form.selection()->model;
  launched.cluster = form.selection()->cluster;
  launched.plan = form.selection()->plan;
  const std::string written = dir.file("launched.toml");
  spec::write_run_file(launched, written);
  const spec::RunSpec back = spec::load_run(written);
  EXPECT_EQ(back.plan.stage_tp, (std::vector<int>{2, 4, 1, 1}));
  EXPECT_EQ(back.plan.tp, 2);
  EXPECT_EQ(back.plan.world_size(), 8);
  // Emptied: every stage uses tp again.
  form.set_value(PlanField::Tp, "2");
  form.set_value(PlanField::StageTp, "");
  form.set_value(PlanField::Dp, "1");
  ASSERT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_TRUE(form.selection()->plan.stage_tp.empty());
}

// A bad stage_tp is shown at its field: text that is not TP degrees (spec::parse_stage_tp's
// message, word for word), and the rules spec::validate gives per-stage layouts.
TEST(PlanFormModel, ABadStageTpIsAnErrorAtItsField) {
  PlanFormModel form;
  form.load_run_preset("default");  // tp 2, pp 4, dp 1, sequence parallel, on 8 GPUs
  ASSERT_TRUE(form.valid()) << form.message().toStdString();
  form.set_value(PlanField::StageTp, "2, x, 1, 1");
  EXPECT_FALSE(form.valid());
  EXPECT_FALSE(form.selection().has_value());
  std::string expected;
  try {
    spec::parse_stage_tp("2, x, 1, 1");
  } catch (const SpecError& e) {
    expected = e.what();
  }
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(form.message().toStdString(), expected);
  EXPECT_NE(expected.find("stage_tp"), std::string::npos) << expected;
  EXPECT_EQ(form.field_error(PlanField::StageTp), form.message());
  EXPECT_TRUE(form.field_error(PlanField::Tp).isEmpty()) << all_errors(form);
  // A zero entry: not a TP degree.
  form.set_value(PlanField::StageTp, "2,0,2,2");
  EXPECT_FALSE(form.valid());
  EXPECT_FALSE(form.field_error(PlanField::StageTp).isEmpty()) << all_errors(form);
  // Three entries for four stages.
  form.set_value(PlanField::StageTp, "2,2,2");
  EXPECT_FALSE(form.valid());
  EXPECT_NE(form.message().indexOf("stage_tp"), -1) << form.message().toStdString();
  EXPECT_FALSE(form.field_error(PlanField::StageTp).isEmpty()) << all_errors(form);
  // tp is the first stage's: tp 2 with stage_tp 4,... marks both.
  form.set_value(PlanField::StageTp, "4,2,1,1");
  form.set_value(PlanField::SequenceParallel, "false");
  EXPECT_FALSE(form.valid());
  EXPECT_FALSE(form.field_error(PlanField::StageTp).isEmpty()) << all_errors(form);
  EXPECT_FALSE(form.field_error(PlanField::Tp).isEmpty()) << all_errors(form);
  // Varying stages with sequence parallelism: refused, at both fields.
  form.set_value(PlanField::Tp, "4");
  form.set_value(PlanField::SequenceParallel, "true");
  EXPECT_FALSE(form.valid());
  EXPECT_FALSE(form.field_error(PlanField::StageTp).isEmpty()) << all_errors(form);
  EXPECT_FALSE(form.field_error(PlanField::SequenceParallel).isEmpty()) << all_errors(form);
  // Fixed: 1 x (4+2+1+1) = 8 GPUs.
  form.set_value(PlanField::SequenceParallel, "false");
  EXPECT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_EQ(form.selection()->plan.world_size(), 8);
}

TEST(PlanFormModel, UnknownPresetsAndHandEditedClusters) {
  PlanFormModel form;
  form.load_run_preset("default");
  form.set_value(PlanField::Cluster, "no-such-cluster");
  EXPECT_FALSE(form.valid());
  EXPECT_FALSE(form.field_error(PlanField::Cluster).isEmpty()) << all_errors(form);
  // The library's message lists the valid names.
  EXPECT_NE(form.message().indexOf("dgx-h100-8"), -1) << form.message().toStdString();
  // Hardware x GPUs instead of a cluster preset.
  form.set_value(PlanField::Hardware, "a100-80gb");
  form.set_value(PlanField::Gpus, "8");
  EXPECT_EQ(form.value(PlanField::Cluster), "");
  EXPECT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_EQ(form.selection()->cluster.hardware.name, "a100-80gb");
  form.set_value(PlanField::Gpus, "16");  // tp*pp*dp = 8 no longer matches
  EXPECT_FALSE(form.valid());
  EXPECT_FALSE(form.field_error(PlanField::Gpus).isEmpty()) << all_errors(form);
}

TEST(PlanFormModel, TrainingIsCheckedByTheEngine) {
  PlanFormModel form;
  form.load_run_preset("tiny-train");
  form.set_purpose(PlanPurpose::Train);
  EXPECT_TRUE(form.valid()) << form.message().toStdString();
  form.set_value(PlanField::Tp, "3");  // tiny has 4 heads
  ASSERT_FALSE(form.valid());
  runtime::TrainOptions o;
  o.model = spec::load_model("tiny");
  o.plan = form.selection().has_value() ? form.selection()->plan : spec::ParallelPlan{};
  o.plan.tp = 3;
  o.plan.pp = 2;
  o.plan.dp = 2;
  o.plan.micro_batch_size = 4;
  o.plan.microbatches = 8;
  std::string expected;
  try {
    runtime::check_train_options(o);
  } catch (const InputError& e) {
    expected = e.what();
  }
  EXPECT_EQ(form.message().toStdString(), expected);
  EXPECT_FALSE(form.field_error(PlanField::Tp).isEmpty()) << all_errors(form);
}

// Every ZeRO stage, which the engine carries out (sharding the optimizer state, the gradients,
// the values): a Train form with it is valid, as for a prediction.
TEST(PlanFormModel, TrainingTakesEveryZeroStage) {
  for (const char* zero : {"1", "2", "3"}) {
    PlanFormModel form;
    form.load_run_preset("tiny-train");
    form.set_purpose(PlanPurpose::Train);
    form.set_value(PlanField::ZeroStage, zero);
    EXPECT_TRUE(form.valid()) << zero << ": " << form.message().toStdString();
    form.set_purpose(PlanPurpose::Simulate);
    EXPECT_TRUE(form.valid()) << zero << ": " << form.message().toStdString();
  }
  PlanFormModel form;
  form.load_run_preset("tiny-train");
  form.set_purpose(PlanPurpose::Train);
  form.set_value(PlanField::ZeroStage, "4");
  EXPECT_FALSE(form.valid());
  EXPECT_FALSE(form.field_error(PlanField::ZeroStage).isEmpty()) << all_errors(form);
}

// Activation recomputation and sequence parallelism, which the engine carries out: a Train form
// with them is valid.
TEST(PlanFormModel, TrainingTakesSequenceParallelism) {
  PlanFormModel form;
  form.load_run_preset("tiny-train");  // tp = 2
  form.set_purpose(PlanPurpose::Train);
  form.set_value(PlanField::SequenceParallel, "true");
  EXPECT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_TRUE(form.field_error(PlanField::SequenceParallel).isEmpty());
}

TEST(PlanFormModel, TrainingTakesEveryRecomputationMode) {
  for (const QString& mode : PlanFormModel::recompute_names()) {
    PlanFormModel form;
    form.load_run_preset("tiny-train");
    form.set_purpose(PlanPurpose::Train);
    form.set_value(PlanField::Recompute, mode);
    EXPECT_TRUE(form.valid()) << mode.toStdString() << ": " << form.message().toStdString();
    EXPECT_TRUE(form.field_error(PlanField::Recompute).isEmpty()) << mode.toStdString();
  }
}

// Recomputation per stage: a comma list with one mode per pipeline stage, kept in the checked
// plan; a bad name is the form's error at the field naming the valid ones, a wrong count the
// plan rule (spec::validate) at the field and at pp.
TEST(PlanFormModel, StageRecomputeIsOneModePerStage) {
  PlanFormModel form;
  form.load_run_preset("tiny-train");  // pp = 2
  form.set_purpose(PlanPurpose::Train);
  EXPECT_EQ(form.value(PlanField::StageRecompute), "");
  form.set_value(PlanField::StageRecompute, "full, none");
  ASSERT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_EQ(form.selection()->plan.stage_recompute,
            (std::vector<spec::Recompute>{spec::Recompute::Full, spec::Recompute::None}));
  form.set_value(PlanField::StageRecompute, "full,most");
  EXPECT_FALSE(form.valid());
  EXPECT_NE(form.message().indexOf("'most' (valid: none, selective, full)"), -1)
      << form.message().toStdString();
  EXPECT_FALSE(form.field_error(PlanField::StageRecompute).isEmpty()) << all_errors(form);
  form.set_value(PlanField::StageRecompute, "full");
  EXPECT_FALSE(form.valid());
  EXPECT_NE(form.message().indexOf("stage_recompute needs pp = 2 entries, got 1"), -1)
      << form.message().toStdString();
  EXPECT_FALSE(form.field_error(PlanField::StageRecompute).isEmpty()) << all_errors(form);
  EXPECT_FALSE(form.field_error(PlanField::Pp).isEmpty()) << all_errors(form);
  form.set_value(PlanField::StageRecompute, "");
  EXPECT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_TRUE(form.selection()->plan.stage_recompute.empty());
}

}  // namespace
}  // namespace pipetune::gui

namespace pipetune::gui {
namespace {

// Modular placement (`--modular`): one of Llama 3 8B's 32 layers per group over the 4 stages,
// whatever the Chunks field says; the layered schedule with it is the plan the form selects.
TEST(PlanFormModel, ModularPlacementGivesOneLayerPerGroup) {
  PlanFormModel form;
  form.load_run_preset("default");
  form.set_value(PlanField::Schedule, "layered");
  form.set_value(PlanField::ZeroStage, "0");
  form.set_value(PlanField::Chunks, "2");
  form.set_value(PlanField::Modular, "true");
  ASSERT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_EQ(form.selection()->plan.chunks, 8);
  form.set_value(PlanField::Modular, "false");
  ASSERT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_EQ(form.selection()->plan.chunks, 2);
}

// The expert layouts from the Set up page: presets/runs/tiny-moe-dedup-experts.toml fills the
// field with dedup, the plan carries it, and a list gives one layout per MoE layer.
TEST(PlanFormModel, ExpertLayoutFieldTakesEveryLayout) {
  PlanFormModel form;
  form.load_run_preset("tiny-moe-dedup-experts");
  ASSERT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_EQ(form.value(PlanField::ExpertLayout), "dedup");
  EXPECT_EQ(form.selection()->plan.expert_layouts,
            std::vector<spec::ExpertLayout>{spec::ExpertLayout::Dedup});
  form.set_value(PlanField::ExpertLayout,
                 "dedup,whole,sharded,dedup,dedup,sharded,whole,dedup");  // tiny-moe: 8 MoE layers
  ASSERT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_EQ(form.selection()->plan.expert_layouts.size(), 8u);
  form.set_value(PlanField::ExpertLayout, "halved");
  EXPECT_FALSE(form.valid());
  EXPECT_FALSE(form.field_error(PlanField::ExpertLayout).isEmpty()) << all_errors(form);
}

// Tutel's two-phase all-to-all from the Set up page: presets/runs/tiny-moe-a2a-2dh.toml fills
// the field with its node ranks, the plan carries them, and a count that does not divide ep is
// marked on the field.
TEST(PlanFormModel, TwoPhaseAllToAllFieldCarriesTheNodeRanks) {
  PlanFormModel form;
  form.load_run_preset("tiny-moe-a2a-2dh");
  ASSERT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_EQ(form.value(PlanField::MoeA2aNodeRanks), "2");
  EXPECT_EQ(form.selection()->plan.moe_a2a_node_ranks, 2);
  form.set_value(PlanField::MoeA2aNodeRanks, "3");  // ep = 4
  EXPECT_FALSE(form.valid());
  EXPECT_FALSE(form.field_error(PlanField::MoeA2aNodeRanks).isEmpty()) << all_errors(form);
  form.set_value(PlanField::MoeA2aNodeRanks, "");
  ASSERT_TRUE(form.valid()) << form.message().toStdString();
  EXPECT_EQ(form.selection()->plan.moe_a2a_node_ranks, 0);
}

}  // namespace
}  // namespace pipetune::gui
