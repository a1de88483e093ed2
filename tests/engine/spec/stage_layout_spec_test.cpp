// Per-stage layouts (stage_tp, issue 46 point 5) in the spec library: parsing the list, the
// rule's world size and device slots worked out by hand, the resharding's sender choice, every
// refusal of validate() naming its keys (SpecError::fields()), and run files that write and load
// stage_tp back, with tp (and dp) left out.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/spec/spec.hpp"

namespace pipetune::spec {
namespace {

using Fields = std::vector<std::string>;

// 16 heads, 8 KV heads, FFN 4096 (the default 4 x hidden), 32 layers: TP 1, 2, 4 and 8 divide
// all three.
ModelSpec model() {
  ModelSpec m;
  m.name = "dense";
  m.layers = 32;
  m.hidden = 1024;
  m.heads = 16;
  m.kv_heads = 8;
  m.vocab = 32000;
  m.seq_len = 2048;
  apply_defaults(m);
  return m;
}

ClusterSpec cluster(int devices) {
  HardwareSpec hw;
  hw.name = "gpu";
  hw.peak_flops = 1e15;
  hw.hbm_bytes = 80LL << 30;
  hw.hbm_bandwidth = 3e12;
  hw.intra_node_bandwidth = 450e9;
  hw.inter_node_bandwidth = 50e9;
  hw.devices_per_node = 4;  // whole nodes for every cluster size below
  return make_cluster(hw, devices);
}

// pp = stage_tp.size() stages, tp = stage_tp[0], dp as given, 2 micro-batches per stage.
ParallelPlan layout(std::vector<int> stage_tp, int dp) {
  ParallelPlan p;
  p.tp = stage_tp.front();
  p.pp = static_cast<int>(stage_tp.size());
  p.dp = dp;
  p.stage_tp = std::move(stage_tp);
  p.microbatches = 2 * p.pp;
  apply_defaults(p);
  return p;
}

// The SpecError `check` throws: its fields, and `rule` in its message.
template <typename Check>
void expect_refused(Check check, const Fields& fields, const std::string& rule) {
  try {
    check();
    ADD_FAILURE() << "no SpecError, expected: " << rule;
  } catch (const SpecError& e) {
    EXPECT_EQ(e.fields(), fields) << e.what();
    EXPECT_NE(std::string(e.what()).find(rule), std::string::npos)
        << "got: " << e.what() << "\nwanted: " << rule;
  }
}

TEST(StageLayoutSpec, ParsesCommaLists) {
  EXPECT_EQ(parse_stage_tp("4,2,2"), (std::vector<int>{4, 2, 2}));
  EXPECT_EQ(parse_stage_tp(" 4 , 2 "), (std::vector<int>{4, 2}));
  EXPECT_EQ(parse_stage_tp("8"), (std::vector<int>{8}));
  EXPECT_TRUE(parse_stage_tp("").empty());
  EXPECT_TRUE(parse_stage_tp("   ").empty());
}

TEST(StageLayoutSpec, RefusesEntriesThatAreNotTpDegrees) {
  for (const char* bad : {"4,,2", "4,x", "0,2", "-1", "4;2", "2.5", "4,2,", ",4", "1234567"}) {
    SCOPED_TRACE(bad);
    expect_refused([&] { parse_stage_tp(bad); }, Fields{"plan.stage_tp"},
                   "stage_tp must be positive TP degrees separated by commas");
  }
}

TEST(StageLayoutSpec, TextOfTheList) {
  EXPECT_EQ(stage_tp_text({4, 2, 2}), "4/2/2");
  EXPECT_EQ(stage_tp_text({4, 2, 2}, ','), "4,2,2");
  EXPECT_EQ(stage_tp_text({}), "");
}

TEST(StageLayoutSpec, TpOfEachStage) {
  const ParallelPlan p = layout({4, 2, 2}, 2);
  EXPECT_EQ(tp_of_stage(p, 0), 4);
  EXPECT_EQ(tp_of_stage(p, 1), 2);
  EXPECT_EQ(tp_of_stage(p, 2), 2);
  EXPECT_TRUE(stage_tp_varies(p));
  ParallelPlan uniform = layout({2, 2, 2}, 2);
  EXPECT_FALSE(stage_tp_varies(uniform));
  uniform.stage_tp.clear();
  EXPECT_FALSE(stage_tp_varies(uniform));
  EXPECT_EQ(tp_of_stage(uniform, 1), 2);  // no list: every stage uses tp
}

// stage_tp {4, 2, 2}, dp 2: stage 0 holds 4 x 2 = 8 devices, stages 1 and 2 hold 2 x 2 = 4
// each, 16 in all (tp*pp*dp would say 24).
TEST(StageLayoutSpec, WorldSizeIsDpTimesTheSumOfStageTp) {
  ParallelPlan p = layout({4, 2, 2}, 2);
  EXPECT_EQ(p.world_size(), 16);
  p.stage_tp.clear();
  EXPECT_EQ(p.world_size(), 4 * 3 * 2);
  EXPECT_EQ(layout({8}, 3).world_size(), 24);
}

// Stages take consecutive slots: stage 0 slots 0-7, stage 1 slots 8-11, stage 2 slots 12-15;
// inside a stage, tp_rank + stage_tp[s] * dp_rank.
TEST(StageLayoutSpec, DeviceSlotsByHand) {
  const ParallelPlan p = layout({4, 2, 2}, 2);
  EXPECT_EQ(stage_first_slot(p, 0), 0);
  EXPECT_EQ(stage_first_slot(p, 1), 8);
  EXPECT_EQ(stage_first_slot(p, 2), 12);
  EXPECT_EQ(device_slot(p, 1, 1, 1), 11);  // 8 + 1 + 2*1
  EXPECT_EQ(device_slot(p, 0, 0, 0), 0);
  EXPECT_EQ(device_slot(p, 3, 1, 0), 7);   // 0 + 3 + 4*1
  EXPECT_EQ(device_slot(p, 0, 1, 0), 4);   // 0 + 0 + 4*1
  EXPECT_EQ(device_slot(p, 1, 0, 2), 13);  // 12 + 1 + 0
  EXPECT_EQ(device_slot(p, 1, 1, 2), 15);  // 12 + 1 + 2*1
  // Every (tp_rank, dp_rank, pp_rank) of the layout has its own slot, and they fill 0-15.
  std::vector<int> taken(16, 0);
  for (int pp = 0; pp < 3; ++pp)
    for (int dp = 0; dp < 2; ++dp)
      for (int tp = 0; tp < tp_of_stage(p, pp); ++tp) {
        const int slot = device_slot(p, tp, dp, pp);
        ASSERT_GE(slot, 0);
        ASSERT_LT(slot, 16);
        ++taken[static_cast<std::size_t>(slot)];
      }
  EXPECT_EQ(taken, std::vector<int>(16, 1));
}

TEST(StageLayoutSpec, AUniformListPlacesAsPlainTp) {
  const ParallelPlan listed = layout({2, 2, 2}, 2);
  ParallelPlan plain = listed;
  plain.stage_tp.clear();
  const DeviceStrides s = device_strides(plain);
  for (int pp = 0; pp < 3; ++pp)
    for (int dp = 0; dp < 2; ++dp)
      for (int tp = 0; tp < 2; ++tp) EXPECT_EQ(device_slot(listed, tp, dp, pp), s.slot(tp, dp, pp));
  EXPECT_EQ(listed.world_size(), plain.world_size());
}

// Receiver j takes its copy from sender j % senders.
TEST(StageLayoutSpec, ReshardSenders) {
  EXPECT_EQ(reshard_senders(2, 4), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(reshard_senders(4, 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(reshard_senders(2, 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(reshard_senders(1, 3), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(reshard_senders(4, 1), (std::vector<int>{0}));
}

TEST(StageLayoutSpec, AValidLayoutPasses) {
  EXPECT_NO_THROW(validate(model(), cluster(16), layout({4, 2, 2}, 2)));
  EXPECT_NO_THROW(validate(model(), cluster(8), layout({2, 4, 1, 1}, 1)));
  // A uniform list is plain tp: the rules for differing stages do not apply.
  ParallelPlan uniform = layout({2, 2, 2}, 2);
  uniform.sequence_parallel = true;
  EXPECT_NO_THROW(validate(model(), cluster(12), uniform));
}

TEST(StageLayoutSpec, ValidateRefusesAWrongCount) {
  ParallelPlan p = layout({4, 2, 2}, 2);
  p.stage_tp = {4, 2};
  expect_refused([&] { validate(p); }, Fields{"plan.stage_tp", "plan.pp"},
                 "stage_tp needs pp = 3 entries, got 2");
}

TEST(StageLayoutSpec, ValidateRefusesAnEntryBelowOne) {
  ParallelPlan p = layout({4, 2, 2}, 2);
  p.stage_tp = {4, 0, 2};
  expect_refused([&] { validate(p); }, Fields{"plan.stage_tp"}, "stage_tp[1]=0 must be 1..");
}

TEST(StageLayoutSpec, ValidateRefusesATpThatIsNotTheFirstStages) {
  ParallelPlan p = layout({4, 2, 2}, 2);
  p.tp = 2;
  expect_refused([&] { validate(p); }, Fields{"plan.tp", "plan.stage_tp"},
                 "tp=2 is not stage_tp[0]=4");
}

TEST(StageLayoutSpec, ValidateRefusesVocabularyParallelismWithDifferingStages) {
  ParallelPlan p = layout({4, 2, 2}, 2);
  p.vocab = schedule::VocabMode::Vocab1;
  p.schedule.clear();
  for (const auto& name : schedule::schedule_names())
    if (schedule::supports_vocab(name, p.vocab)) {
      p.schedule = std::string(name);
      break;
    }
  ASSERT_FALSE(p.schedule.empty()) << "no schedule runs vocab-1";
  p.chunks = 0;
  apply_defaults(p);
  expect_refused([&] { validate(p); }, Fields{"plan.stage_tp", "plan.vocab"},
                 "stages of different tp (stage_tp) cannot shard the vocabulary");
}

TEST(StageLayoutSpec, ValidateRefusesExpertParallelismWithDifferingStages) {
  ParallelPlan p = layout({4, 2, 2}, 2);
  p.ep = 2;
  expect_refused([&] { validate(p); }, Fields{"plan.stage_tp", "plan.ep"}, "(ep>1)");
}

TEST(StageLayoutSpec, ValidateRefusesSequenceParallelismWithDifferingStages) {
  ParallelPlan p = layout({4, 2, 2}, 2);
  p.sequence_parallel = true;
  expect_refused([&] { validate(p); }, Fields{"plan.stage_tp", "plan.sequence_parallel"},
                 "are not run with sequence_parallel");
}

TEST(StageLayoutSpec, ValidateRefusesTheTpPpDpRankOrderWithDifferingStages) {
  ParallelPlan p = layout({4, 2, 2}, 2);
  p.rank_order = RankOrder::TpPpDp;
  expect_refused([&] { validate(p); }, Fields{"plan.stage_tp", "plan.rank_order"},
                 "rank_order tp-dp-pp");
}

TEST(StageLayoutSpec, ValidateRefusesTiedEmbeddingsOnStagesOfDifferentTp) {
  ModelSpec m = model();
  m.tied_embeddings = true;
  expect_refused(
      [&] {
        validate(m, layout({4, 2, 2}, 2));
      },
      Fields{"plan.stage_tp", "model.tied_embeddings"},
      "tied embeddings need the first and last stages' tp equal (stage_tp[0]=4, "
      "stage_tp[2]=2)");
  // The first and last equal: accepted, whatever the middle holds.
  EXPECT_NO_THROW(validate(m, cluster(16), layout({2, 4, 2}, 2)));
}

TEST(StageLayoutSpec, ValidateRefusesAnEntryThatDoesNotDivideTheModel) {
  ModelSpec m = model();
  m.kv_heads = 4;  // 16 heads, 4 KV heads: 8 divides heads but not kv_heads
  expect_refused(
      [&] {
        validate(m, layout({2, 8}, 1));
      },
      Fields{"plan.stage_tp", "model.kv_heads"}, "stage_tp[1]=8 does not divide kv_heads=4");
  m = model();
  m.ffn_hidden = 1002;  // 4 divides heads=16 and kv_heads=8, not 1002 (2 does)
  expect_refused(
      [&] {
        validate(m, layout({2, 2, 4}, 1));
      },
      Fields{"plan.stage_tp", "model.ffn_hidden"}, "stage_tp[2]=4 does not divide ffn_hidden=1002");
}

TEST(StageLayoutSpec, ValidateComparesDpTimesTheSumWithTheCluster) {
  expect_refused(
      [&] {
        validate(model(), cluster(24), layout({4, 2, 2}, 2));
      },
      Fields{"plan.tp", "plan.pp", "plan.dp", "cluster.devices"},
      "sum(stage_tp)*dp = 16 does not match the cluster's 24 devices");
}

// A run file with stage_tp and without tp (and dp): tp is the first entry, dp the devices over
// sum(stage_tp); the written file loads back to the same run.
TEST(StageLayoutSpec, RunFileRoundTripWithTpLeftOut) {
  const RunSpec run = parse_run(
      "description = \"tp per stage\"\n"
      "model = \"llama3-8b\"\n\n"  // 32 heads, 8 KV heads, FFN 14336
      "[cluster]\nhardware = \"h100-sxm\"\ndevices = 16\n\n"
      "[plan]\npp = 3\nmicrobatches = 6\nstage_tp = [4, 2, 2]\n");
  EXPECT_EQ(run.plan.tp, 4);
  EXPECT_EQ(run.plan.dp, 2);  // 16 / (4 + 2 + 2)
  EXPECT_EQ(run.plan.stage_tp, (std::vector<int>{4, 2, 2}));
  EXPECT_EQ(run.plan.world_size(), 16);
  const std::string text = run_file_toml(run);
  EXPECT_NE(text.find("stage_tp = [4, 2, 2]"), std::string::npos) << text;
  const RunSpec back = parse_run(text);
  EXPECT_EQ(back.plan.stage_tp, run.plan.stage_tp);
  EXPECT_EQ(back.plan.tp, 4);
  EXPECT_TRUE(back.plan == run.plan);
  // Without stage_tp, nothing of it is written.
  RunSpec plain = run;
  plain.plan.stage_tp.clear();
  plain.plan.tp = 4;
  plain.plan.dp = 2;
  plain.cluster = make_cluster(run.cluster.hardware, 24);  // 4 x 3 x 2: three whole nodes
  const std::string plain_text = run_file_toml(plain);
  EXPECT_EQ(plain_text.find("stage_tp"), std::string::npos) << plain_text;
  EXPECT_TRUE(parse_run(plain_text).plan.stage_tp.empty());
}

TEST(StageLayoutSpec, RunFileRefusesBadStageTp) {
  const std::string head =
      "model = \"llama3-8b\"\n\n[cluster]\nhardware = \"h100-sxm\"\ndevices = 16\n\n[plan]\npp = "
      "3\n"
      "microbatches = 6\n";
  try {
    parse_run(head + "stage_tp = [4, 0, 2]\n");
    ADD_FAILURE() << "took stage_tp = [4, 0, 2]";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "plan.stage_tp") << e.what();
  }
  // tp given and not the first stage's.
  expect_refused([&] { parse_run(head + "tp = 2\nstage_tp = [4, 2, 2]\n"); },
                 Fields{"plan.tp", "plan.stage_tp"}, "tp=2 is not stage_tp[0]=4");
  // dp left out and the devices not a multiple of sum(stage_tp) = 7.
  try {
    parse_run(head + "stage_tp = [4, 2, 1]\n");
    ADD_FAILURE() << "took 16 devices over sum(stage_tp) = 7";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("sum(stage_tp)=7"), std::string::npos) << e.what();
    EXPECT_EQ(e.field(), "plan.dp") << e.what();
  }
}

}  // namespace
}  // namespace pipetune::spec
