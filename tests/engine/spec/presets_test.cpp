// Every shipped preset loads and validates; preset lookup by name and by path; the figures of the
// hardware presets against shared/reference/tuners.md section 4.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/errors.hpp"
#include "engine/spec/spec.hpp"

namespace fs = std::filesystem;

namespace pipetune::spec {
namespace {

fs::path make_temp_dir(const std::string& tag) {
  const fs::path dir =
      fs::temp_directory_path() / ("pipetune_preset_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (const SpecError& e) {
    return e.what();
  }
  return "(no SpecError)";
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(PresetFiles, EveryModelLoadsAndValidates) {
  const auto names = list_presets(PresetKind::Models);
  for (const char* required :
       {"gpt3-1.7b",  "gpt3-3.6b", "gpt3-7.5b",  "gpt3-18b",    "gpt3-39b",     "gpt3-76b",
        "gpt3-145b",  "gpt3-310b", "gpt3-530b",  "gpt3-1t",     "llama2-7b",    "llama2-13b",
        "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b", "gemma-7b",
        "vp-4b-256k", "tiny",      "tiny-moe"}) {
    EXPECT_TRUE(contains(names, required)) << required;
  }
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const ModelSpec m = load_model(name);
    EXPECT_EQ(m.name, name);
    EXPECT_NO_THROW(validate(m));
  }
}

TEST(PresetFiles, EveryHardwareLoadsAndValidates) {
  const auto names = list_presets(PresetKind::Hardware);
  EXPECT_EQ(names, (std::vector<std::string>{"a100-40gb", "a100-80gb", "b200", "cpu-dev-2core",
                                             "h100-sxm", "h200", "mi300x"}));
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    EXPECT_NO_THROW(validate(load_hardware(name)));
  }
}

TEST(PresetFiles, HardwareFiguresMatchTunersTable) {
  // tuners.md section 4: peak dense BF16, HBM size (binary GB), HBM bandwidth, NVLink per
  // direction (half the bidirectional figure), NIC per GPU (Gb/s / 8).
  const HardwareSpec a100 = load_hardware("a100-80gb");
  EXPECT_DOUBLE_EQ(a100.peak_flops, 312e12);
  EXPECT_EQ(a100.hbm_bytes, 80LL << 30);
  EXPECT_DOUBLE_EQ(a100.hbm_bandwidth, 2.039e12);
  EXPECT_DOUBLE_EQ(a100.intra_node_bandwidth, 600e9 / 2);
  EXPECT_DOUBLE_EQ(a100.inter_node_bandwidth, 200e9 / 8);
  const HardwareSpec h100 = load_hardware("h100-sxm");
  EXPECT_DOUBLE_EQ(h100.peak_flops, 989e12);
  EXPECT_DOUBLE_EQ(h100.hbm_bandwidth, 3.35e12);
  EXPECT_DOUBLE_EQ(h100.intra_node_bandwidth, 900e9 / 2);
  EXPECT_DOUBLE_EQ(h100.inter_node_bandwidth, 400e9 / 8);
  EXPECT_EQ(h100.devices_per_node, 8);
  EXPECT_EQ(load_hardware("h200").hbm_bytes, 141LL << 30);
  EXPECT_DOUBLE_EQ(load_hardware("mi300x").peak_flops, 1307.4e12);
  EXPECT_DOUBLE_EQ(load_hardware("a100-40gb").hbm_bandwidth, 1.555e12);
  EXPECT_DOUBLE_EQ(load_hardware("b200").hbm_bandwidth, 8e12);
}

TEST(PresetFiles, EveryClusterLoadsAndValidates) {
  const auto names = list_presets(PresetKind::Clusters);
  for (const char* required : {"dgx-a100-8", "dgx-h100-8", "h100-1024", "h100-mixed-nic"}) {
    EXPECT_TRUE(contains(names, required)) << required;
  }
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    EXPECT_NO_THROW(validate(load_cluster(name)));
  }
  EXPECT_EQ(load_cluster("h100-1024").devices, 1024);
  EXPECT_EQ(load_cluster("h100-1024").nodes(), 128);
  EXPECT_EQ(load_cluster("dgx-h100-8").hardware.name, "h100-sxm");
}

TEST(PresetFiles, HeterogeneousClusterHasTwoNicGroups) {
  const ClusterSpec c = load_cluster("h100-mixed-nic");
  ASSERT_EQ(c.node_groups.size(), 2u);
  EXPECT_EQ(c.nodes(), 4);
  EXPECT_EQ(c.devices, 32);
  EXPECT_DOUBLE_EQ(c.node_inter_bandwidth(1), 50e9);
  EXPECT_DOUBLE_EQ(c.node_inter_bandwidth(2), 25e9);
  EXPECT_DOUBLE_EQ(c.device_inter_bandwidth(31), 25e9);
  EXPECT_DOUBLE_EQ(c.min_inter_node_bandwidth(), 25e9);
}

