// Run files written by spec::run_file_toml load back (spec::load_run) to the same RunSpec, field
// by field: every preset run, hand-made models, clusters and hardware, every schedule, vocabulary
// and recomputation mode, the cuda options, and names holding quotes, backslashes and controls.
#include "engine/spec/run_file_writer.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/spec/spec.hpp"

namespace fs = std::filesystem;

namespace pipetune::spec {
namespace {

std::string shown(const std::string& s) {
  return "\"" + s + "\"";
}
std::string shown(bool b) {
  return b ? "true" : "false";
}
std::string shown(double v) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}
template <typename Int>
requires std::is_integral_v<Int> std::string shown(Int v) {
  return std::to_string(v);
}
std::string shown(const std::vector<int>& v) {
  std::string s = "[";
  for (const int x : v) s += (s.size() > 1 ? ", " : "") + std::to_string(x);
  return s + "]";
}
std::string shown(Activation a) {
  return std::string(activation_name(a));
}
std::string shown(DeviceKind d) {
  return d == DeviceKind::Cpu ? "cpu" : "gpu";
}
std::string shown(Recompute r) {
  return std::string(recompute_name(r));
}
std::string shown(const std::vector<Recompute>& v) {
  return "[" + stage_recompute_text(v) + "]";
}
std::string shown(const std::vector<ExpertLayout>& v) {
  return "[" + expert_layouts_text(v) + "]";
}
std::string shown(schedule::VocabMode v) {
  return std::string(schedule::vocab_mode_name(v));
}
std::string shown(EngineBackend b) {
  return std::string(engine_backend_name(b));
}
std::string shown(EnginePrecision p) {
  return std::string(engine_precision_name(p));
}
std::string shown(const std::optional<EngineAttention>& a) {
  return a ? std::string(engine_attention_name(*a)) : "(default)";
}

// "field: written vs read" for every field that differs.
class Diff {
 public:
  template <typename T>
  void field(const std::string& name, const T& want, const T& got) {
    if (!(want == got)) lines_.push_back(name + ": " + shown(want) + " vs " + shown(got));
  }
  std::string text() const {
    std::string s;
    for (const std::string& line : lines_) s += "  " + line + "\n";
    return s;
  }
  bool empty() const { return lines_.empty(); }

