// Loading specs from TOML: defaults, overrides, and bad input that must name file, line and key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/errors.hpp"
#include "engine/spec/spec.hpp"

namespace fs = std::filesystem;

namespace pipetune::spec {
namespace {

std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (const SpecError& e) {
    return e.what();
  }
  return "(no SpecError)";
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

constexpr const char* kTinyModel =
    "layers = 8\nhidden = 64\nheads = 4\nvocab = 512\nseq_len = 32\n";

TEST(SpecLoading, MalformedFileNamesFileAndLine) {
  const fs::path file =
      fs::temp_directory_path() / ("pipetune_bad_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(file) << "layers = 8\nhidden = 64\nheads = = 4\n";
  const std::string msg = error_of([&] { load_model(file.string()); });
  EXPECT_HAS(msg, file.string() + ":3:");
  EXPECT_HAS(msg, "invalid TOML");
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  fs::remove(file);
}

TEST(SpecLoading, WrongTypeNamesFileLineAndKey) {
  const std::string msg = error_of([] { parse_model("hidden = 64\nlayers = \"x\"\n", "m.toml"); });
  EXPECT_HAS(msg, "m.toml:2: key 'layers': expected an integer, got a string");
}

TEST(SpecLoading, UnknownKeyIsATypoError) {
  const std::string msg =
      error_of([] { parse_model(std::string(kTinyModel) + "layres = 3\n", "m.toml"); });
  EXPECT_HAS(msg, "m.toml:6: unknown key 'layres'");
  EXPECT_HAS(msg, "valid: ");
  EXPECT_HAS(msg, "layers");
  const std::string plan = error_of([] {
    parse_run("model = \"tiny\"\ncluster = \"dgx-a100-8\"\n[plan]\npp = 2\nshedule = \"gpipe\"\n",
              "r.toml");
  });
  EXPECT_HAS(plan, "r.toml:5: unknown key 'plan.shedule' in [plan]");
}

TEST(SpecLoading, NonPositiveSizesNameTheKey) {
  EXPECT_HAS(error_of([] { parse_model("layers = 0\n", "m.toml"); }),
             "m.toml:1: key 'layers': must be positive, got 0");
  EXPECT_HAS(error_of([] {
               parse_run("model = \"tiny\"\ncluster = \"dgx-a100-8\"\n[plan]\ntp = -2\n", "r.toml");
             }),
             "r.toml:4: key 'plan.tp': must be positive, got -2");
  EXPECT_HAS(error_of([] {
               parse_cluster("hardware = \"h100-sxm\"\nnodes = 1\ninter_node_bandwidth = 0\n",
                             "c.toml");
             }),
             "c.toml:3: key 'inter_node_bandwidth': must be positive");
}

TEST(SpecLoading, VocabularyPaddingIsOffUnlessTheModelSaysAMultiple) {
  const char* gpt2 = "layers = 12\nhidden = 768\nheads = 12\nvocab = 50257\nseq_len = 1024\n";
  EXPECT_EQ(parse_model(gpt2, "m.toml").vocab_divisible_by, 1);
  const ModelSpec padded = parse_model(std::string(gpt2) + "vocab_divisible_by = 128\n", "m.toml");
  EXPECT_EQ(padded.vocab_divisible_by, 128);
  EXPECT_EQ(padded_vocab(padded, 1), 50304);
  EXPECT_HAS(
      error_of([&] { parse_model(std::string(gpt2) + "vocab_divisible_by = 0\n", "m.toml"); }),
      "m.toml:6: key 'vocab_divisible_by': must be positive, got 0");
  EXPECT_HAS(
      error_of([&] { parse_model(std::string(gpt2) + "vocab_divisible_by = 131072\n", "m.toml"); }),
      "vocab_divisible_by");
}

TEST(SpecLoading, RunBackendIsCpuUnlessTheFileSaysCuda) {
  EXPECT_EQ(parse_run("model = \"tiny\"\ncluster = \"dgx-a100-8\"\n", "r").backend,
            EngineBackend::cpu);
  EXPECT_EQ(
      parse_run("backend = \"cuda\"\nmodel = \"tiny\"\ncluster = \"dgx-a100-8\"\n", "r").backend,
      EngineBackend::cuda);
  EXPECT_HAS(error_of([] {
               parse_run("model = \"tiny\"\ncluster = \"dgx-a100-8\"\nbackend = \"gpu\"\n",
                         "r.toml");
             }),
             "r.toml:3: key 'backend': unknown backend 'gpu' (valid: cpu, cuda)");
}

TEST(SpecLoading, RunPrecisionIsFp32UnlessACudaRunSaysBf16) {
  const char* run = "model = \"tiny\"\ncluster = \"dgx-a100-8\"\n";
  EXPECT_EQ(parse_run(run, "r").precision, EnginePrecision::fp32);
  EXPECT_EQ(
      parse_run(std::string("backend = \"cuda\"\nprecision = \"bf16\"\n") + run, "r").precision,
      EnginePrecision::bf16);
  EXPECT_HAS(error_of([&] { parse_run(std::string("precision = \"bf16\"\n") + run, "r.toml"); }),
             "r.toml:1: key 'precision': bf16 is for backend = \"cuda\"");
  EXPECT_HAS(error_of([&] {
               parse_run(std::string("backend = \"cuda\"\nprecision = \"fp16\"\n") + run, "r.toml");
             }),
             "key 'precision': unknown precision 'fp16' (valid: fp32, bf16)");
}

TEST(SpecLoading, RunAttentionDefaultsByBackendAndPrecisionAndFlashTcNeedsCudaBf16) {
  const std::string run = "model = \"tiny\"\ncluster = \"dgx-a100-8\"\n";
  EXPECT_FALSE(parse_run(run, "r").attention);
  EXPECT_EQ(engine_attention(parse_run(run, "r")), EngineAttention::stored);
  EXPECT_EQ(engine_attention(parse_run("backend = \"cuda\"\n" + run, "r")), EngineAttention::flash);
  EXPECT_EQ(engine_attention(parse_run("backend = \"cuda\"\nprecision = \"bf16\"\n" + run, "r")),
            EngineAttention::flash_mma);
  // Said in the file: kept, whatever the default.
  EXPECT_EQ(engine_attention(parse_run(
                "backend = \"cuda\"\nprecision = \"bf16\"\nattention = \"flash\"\n" + run, "r")),
            EngineAttention::flash);
  EXPECT_EQ(engine_attention(parse_run("attention = \"flash\"\n" + run, "r")),
            EngineAttention::flash);
  EXPECT_HAS(error_of([&] {
               parse_run("backend = \"cuda\"\nattention = \"flash-tc\"\n" + run, "r.toml");
             }),
             "r.toml:2: key 'attention': flash-tc needs backend cuda and precision bf16 (bf16 "
             "products on tensor cores), not cuda fp32");
  EXPECT_HAS(error_of([&] { parse_run("attention = \"sdpa\"\n" + run, "r.toml"); }),
             "key 'attention': unknown attention 'sdpa' (valid: stored, flash, flash-tc, "
             "flash-mma)");
  EXPECT_HAS(error_of([&] {
               parse_run("backend = \"cuda\"\nattention = \"flash-mma\"\n" + run, "r.toml");
             }),
             "key 'attention': flash-mma needs backend cuda and precision bf16 (bf16 products on "
             "tensor cores), not cuda fp32");
  EXPECT_EQ(
      engine_attention(parse_run(
          "backend = \"cuda\"\nprecision = \"bf16\"\nattention = \"flash-mma\"\n" + run, "r")),
      EngineAttention::flash_mma);
  for (const EngineAttention a : {EngineAttention::stored, EngineAttention::flash,
                                  EngineAttention::flash_tc, EngineAttention::flash_mma})
    EXPECT_EQ(parse_engine_attention(engine_attention_name(a)), a);
}

TEST(SpecLoading, MissingRequiredKey) {
  EXPECT_HAS(error_of([] { parse_model("layers = 2\nhidden = 8\nheads = 2\nvocab = 10\n", "m"); }),
             "m: missing key 'seq_len'");
  EXPECT_HAS(error_of([] { parse_cluster("hardware = \"h100-sxm\"\n", "c"); }),
             "missing key 'nodes' (or 'devices')");
  EXPECT_HAS(error_of([] { parse_run("cluster = \"dgx-a100-8\"\n", "r"); }),
             "r: missing key 'model'");
}

TEST(SpecLoading, RuleViolationInFileNamesFileAndRule) {
  EXPECT_HAS(error_of([] {
               parse_model("layers = 2\nhidden = 64\nheads = 5\nvocab = 10\nseq_len = 4\n",
                           "m.toml");
             }),
             "m.toml: heads=5 does not divide hidden=64");
  EXPECT_HAS(error_of([] {
               parse_run(
                   "model = \"tiny\"\ncluster = \"dgx-a100-8\"\n[plan]\ntp = 3\npp = 1\n"
                   "dp = 1\n",
                   "r.toml");
             }),
             "r.toml:4: key 'plan.tp': tp=3 does not divide heads=4");
}

TEST(SpecLoading, BadEnumsListValidValues) {
  EXPECT_HAS(
      error_of([] { parse_model(std::string(kTinyModel) + "activation = \"relu\"\n", "m.toml"); }),
      "m.toml:6: key 'activation': unknown activation 'relu' (valid: gelu, swiglu)");
  EXPECT_HAS(error_of([] {
               parse_run("model = \"tiny\"\ncluster = \"dgx-a100-8\"\n[plan]\nvocab = \"v3\"\n",
                         "r.toml");
             }),
             "r.toml:4: key 'plan.vocab': unknown vocabulary mode 'v3'");
  EXPECT_HAS(error_of([] {
               parse_run(
                   "model = \"tiny\"\ncluster = \"dgx-a100-8\"\n[plan]\npp = 8\n"
                   "schedule = \"2f2b\"\n",
                   "r.toml");
             }),
             "unknown schedule '2f2b' (valid: gpipe, 1f1b");
  EXPECT_HAS(error_of([] { parse_run("model = \"gpt9\"\ncluster = \"dgx-a100-8\"\n", "r.toml"); }),
             "r.toml:1: key 'model': unknown model preset 'gpt9' (valid: ");
}

TEST(SpecLoading, PlanDefaults) {
  const RunSpec run = parse_run("model = \"tiny\"\ncluster = \"dgx-a100-8\"\n", "r.toml");
  EXPECT_EQ(run.name, "r");
  EXPECT_EQ(run.plan.tp, 1);
  EXPECT_EQ(run.plan.pp, 1);
  EXPECT_EQ(run.plan.dp, 8);  // all devices
  EXPECT_EQ(run.plan.ep, 1);
  EXPECT_EQ(run.plan.chunks, 1);
  EXPECT_EQ(run.plan.micro_batch_size, 1);
  EXPECT_EQ(run.plan.microbatches, 1);  // = pp
  EXPECT_EQ(run.plan.global_batch, 8);
  EXPECT_EQ(run.plan.schedule, "1f1b");
  EXPECT_EQ(run.plan.vocab, schedule::VocabMode::None);
  EXPECT_TRUE(run.plan.layer_split.empty());
  EXPECT_EQ(run.plan.recompute, Recompute::None);
  EXPECT_FALSE(run.plan.sequence_parallel);
  EXPECT_EQ(run.plan.zero_stage, 0);
  EXPECT_EQ(run.plan.group_size, 0);
}

TEST(SpecLoading, VScheduleDefaultsToTwoChunks) {
  const RunSpec run = parse_run(
      "model = \"tiny\"\ncluster = \"dgx-a100-8\"\n[plan]\npp = 4\nschedule = \"v-half\"\n"
      "microbatches = 8\n",
      "r.toml");
  EXPECT_EQ(run.plan.chunks, 2);
  EXPECT_EQ(run.plan.dp, 2);
}

TEST(SpecLoading, InlineTablesOverridePresets) {
  const RunSpec run = parse_run(
      "[model]\npreset = \"vp-4b-256k\"\nseq_len = 4096\n"
      "[cluster]\npreset = \"dgx-h100-8\"\nnodes = 2\ninter_node_bandwidth = 25e9\n"
      "[plan]\npp = 8\ndp = 2\nvocab = \"vocab-2\"\nglobal_batch = 64\n"
      "layer_split = [5, 4, 4, 4, 4, 4, 4, 3]\nrecompute = \"full\"\nzero_stage = 2\n",
      "r.toml");
  EXPECT_EQ(run.model.name, "vp-4b-256k");
  EXPECT_EQ(run.model.seq_len, 4096);
  EXPECT_EQ(run.model.vocab, 256000);
  EXPECT_EQ(run.cluster.devices, 16);
  EXPECT_DOUBLE_EQ(run.cluster.inter_node_bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(run.cluster.intra_node_bandwidth, 450e9);  // from the hardware
  EXPECT_EQ(run.plan.microbatches, 32);                       // 64 / (1 * 2)
  EXPECT_EQ(run.plan.vocab, schedule::VocabMode::Vocab2);
  EXPECT_EQ(run.plan.recompute, Recompute::Full);
  EXPECT_EQ(run.plan.zero_stage, 2);
  EXPECT_EQ(layer_split(run.model, run.plan), (std::vector<int>{5, 4, 4, 4, 4, 4, 4, 3}));
}

TEST(SpecLoading, StageRecomputePerPipelineRank) {
  const std::string head = "model = \"tiny\"\ncluster = \"dgx-a100-8\"\n[plan]\npp = 2\n";
  const RunSpec run = parse_run(head + "stage_recompute = [\"full\", \"none\"]\n", "r.toml");
  EXPECT_EQ(run.plan.stage_recompute, (std::vector<Recompute>{Recompute::Full, Recompute::None}));
  EXPECT_EQ(run.plan.recompute, Recompute::None);
  EXPECT_TRUE(parse_run(head, "r.toml").plan.stage_recompute.empty());
  EXPECT_HAS(
      error_of([&] { parse_run(head + "stage_recompute = [\"full\", \"most\"]\n", "r.toml"); }),
      "r.toml:5: key 'plan.stage_recompute': entry 1: unknown mode 'most' (valid: none, "
      "selective, full)");
  EXPECT_HAS(error_of([&] { parse_run(head + "stage_recompute = [\"full\", 1]\n", "r.toml"); }),
             "key 'plan.stage_recompute': expected an array of mode names");
  EXPECT_HAS(error_of([&] { parse_run(head + "stage_recompute = [\"full\"]\n", "r.toml"); }),
             "r.toml:5: key 'plan.stage_recompute': stage_recompute needs pp = 2 entries, got 1");
}

TEST(SpecLoading, ExpertLayoutForEveryMoeLayerOrOnePerLayer) {
  const std::string head = "model = \"tiny-moe\"\ncluster = \"dgx-a100-8\"\n[plan]\ntp = 2\n";
  EXPECT_EQ(parse_run(head + "expert_layout = \"whole\"\n", "r.toml").plan.expert_layouts,
            (std::vector<ExpertLayout>{ExpertLayout::Whole}));
  EXPECT_TRUE(parse_run(head, "r.toml").plan.expert_layouts.empty());
  const RunSpec run = parse_run(head +
                                    "expert_layout = [\"whole\", \"sharded\", \"whole\", "
                                    "\"whole\", \"sharded\", \"sharded\", \"whole\", \"whole\"]\n",
                                "r.toml");
  EXPECT_EQ(run.plan.expert_layouts.size(), 8u);
  EXPECT_EQ(expert_layout_of(run.plan.expert_layouts, 1), ExpertLayout::Sharded);
  EXPECT_EQ(expert_layout_of(run.plan.expert_layouts, 7), ExpertLayout::Whole);
  EXPECT_HAS(error_of([&] { parse_run(head + "expert_layout = \"halved\"\n", "r.toml"); }),
             "r.toml:5: key 'plan.expert_layout': unknown layout 'halved' (valid: sharded, whole, "
             "dedup, adaptive)");
  EXPECT_HAS(error_of([&] { parse_run(head + "expert_layout = [\"whole\", 2]\n", "r.toml"); }),
             "key 'plan.expert_layout': expected an array of layout names");
  EXPECT_HAS(
      error_of([&] { parse_run(head + "expert_layout = [\"whole\", \"sharded\"]\n", "r.toml"); }),
      "expert_layout has 2 entries: give one for every MoE layer, or one per MoE layer (8)");
  // 4 experts over ep = 4 leave one per EP rank: not divisible by tp = 2.
  EXPECT_HAS(
      error_of([&] { parse_run(head + "dp = 4\nep = 4\nexpert_layout = \"whole\"\n", "r.toml"); }),
      "expert_layout=whole divides each EP rank's experts (experts/ep = 4/4 = 1) among its "
      "tp=2 ranks, which does not divide them");
  EXPECT_HAS(error_of([&] {
               parse_run(
                   "model = \"tiny\"\ncluster = \"dgx-a100-8\"\n[plan]\ntp = 2\n"
                   "expert_layout = \"whole\"\n",
                   "r.toml");
             }),
             "the model has none (experts=1)");
}

TEST(SpecLoading, OverridesApplyBeforeDerivedDefaults) {
  const ModelSpec m = parse_model("preset = \"tiny\"\nhidden = 128\n", "wide.toml");
  EXPECT_EQ(m.name, "wide");
  EXPECT_EQ(m.hidden, 128);
  EXPECT_EQ(m.ffn_hidden, 256);  // tiny states ffn_hidden explicitly, so it stays
  // gpt3-1.7b leaves kv_heads to its default (= heads): it follows the overridden heads.
  const ModelSpec g = parse_model("preset = \"gpt3-1.7b\"\nheads = 16\n", "g.toml");
  EXPECT_EQ(g.kv_heads, 16);
}

TEST(SpecLoading, InlineClusterFromHardware) {
  const RunSpec run = parse_run(
      "model = \"tiny\"\n[cluster]\nhardware = \"a100-40gb\"\ndevices = 4\n"
      "intra_node_latency = 0\n[plan]\npp = 4\n",
      "r.toml");
  EXPECT_EQ(run.cluster.devices, 4);
  EXPECT_EQ(run.cluster.nodes(), 1);
  EXPECT_DOUBLE_EQ(run.cluster.intra_node_latency, 0.0);
  EXPECT_DOUBLE_EQ(run.cluster.inter_node_latency, run.cluster.hardware.inter_node_latency);
  EXPECT_HAS(error_of([] {
               parse_cluster("hardware = \"a100-40gb\"\ndevices = 4\nnodes = 1\n", "c.toml");
             }),
             "c.toml:2: key 'devices': give nodes or devices, not both");
}

TEST(SpecLoading, NodeGroupErrors) {
  EXPECT_HAS(error_of([] {
               parse_cluster(
                   "hardware = \"h100-sxm\"\n[[node_groups]]\nnodes = 2\n"
                   "inter_node_bandwith = 5e10\n",
                   "c.toml");
             }),
             "c.toml:4: unknown key 'node_groups[0].inter_node_bandwith'");
  EXPECT_HAS(error_of([] {
               parse_cluster(
                   "hardware = \"h100-sxm\"\nnodes = 3\n[[node_groups]]\nnodes = 2\n"
                   "inter_node_bandwidth = 5e10\n",
                   "c.toml");
             }),
             "c.toml: node_groups cover 2 nodes, cluster has 3");
  // One kind of device per cluster: a group cannot name its own.
  EXPECT_HAS(error_of([] {
               parse_cluster(
                   "hardware = \"h100-sxm\"\n[[node_groups]]\nnodes = 2\n"
                   "inter_node_bandwidth = 5e10\nhardware = \"a100-80gb\"\n",
                   "c.toml");
             }),
             "key 'node_groups[0].hardware': node groups differ only in their NICs");
}

TEST(SpecLoading, PlanPlacementKeys) {
  const std::string head =
      "model = \"tiny\"\ncluster = \"h100-mixed-nic\"\n[plan]\ntp = 4\npp = 2\ndp = 4\n";
  const RunSpec run =
      parse_run(head + "rank_order = \"tp-pp-dp\"\nnode_group_order = [1, 0]\n", "r.toml");
  EXPECT_EQ(run.plan.rank_order, RankOrder::TpPpDp);
  EXPECT_EQ(run.plan.node_group_order, (std::vector<int>{1, 0}));
  EXPECT_HAS(error_of([&] { parse_run(head + "rank_order = \"dp-tp-pp\"\n", "r.toml"); }),
             "r.toml:7: key 'plan.rank_order': unknown rank order 'dp-tp-pp' (valid: tp-dp-pp, "
             "tp-pp-dp)");
  EXPECT_HAS(error_of([&] { parse_run(head + "node_group_order = [1, 1]\n", "r.toml"); }),
             "node_group_order[1]=1 names a node group twice");
  EXPECT_HAS(error_of([&] { parse_run(head + "node_group_order = [0, 2]\n", "r.toml"); }),
             "node_group_order[1]=2 is not a node group index 0..1");
  EXPECT_HAS(error_of([&] { parse_run(head + "node_group_order = [0]\n", "r.toml"); }),
             "node_group_order has 1 entries, the cluster has 2 node groups");
  // The comma list the CLI and the GUI take.
  EXPECT_EQ(parse_node_group_order(" 1, 0 "), (std::vector<int>{1, 0}));
  EXPECT_TRUE(parse_node_group_order("  ").empty());
  EXPECT_HAS(error_of([] { parse_node_group_order("1,,0"); }),
             "node_group_order must be node group indices separated by commas (got '' in "
             "'1,,0')");
  EXPECT_HAS(error_of([] { parse_node_group_order("-1"); }), "(got '-1' in '-1')");
}

TEST(SpecLoading, KeysOnlyLeavesCrossRulesToTheCaller) {
  const std::string text = "model = \"tiny\"\ncluster = \"dgx-a100-8\"\n[plan]\npp = 4\ndp = 4\n";
  EXPECT_HAS(error_of([&] { parse_run(text, "r.toml"); }),
             "r.toml:4: key 'plan.pp': tp*pp*dp = 16 does not match the cluster's 8 devices");
  RunSpec run = parse_run(text, "r.toml", {}, RunCheck::KeysOnly);
  run.plan.dp = 2;
  run.plan.global_batch = 0;
  apply_defaults(run.plan);
  EXPECT_NO_THROW(validate(run));
}

TEST(SpecLoading, PresetCycleIsReported) {
  const fs::path dir = fs::temp_directory_path() / ("pipetune_cycle_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "a.toml") << "preset = \"b.toml\"\n";
  std::ofstream(dir / "b.toml") << "preset = \"a.toml\"\n";
  EXPECT_HAS(error_of([&] { load_model((dir / "a.toml").string()); }), "(a cycle?)");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pipetune::spec
