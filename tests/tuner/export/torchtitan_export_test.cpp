// The torchtitan export names a model flavor torchtitan 238fa99 registers, with the model's exact
// shape, or refuses naming the model; it keeps the plan's data and expert parallelism or refuses
// what torchtitan has no counterpart for; it states the torchtitan version it targets.
// References: torchtitan/models/llama3/__init__.py@238fa99 llama3_args (flavors, by hand:
// 8B's FFN is 1024 * ceil(int(1.3 * int(2 * 16384 / 3)) / 1024) = 14336), dual_pipe_v.py@238fa99
// get_dual_pipe_v_flag, job_config.py@238fa99 Parallelism.
#include <gtest/gtest.h>

#include <string>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "tests/tuner/export/export_request_support.hpp"
#include "tuner/export/exporters.hpp"
#include "tuner/export/torchtitan_rules.hpp"

namespace pipetune::tuner {
namespace {

ExportRequest request(const char* model, int tp, int pp, int dp) {
  return export_testing::plan_request(model, tp, pp, dp);
}

std::string refusal(const ExportRequest& q) {
  try {
    (void)export_torchtitan_toml(q);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(TorchtitanExport, Llama3ModelsAreTheirRegisteredFlavors) {
  for (const auto& [model, flavor] : {std::pair{"llama3-8b", "8B"}, std::pair{"llama3-70b", "70B"},
                                      std::pair{"llama3-405b", "405B"}}) {
    const std::optional<TorchtitanFlavor> f =
        torchtitan_flavor_for(spec::load_model(model), torchtitan_flavors());
    ASSERT_TRUE(f.has_value()) << model;
    EXPECT_EQ(f->model, "llama3") << model;
    EXPECT_EQ(f->flavor, flavor) << model;
  }
  // FeedForward's widths, worked out by hand from llama3_args.
  for (const TorchtitanFlavor& f : torchtitan_flavors()) {
    if (f.flavor.rfind("debugmodel", 0) == 0) {
      EXPECT_EQ(f.shape.ffn_hidden, 768) << f.flavor;
    }
    if (f.flavor.rfind("8B", 0) == 0) {
      EXPECT_EQ(f.shape.ffn_hidden, 14336) << f.flavor;
    }
    if (f.flavor == "70B") {
      EXPECT_EQ(f.shape.ffn_hidden, 28672);
    }
    if (f.flavor == "405B") {
      EXPECT_EQ(f.shape.ffn_hidden, 53248);
    }
  }
  const std::string text = export_torchtitan_toml(request("llama3-8b", 2, 4, 1));
  EXPECT_NE(text.find("[model]\nname = \"llama3\"\nflavor = \"8B\"\n"), std::string::npos) << text;
  const auto keys = parse_torchtitan_toml(text);
  EXPECT_EQ(keys.at("model.flavor"), "8B");
}

TEST(TorchtitanExport, AModelWithNoRegisteredFlavorIsRefusedByName) {
  // GPT-3 (GELU, tied embeddings), Mixtral (experts): torchtitan 238fa99 has no flavor of them.
  for (const char* model : {"gpt3-175b", "mixtral-8x7b", "tiny", "llama2-70b"}) {
    const ExportRequest q = request(model, 1, 1, 8);
    EXPECT_NE(refusal(q).find(std::string("registers no model flavor with ") + model + "'s shape"),
              std::string::npos)
        << refusal(q);
  }
  // A llama3 model of another depth builds a different model: refused too.
  ExportRequest q = request("llama3-8b", 1, 1, 8);
  q.model.layers = 30;
  EXPECT_NE(refusal(q).find("registers no model flavor"), std::string::npos) << refusal(q);
}

TEST(TorchtitanExport, TheFileAndTheHelpStateTheTargetedTorchtitan) {
  const std::string text = export_torchtitan_toml(request("llama3-8b", 2, 4, 1));
  EXPECT_EQ(text.rfind("# torchtitan job config for torchtitan 238fa99", 0), 0u) << text;
  EXPECT_NE(text.find("pytorch/torchtitan#2386"), std::string::npos) << text;
  EXPECT_NE(text.find("#   NGPU=8 CONFIG_FILE=<this file> ./run_train.sh\n"), std::string::npos)
      << text;
  EXPECT_NE(std::string(torchtitan_toml_export_target()).find("238fa99"), std::string::npos);
}

TEST(TorchtitanExport, ZeroStagesBecomeFsdpOrAreRefused) {
  // ZeRO-1 shards only optimizer state: torchtitan has no such sharding.
  ExportRequest q = request("llama3-8b", 2, 1, 4);
  q.plan.zero_stage = 1;
  EXPECT_NE(refusal(q).find("ZeRO-1"), std::string::npos) << refusal(q);
  // Without data parallelism there is nothing to shard: the plan is written.
  ExportRequest single = request("llama3-8b", 8, 1, 1);
  single.plan.zero_stage = 1;
  EXPECT_EQ(refusal(single), "");
  for (int zero : {2, 3}) {
    q.plan.zero_stage = zero;
    const auto keys = parse_torchtitan_toml(export_torchtitan_toml(q));
    EXPECT_EQ(keys.at("parallelism.data_parallel_shard_degree"), "4") << zero;
    EXPECT_EQ(keys.at("parallelism.data_parallel_replicate_degree"), "1") << zero;
    EXPECT_EQ(keys.at("parallelism.fsdp_reshard_after_forward"), zero == 3 ? "always" : "never");
  }
  q.plan.zero_stage = 0;
  const auto keys = parse_torchtitan_toml(export_torchtitan_toml(q));
  EXPECT_EQ(keys.at("parallelism.data_parallel_replicate_degree"), "4");
  EXPECT_EQ(keys.at("parallelism.data_parallel_shard_degree"), "1");
  EXPECT_EQ(keys.at("parallelism.expert_tensor_parallel_degree"), "1");  // dense
}

TEST(TorchtitanExport, ExpertParallelismWithDualPipeVAndRecomputationIsRefused) {
  ExportRequest q = request("mixtral-8x7b", 1, 2, 4);
  q.plan.ep = 2;
  q.plan.zero_stage = 2;
  q.plan.schedule = "dualpipe-v";
  q.plan.chunks = 0;
  q.plan.microbatches = 8;
  spec::apply_defaults(q.plan);
  const std::string why = refusal(q);
  EXPECT_NE(why.find("expert parallelism with DualPipeV and activation checkpointing raises "
                     "NotImplementedError"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("dual_pipe_v.py@238fa99"), std::string::npos) << why;
  // Without recomputation that rule holds; Mixtral is then refused for want of a flavor.
  q.plan.recompute = spec::Recompute::None;
  EXPECT_EQ(refusal(q).find("DualPipeV"), std::string::npos) << refusal(q);
  EXPECT_NE(refusal(q).find("no model flavor with mixtral-8x7b's shape"), std::string::npos);
}

TEST(TorchtitanExport, EveryWrittenFileNamesAFlavorOfThePlansShape) {
  for (const char* model : {"llama3-8b", "llama3-70b"}) {
    const ExportRequest q = request(model, 2, 4, 1);
    const std::string text = export_torchtitan_toml(q);
    TorchtitanLaunch launch{q.plan.world_size(), static_cast<int>(q.model.layers),
                            embedded_schedule_csv(text), torchtitan_shape(q.model)};
    EXPECT_EQ(format_violations(check_torchtitan_config(text, launch)), "") << model << "\n"
                                                                            << text;
  }
}

}  // namespace
}  // namespace pipetune::tuner