 private:
  std::vector<std::string> lines_;
};

void diff_model(Diff& d, const ModelSpec& a, const ModelSpec& b) {
  d.field("model.name", a.name, b.name);
  d.field("model.description", a.description, b.description);
  d.field("model.layers", a.layers, b.layers);
  d.field("model.hidden", a.hidden, b.hidden);
  d.field("model.heads", a.heads, b.heads);
  d.field("model.kv_heads", a.kv_heads, b.kv_heads);
  d.field("model.ffn_hidden", a.ffn_hidden, b.ffn_hidden);
  d.field("model.vocab", a.vocab, b.vocab);
  d.field("model.seq_len", a.seq_len, b.seq_len);
  d.field("model.experts", a.experts, b.experts);
  d.field("model.top_k", a.top_k, b.top_k);
  d.field("model.moe_every", a.moe_every, b.moe_every);
  d.field("model.activation", a.activation, b.activation);
  d.field("model.tied_embeddings", a.tied_embeddings, b.tied_embeddings);
  d.field("model.vocab_divisible_by", a.vocab_divisible_by, b.vocab_divisible_by);
}

void diff_hardware(Diff& d, const HardwareSpec& a, const HardwareSpec& b) {
  const std::string p = "cluster.hardware.";
  d.field(p + "name", a.name, b.name);
  d.field(p + "description", a.description, b.description);
  d.field(p + "device", a.device, b.device);
  d.field(p + "peak_flops", a.peak_flops, b.peak_flops);
  d.field(p + "fp32_peak_flops", a.fp32_peak_flops, b.fp32_peak_flops);
  d.field(p + "hbm_bytes", a.hbm_bytes, b.hbm_bytes);
  d.field(p + "hbm_bandwidth", a.hbm_bandwidth, b.hbm_bandwidth);
  d.field(p + "intra_node_bandwidth", a.intra_node_bandwidth, b.intra_node_bandwidth);
  d.field(p + "inter_node_bandwidth", a.inter_node_bandwidth, b.inter_node_bandwidth);
  d.field(p + "devices_per_node", a.devices_per_node, b.devices_per_node);
  d.field(p + "intra_node_latency", a.intra_node_latency, b.intra_node_latency);
  d.field(p + "inter_node_latency", a.inter_node_latency, b.inter_node_latency);
  d.field(p + "special_function_rate", a.special_function_rate, b.special_function_rate);
  const HardwareEfficiency& e = a.efficiency;
  const HardwareEfficiency& f = b.efficiency;
  d.field(p + "efficiency.gemm", e.gemm, f.gemm);
  d.field(p + "efficiency.gemm_half_flops", e.gemm_half_flops, f.gemm_half_flops);
  d.field(p + "efficiency.attention", e.attention, f.attention);
  d.field(p + "efficiency.memory", e.memory, f.memory);
  d.field(p + "efficiency.intra_node_bus", e.intra_node_bus, f.intra_node_bus);
  d.field(p + "efficiency.inter_node_bus", e.inter_node_bus, f.inter_node_bus);
  d.field(p + "efficiency.all_reduce_bus", e.all_reduce_bus, f.all_reduce_bus);
  d.field(p + "efficiency.all_gather_bus", e.all_gather_bus, f.all_gather_bus);
  d.field(p + "efficiency.reduce_scatter_bus", e.reduce_scatter_bus, f.reduce_scatter_bus);
}

void diff_cluster(Diff& d, const ClusterSpec& a, const ClusterSpec& b) {
  d.field("cluster.name", a.name, b.name);
  d.field("cluster.description", a.description, b.description);
  diff_hardware(d, a.hardware, b.hardware);
  d.field("cluster.devices", a.devices, b.devices);
  d.field("cluster.devices_per_node", a.devices_per_node, b.devices_per_node);
  d.field("cluster.intra_node_bandwidth", a.intra_node_bandwidth, b.intra_node_bandwidth);
  d.field("cluster.inter_node_bandwidth", a.inter_node_bandwidth, b.inter_node_bandwidth);
  d.field("cluster.intra_node_latency", a.intra_node_latency, b.intra_node_latency);
  d.field("cluster.inter_node_latency", a.inter_node_latency, b.inter_node_latency);
  d.field("cluster.node_groups.size", a.node_groups.size(), b.node_groups.size());
  for (std::size_t i = 0; i < std::min(a.node_groups.size(), b.node_groups.size()); ++i) {
    const std::string p = "cluster.node_groups[" + std::to_string(i) + "].";
    d.field(p + "nodes", a.node_groups[i].nodes, b.node_groups[i].nodes);
    d.field(p + "inter_node_bandwidth", a.node_groups[i].inter_node_bandwidth,
            b.node_groups[i].inter_node_bandwidth);
  }
}

void diff_plan(Diff& d, const ParallelPlan& a, const ParallelPlan& b) {
  d.field("plan.tp", a.tp, b.tp);
  d.field("plan.pp", a.pp, b.pp);
  d.field("plan.dp", a.dp, b.dp);
  d.field("plan.ep", a.ep, b.ep);
  d.field("plan.chunks", a.chunks, b.chunks);
  d.field("plan.micro_batch_size", a.micro_batch_size, b.micro_batch_size);
  d.field("plan.microbatches", a.microbatches, b.microbatches);
  d.field("plan.global_batch", a.global_batch, b.global_batch);
  d.field("plan.schedule", a.schedule, b.schedule);
  d.field("plan.vocab", a.vocab, b.vocab);
  d.field("plan.layer_split", a.layer_split, b.layer_split);
  d.field("plan.recompute", a.recompute, b.recompute);
  d.field("plan.stage_recompute", a.stage_recompute, b.stage_recompute);
  d.field("plan.sequence_parallel", a.sequence_parallel, b.sequence_parallel);
  d.field("plan.zero_stage", a.zero_stage, b.zero_stage);
  d.field("plan.group_size", a.group_size, b.group_size);
  d.field("plan.moe_chunks", a.moe_chunks, b.moe_chunks);
  d.field("plan.moe_a2a_node_ranks", a.moe_a2a_node_ranks, b.moe_a2a_node_ranks);
  d.field("plan.expert_layouts", a.expert_layouts, b.expert_layouts);
}

// Every field but `source` (where each was read from).
std::string differences(const RunSpec& a, const RunSpec& b) {
  Diff d;
  d.field("name", a.name, b.name);
  d.field("description", a.description, b.description);
  diff_model(d, a.model, b.model);
  diff_cluster(d, a.cluster, b.cluster);
  diff_plan(d, a.plan, b.plan);
  d.field("global_batch_given", a.global_batch_given, b.global_batch_given);
  d.field("backend", a.backend, b.backend);
  d.field("precision", a.precision, b.precision);
  d.field("attention", a.attention, b.attention);
  return d.text();
}

class RunFileWriter : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pipetune_run_file_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes the run, loads it back and expects every field equal; the text written.
  std::string expect_round_trip(const RunSpec& run) {
    const std::string path = (dir_ / "run.toml").string();
    write_run_file(run, path);
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    RunSpec back;
    try {
      back = load_run(path);
    } catch (const InputError& e) {
      ADD_FAILURE() << run.name << ": the written file does not load: " << e.what() << "\n"
                    << text.str();
      return text.str();
    }
    const std::string diff = differences(run, back);
    EXPECT_TRUE(diff.empty()) << run.name << ": written vs read back:\n" << diff << text.str();
    return text.str();
  }

