// pipetune's schedules as torch.distributed.pipelining CSVs: every op appears once, in its rank's
// order, with its stage placed as torchtitan places it; the CSV parses back to the same actions
// and passes torch's own schedule checks (_validate_schedule, the send/recv lowering).
#include "tuner/export/pipelining_csv.hpp"

#include <gtest/gtest.h>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/spec/load.hpp"
#include "tuner/export/torchtitan_rules.hpp"

namespace pipetune::tuner {
namespace {

char torch_type(schedule::OpKind k) {
  switch (k) {
    case schedule::OpKind::F:
      return 'F';
    case schedule::OpKind::B:
      return 'I';
    case schedule::OpKind::W:
      return 'W';
    case schedule::OpKind::BW:
      return 'B';
    default:
      return '?';
  }
}

TEST(PipeliningCsv, EveryScheduleRoundTripsInRankOrderAndPassesTorchsChecks) {
  for (std::string_view name : schedule::schedule_names()) {
    for (int p : {2, 4}) {
      schedule::GeneratorParams params;
      params.name = std::string(name);
      params.stages = p;
      params.microbatches = 2 * p;
      const schedule::Schedule s = schedule::generate(params);
      // Token slices and skipped stages: torch's actions carry whole micro-batches through every
      // stage.
      if (s.slices > 1 || s.partial()) {
        EXPECT_THROW(pipelining_csv(s), InputError) << name;
        continue;
      }
      const std::string csv = pipelining_csv(s);
      const PipeliningSchedule back = parse_pipelining_csv(csv);
      ASSERT_EQ(back.size(), s.ranks.size()) << name;
      for (std::size_t r = 0; r < s.ranks.size(); ++r) {
        // A layer group's gradient reduction (layered's R) has no cell: torch's stages reduce
        // after their last backward themselves.
        std::vector<schedule::Op> ops;
        for (const schedule::Op& op : s.ranks[r])
          if (!schedule::is_reduction(op.kind)) ops.push_back(op);
        EXPECT_EQ(ops.size() < s.ranks[r].size(), name == "layered") << name;
        ASSERT_EQ(back[r].size(), ops.size()) << name << " rank " << r;
        for (std::size_t i = 0; i < ops.size(); ++i) {
          const schedule::Op& op = ops[i];
          const PipeliningAction want{s.group_of(static_cast<int>(r), op.chunk),
                                      torch_type(op.kind), op.microbatch, op.overlaps_previous};
          EXPECT_EQ(back[r][i], want)
              << name << " rank " << r << " op " << i << " " << schedule::op_label(op) << " -> "
              << action_label(back[r][i]);
        }
      }
      EXPECT_EQ(back, pipelining_actions(s)) << name;
      const bool v = s.placement == schedule::Placement::VShape;
      EXPECT_EQ(format_violations(check_pipelining_csv(csv, p, s.groups(), s.microbatches, v)), "")
          << name << " p=" << p << "\n"
          << csv;
    }
  }
}

TEST(PipeliningCsv, ZeroBubbleOrdersSplitTheBackwardAndVHalfPlacesStagesInAV) {
  schedule::GeneratorParams params;
  params.name = "zb-h1";
  params.stages = 4;
  params.microbatches = 8;
  const std::string h1 = pipelining_csv(schedule::generate(params));
  EXPECT_NE(h1.find("3I0"), std::string::npos) << h1;  // input gradient of the last stage
  EXPECT_NE(h1.find("3W0"), std::string::npos) << h1;
  params.name = "v-half";
  const std::string vh = pipelining_csv(schedule::generate(params));
  const PipeliningSchedule rows = parse_pipelining_csv(vh);
  // Rank 0 holds stages 0 and 7 (the loss), rank 3 stages 3 and 4.
  for (const PipeliningAction& a : rows[0]) EXPECT_TRUE(a.stage == 0 || a.stage == 7) << vh;
  for (const PipeliningAction& a : rows[3]) EXPECT_TRUE(a.stage == 3 || a.stage == 4) << vh;
}

TEST(PipeliningCsv, VocabularyOpsHaveNoActionAndMalformedCellsAreNamed) {
  schedule::GeneratorParams params;
  params.name = "1f1b";
  params.stages = 2;
  params.microbatches = 4;
  params.vocab = schedule::VocabMode::Vocab1;
  EXPECT_THROW((void)pipelining_csv(schedule::generate(params)), InputError);
  try {
    (void)parse_pipelining_csv("0F0,0F1\n1F0,1X0\n");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("row 1 cell 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)parse_pipelining_csv("0F0x\n"), InputError);  // torch's regex takes a prefix
}

// DualPipeV's "F & B" steps are OVERLAP_F_B cells, written as torch's _Action.__repr__ writes an
// action with sub_actions; they parse back to the two actions, the second marked.
TEST(PipeliningCsv, OverlappedPairsAreOverlapFBCells) {
  schedule::GeneratorParams params;
  params.name = "dualpipe-v";
  params.stages = 2;
  params.microbatches = 4;
  const schedule::Schedule s = schedule::generate(params);
  const std::string csv = pipelining_csv(s);
  std::size_t pairs = 0;
  for (const auto& ops : s.ranks)
    for (const schedule::Op& op : ops) pairs += op.overlaps_previous ? 1 : 0;
  ASSERT_GT(pairs, 0u);
  std::size_t cells = 0;
  for (std::size_t at = csv.find(")OVERLAP_F_B"); at != std::string::npos;
       at = csv.find(")OVERLAP_F_B", at + 1))
    ++cells;
  EXPECT_EQ(cells, pairs) << csv;
  // Rank 0 (p = 2, m = 4) by DualPipeV's steps: F0 0, 1 (step 1), F0 2, F1 0 (step 2), B1 0, W,
  // F1 1 (step 3), then its first pair, F0 of micro-batch 3 (stage 0) with the fused backward of
  // micro-batch 1 on stage 3 (its chunk 1, where the loss is).
  EXPECT_NE(csv.find("0F1,0F2,3F0,3I0,3W0,3F1,(0F3;3B1)OVERLAP_F_B,"), std::string::npos) << csv;
  const PipeliningSchedule back = parse_pipelining_csv("(0F2;3B0)OVERLAP_F_B, 0W1\n");
  ASSERT_EQ(back.size(), 1u);
  const std::vector<PipeliningAction> want = {{0, 'F', 2}, {3, 'B', 0, true}, {0, 'W', 1}};
  EXPECT_EQ(back[0], want);
  for (const char* bad : {"(0F2;3B0)OVERLAP", "(0F2)OVERLAP_F_B", "(0F2;3B0;1F1)OVERLAP_F_B",
                          "(0F2;3X0)OVERLAP_F_B"}) {
    try {
      (void)parse_pipelining_csv(std::string("0F0,") + bad + "\n");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("row 0 cell 2"), std::string::npos) << e.what();
    }
  }
}

TEST(PipeliningCsv, TheTorchtitanExportEmbedsThePredictedSchedule) {
  ExportRequest q;
  q.model = spec::load_model("llama3-8b");
  q.cluster = spec::load_cluster("dgx-h100-8");
  q.plan.tp = 2;
  q.plan.pp = 4;
  q.plan.microbatches = 8;
  q.plan.schedule = "zb-h2";
  spec::apply_defaults(q.plan);
  const std::string toml = export_torchtitan_toml(q);
  EXPECT_EQ(embedded_schedule_csv(toml), pipelining_csv(predicted_schedule(q)));
  EXPECT_EQ(embedded_schedule_csv(toml), torchtitan_schedule_csv(q));
  EXPECT_NE(toml.find("pipeline_parallel_schedule = \"PipelineScheduleSingle\""),
            std::string::npos);
  // A schedule torch has a class for gets no CSV.
  q.plan.schedule = "1f1b";
  EXPECT_EQ(torchtitan_schedule_csv(q), "");
  EXPECT_EQ(embedded_schedule_csv(export_torchtitan_toml(q)), "");
}

}  // namespace
}  // namespace pipetune::tuner