TEST(PresetFiles, EveryRunLoadsAndValidates) {
  const auto names = list_presets(PresetKind::Runs);
  for (const char* required : {"default", "tiny", "vp-4b-256k-vocab1"}) {
    EXPECT_TRUE(contains(names, required)) << required;
  }
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const RunSpec run = load_run(name);
    EXPECT_EQ(run.name, name);
    EXPECT_NO_THROW(validate(run));
  }
}

TEST(PresetFiles, DefaultAndVocabRunsSayWhatTheyShould) {
  const RunSpec def = load_run("default");
  EXPECT_EQ(def.plan.pp, 4);
  EXPECT_EQ(def.plan.schedule, "1f1b");
  EXPECT_EQ(def.cluster.hardware.name, "h100-sxm");
  const RunSpec vocab = load_run("vp-4b-256k-vocab1");
  EXPECT_EQ(vocab.model.vocab, 256000);
  EXPECT_EQ(vocab.plan.vocab, schedule::VocabMode::Vocab1);
  EXPECT_EQ(vocab.plan.microbatches, 128);
  const RunSpec sc21 = load_run("gpt3-18b-sc21");
  EXPECT_EQ(sc21.plan.microbatches, 32);  // global 1024 / (micro-batch 1 * dp 32)
  EXPECT_EQ(sc21.cluster.devices, 256);
}

TEST(PresetLookup, UnknownNameListsValidNames) {
  const std::string msg = error_of([] { load_model("llama9-1b"); });
  EXPECT_NE(msg.find("unknown model preset 'llama9-1b'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("llama3-8b"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tiny-moe"), std::string::npos) << msg;
  const std::string hw = error_of([] { load_hardware("h900"); });
  EXPECT_NE(hw.find("(valid: a100-40gb, a100-80gb, b200, cpu-dev-2core, h100-sxm, h200, mi300x"),
            std::string::npos)
      << hw;
}

TEST(PresetLookup, NamesAreSorted) {
  for (PresetKind kind : all_preset_kinds()) {
    const auto names = list_presets(kind);
    EXPECT_FALSE(names.empty()) << preset_kind_name(kind);
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  }
  EXPECT_EQ(parse_preset_kind("clusters"), PresetKind::Clusters);
  EXPECT_THROW(parse_preset_kind("gpus"), SpecError);
}

TEST(PresetLookup, PathInsteadOfName) {
  const fs::path dir = make_temp_dir("path");
  write_file(dir / "my-model.toml",
             "layers = 4\nhidden = 128\nheads = 8\nvocab = 1000\nseq_len = 64\n");
  write_file(dir / "sub" / "hw.toml",
             "peak_flops = 1e12\nhbm_bytes = 16e9\nhbm_bandwidth = 1e11\n"
             "intra_node_bandwidth = 1e10\ninter_node_bandwidth = 1e9\ndevices_per_node = 4\n");
  // Paths inside a file are relative to that file's folder.
  write_file(dir / "cl.toml", "hardware = \"sub/hw.toml\"\nnodes = 2\n");
  write_file(dir / "run.toml",
             "model = \"my-model.toml\"\ncluster = \"cl.toml\"\n[plan]\npp = 4\ntp = 2\n");
  const ModelSpec m = load_model((dir / "my-model.toml").string());
  EXPECT_EQ(m.name, "my-model");
  EXPECT_EQ(m.layers, 4);
  const ClusterSpec c = load_cluster((dir / "cl.toml").string());
  EXPECT_EQ(c.devices, 8);
  EXPECT_EQ(c.hardware.name, "hw");
  const RunSpec run = load_run((dir / "run.toml").string());
  EXPECT_EQ(run.plan.dp, 1);            // derived: 8 devices / (tp 2 * pp 4)
  EXPECT_EQ(run.plan.microbatches, 4);  // default: pp
  const std::string missing = error_of([&] { load_model((dir / "nope.toml").string()); });
  EXPECT_NE(missing.find("nope.toml' not found"), std::string::npos) << missing;
  fs::remove_all(dir);
}

TEST(PresetLookup, EnvironmentVariableOverridesPresetsDir) {
  const fs::path dir = make_temp_dir("env");
  write_file(dir / "models" / "only-one.toml",
             "layers = 1\nhidden = 8\nheads = 1\nvocab = 10\nseq_len = 4\n");
  const char* old = std::getenv("PIPETUNE_PRESETS_DIR");
  const std::string saved = old ? old : "";
  ::setenv("PIPETUNE_PRESETS_DIR", dir.c_str(), 1);
  EXPECT_EQ(list_presets(PresetKind::Models), std::vector<std::string>{"only-one"});
  EXPECT_EQ(load_model("only-one").layers, 1);
  const std::string msg = error_of([] { load_model("tiny"); });
  EXPECT_NE(msg.find("(valid: only-one;"), std::string::npos) << msg;
  ::setenv("PIPETUNE_PRESETS_DIR", (dir / "absent").c_str(), 1);
  EXPECT_THROW(presets_dir(), SpecError);
  if (old) {
    ::setenv("PIPETUNE_PRESETS_DIR", saved.c_str(), 1);
  } else {
    ::unsetenv("PIPETUNE_PRESETS_DIR");
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pipetune::spec