  fs::path dir_;
};

RunSpec tiny_run() {
  return load_run("tiny-train");
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TEST_F(RunFileWriter, EveryPresetRunRoundTrips) {
  const std::vector<std::string> runs = list_presets(PresetKind::Runs);
  ASSERT_FALSE(runs.empty());
  for (const std::string& name : runs) {
    SCOPED_TRACE(name);
    expect_round_trip(load_run(name));
  }
}

TEST_F(RunFileWriter, PresetModelAndClusterAreNamed) {
  const RunSpec run = load_run("default");
  const std::string text = expect_round_trip(run);
  EXPECT_EQ(text.rfind("# Written by pipetune", 0), 0u) << text;
  EXPECT_HAS(text, "model = " + shown(run.model.name) + "\n");
  EXPECT_HAS(text, "cluster = " + shown(run.cluster.name) + "\n");
  EXPECT_EQ(text.find("[model]"), std::string::npos) << text;
  EXPECT_EQ(text.find("[cluster]"), std::string::npos) << text;
}

TEST_F(RunFileWriter, ModelThatIsNoPresetIsATable) {
  RunSpec run = tiny_run();
  run.model.hidden = 128;
  run.model.ffn_hidden = 320;
  run.model.kv_heads = 2;
  run.model.activation = Activation::Swiglu;
  run.model.tied_embeddings = true;
  run.model.vocab_divisible_by = 64;
  const std::string text = expect_round_trip(run);
  EXPECT_HAS(text, "\n[model]\nname = \"tiny\"\n");  // the preset's name, not its figures
  RunSpec moe = load_run("tiny-moe");
  moe.model.name = "tiny-moe-every-2";
  moe.model.moe_every = 2;
  expect_round_trip(moe);
}

TEST_F(RunFileWriter, HeterogeneousClusterWithNodeGroups) {
  RunSpec run = parse_run("model = \"tiny\"\ncluster = \"h100-mixed-nic\"\n[plan]\npp = 2\n");
  std::string text = expect_round_trip(run);
  EXPECT_HAS(text, "cluster = \"h100-mixed-nic\"\n");
  run.cluster.name = "mixed, slower second group";
  run.cluster.node_groups[1].inter_node_bandwidth = 12.5e9;
  run.cluster.inter_node_latency = 1.0 / 3.0 * 1e-5;
  text = expect_round_trip(run);
  EXPECT_HAS(text, "\n[cluster]\n");
  EXPECT_HAS(text, "\n[[cluster.node_groups]]\nnodes = 2\n");
  EXPECT_HAS(text, "hardware = \"h100-sxm\"\n");
}

TEST_F(RunFileWriter, HardwareThatIsNoPresetIsATable) {
  RunSpec run = tiny_run();
  HardwareSpec& hw = run.cluster.hardware;
  hw.name = "a100 \"tuned\"";
  hw.peak_flops *= 1.1;
  hw.hbm_bandwidth = 12345678901234567000.0;  // shortest digits without an exponent: no integer
  hw.device = DeviceKind::Cpu;
  hw.fp32_peak_flops = 1.95e13;
  hw.special_function_rate = 2.5e8 / 3.0;
  hw.efficiency.gemm = 0.1 + 0.2;
  hw.efficiency.all_reduce_bus = 0.37;
  hw.efficiency.all_gather_bus = 1.0 / 7.0;
  hw.efficiency.reduce_scatter_bus = 0.05;
  const std::string text = expect_round_trip(run);
  EXPECT_HAS(text, "\n[cluster.hardware]\nname = \"a100 \\\"tuned\\\"\"\n");
  EXPECT_HAS(text, "\n[cluster.hardware.efficiency]\n");
}

TEST_F(RunFileWriter, EverySchedule) {
  for (const std::string_view name : schedule::schedule_names()) {
    SCOPED_TRACE(name);
    RunSpec run = parse_run(
        "model = \"tiny\"\ncluster = { hardware = \"a100-80gb\", devices = 2 }\n"
        "[plan]\npp = 2\nmicrobatches = 4\nschedule = \"" +
        std::string(name) + "\"\n");
    run.name = "schedule " + std::string(name);
    expect_round_trip(run);
  }
}

TEST_F(RunFileWriter, EveryVocabularyModeRecomputationAndZeroStage) {
  const std::string base =
      "model = \"tiny\"\ncluster = { hardware = \"a100-80gb\", devices = 8 }\n[plan]\n"
      "tp = 2\npp = 2\nmicrobatches = 4\n";
  for (const std::string vocab : {"none", "vocab-1", "vocab-2", "interlaced"}) {
    SCOPED_TRACE(vocab);
    expect_round_trip(parse_run(base + "vocab = \"" + vocab + "\"\n"));
  }
  for (const std::string recompute : {"none", "selective", "full"}) {
    SCOPED_TRACE(recompute);
    expect_round_trip(parse_run(base + "recompute = \"" + recompute + "\"\n"));
  }
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(stage);
    expect_round_trip(parse_run(base + "zero_stage = " + std::to_string(stage) +
                                "\nsequence_parallel = true\nmicro_batch_size = 2\n"));
  }
}

TEST_F(RunFileWriter, StageRecomputeIsWrittenWhenGiven) {
  const std::string base =
      "model = \"tiny\"\ncluster = { hardware = \"a100-80gb\", devices = 4 }\n[plan]\n"
      "pp = 4\nrecompute = \"selective\"\n";
  const std::string text =
      expect_round_trip(parse_run(base + "stage_recompute = [\"full\", \"selective\", "
                                         "\"none\", \"none\"]\n"));
  EXPECT_HAS(text, "stage_recompute = [\"full\", \"selective\", \"none\", \"none\"]\n");
  EXPECT_EQ(expect_round_trip(parse_run(base)).find("stage_recompute"), std::string::npos);
}

TEST_F(RunFileWriter, ExpertLayoutIsWrittenWhenGiven) {
  const std::string base =
      "model = \"tiny-moe\"\ncluster = { hardware = \"a100-80gb\", devices = 2 }\n[plan]\n"
      "tp = 2\n";
  EXPECT_HAS(expect_round_trip(parse_run(base + "expert_layout = \"whole\"\n")),
             "expert_layout = \"whole\"\n");
  const std::string per_layer =
      "expert_layout = [\"whole\", \"sharded\", \"whole\", \"whole\", "
      "\"sharded\", \"sharded\", \"whole\", \"sharded\"]\n";
  EXPECT_HAS(expect_round_trip(parse_run(base + per_layer)), per_layer);
  EXPECT_EQ(expect_round_trip(parse_run(base)).find("expert_layout"), std::string::npos);
}

TEST_F(RunFileWriter, LayerSplitGroupSizeAndAStatedGlobalBatch) {
  RunSpec run = parse_run(
      "model = \"tiny\"\ncluster = { hardware = \"a100-80gb\", devices = 4 }\n[plan]\n"
      "pp = 2\nschedule = \"interleaved-1f1b\"\nlayer_split = [1, 3, 0, 4]\ngroup_size = 2\n"
      "global_batch = 16\n");
  ASSERT_TRUE(run.global_batch_given);
  std::string text = expect_round_trip(run);
  EXPECT_HAS(text, "layer_split = [1, 3, 0, 4]\n");
  EXPECT_HAS(text, "global_batch = 16\n");
  run = tiny_run();
  ASSERT_FALSE(run.global_batch_given);
  text = expect_round_trip(run);
  EXPECT_EQ(text.find("global_batch"), std::string::npos) << text;
}

TEST_F(RunFileWriter, CudaBf16FlashMma) {
  RunSpec run = tiny_run();
  run.backend = EngineBackend::cuda;
  run.precision = EnginePrecision::bf16;
  run.attention = EngineAttention::flash_mma;
  std::string text = expect_round_trip(run);
  EXPECT_HAS(text, "backend = \"cuda\"\nprecision = \"bf16\"\nattention = \"flash-mma\"\n");
  run.precision = EnginePrecision::fp32;
  run.attention.reset();
  text = expect_round_trip(run);
  EXPECT_EQ(text.find("attention"), std::string::npos) << text;
}

TEST_F(RunFileWriter, NamesWithQuotesBackslashesAndControlCharacters) {
  RunSpec run = tiny_run();
  run.name = "my \"quoted\" run \\ with a backslash";
  run.description = "tab\there, line\nbreak, bell \a, delete \x7f, \u00e9 \u2603, nul ";
  run.description += std::string(1, '\0') + " kept, 'single' \"\"\" '''";
  run.model.name = "tiny \\\"model\\\"";
  run.cluster.description = "C:\\path\\to\\";
  const std::string text = expect_round_trip(run);
  EXPECT_HAS(text, "name = \"my \\\"quoted\\\" run \\\\ with a backslash\"\n");
}

TEST_F(RunFileWriter, TextThatIsNotUtf8IsRefused) {
  RunSpec run = tiny_run();
  run.description = "latin-1 \xe9t\xe9";
  try {
    (void)run_file_toml(run);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_HAS(e.what(), "'description'");
    EXPECT_HAS(e.what(), "UTF-8");
  }
}

TEST_F(RunFileWriter, RunThatWouldNotLoadIsRefused) {
  RunSpec run = tiny_run();
  run.precision = EnginePrecision::bf16;  // on the cpu backend
  EXPECT_THROW((void)run_file_toml(run), SpecError);
  run = tiny_run();
  run.plan.tp = 3;  // does not divide the heads, nor match the devices
  EXPECT_THROW((void)run_file_toml(run), SpecError);
}

TEST_F(RunFileWriter, WritesOnlyRegularFilesAndLeavesNoTemporaryFile) {
  const RunSpec run = tiny_run();
  const std::string path = (dir_ / "run.toml").string();
  std::ofstream(path) << "old text\n";
  write_run_file(run, path);
  EXPECT_EQ(load_run(path).plan, run.plan);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"run.toml"});

  const std::string folder = (dir_ / "a folder").string();
  fs::create_directory(folder);
  try {
    write_run_file(run, folder);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_HAS(e.what(), "'" + folder + "'");
    EXPECT_HAS(e.what(), "a directory");
  }
  const std::string missing = (dir_ / "no such folder" / "run.toml").string();
  try {
    write_run_file(run, missing);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_HAS(e.what(), "'" + missing + "'");
  }
}

TEST_F(RunFileWriter, SymbolicLinkIsFollowed) {
  const RunSpec run = tiny_run();
  const fs::path target = dir_ / "target.toml";
  std::ofstream(target) << "old\n";
  fs::create_symlink(target, dir_ / "link.toml");
  write_run_file(run, (dir_ / "link.toml").string());
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.toml"));
  EXPECT_EQ(load_run(target.string()).plan, run.plan);
}

}  // namespace
}  // namespace pipetune::spec
