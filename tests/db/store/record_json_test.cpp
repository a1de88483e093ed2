// The workspace's JSON records: every field survives a round trip (so the CLI reads what the GUI
// stored and the other way round), and a missing field is an InputError that names it.
#include "db/store/record_json.hpp"

#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"

namespace pipetune::db {
namespace {

spec::ParallelPlan sample_plan() {
  spec::ParallelPlan p;
  p.tp = 2;
  p.pp = 4;
  p.dp = 3;
  p.ep = 1;
  p.chunks = 2;
  p.micro_batch_size = 2;
  p.microbatches = 16;
  p.global_batch = 96;
  p.schedule = "v-half";
  p.vocab = schedule::VocabMode::Vocab2;
  p.layer_split = {7, 9, 9, 7};
  p.recompute = spec::Recompute::Selective;
  p.sequence_parallel = true;
  p.zero_stage = 1;
  return p;
}

void expect_same_plan(const spec::ParallelPlan& a, const spec::ParallelPlan& b) {
  EXPECT_EQ(a.tp, b.tp);
  EXPECT_EQ(a.pp, b.pp);
  EXPECT_EQ(a.dp, b.dp);
  EXPECT_EQ(a.ep, b.ep);
  EXPECT_EQ(a.chunks, b.chunks);
  EXPECT_EQ(a.micro_batch_size, b.micro_batch_size);
  EXPECT_EQ(a.microbatches, b.microbatches);
  EXPECT_EQ(a.schedule, b.schedule);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.zero_stage, b.zero_stage);
}

TEST(RecordJson, PlanAndTrialRoundTrip) {
  const spec::ParallelPlan p = sample_plan();
  std::string label;
  const spec::ParallelPlan back = plan_from_json(plan_to_json(p, "vocab-2"), label);
  expect_same_plan(back, p);
  EXPECT_EQ(label, "vocab-2");
  EXPECT_EQ(back.global_batch, 96);
  EXPECT_EQ(back.layer_split, p.layer_split);
  EXPECT_EQ(back.recompute, spec::Recompute::Selective);
  EXPECT_TRUE(back.sequence_parallel);
  EXPECT_TRUE(back.stage_recompute.empty());

  const TrialTarget t{"llama3-8b", "presets/hardware/h100-sxm.toml", 32, 4, 256, 4096, ""};
  TrialTarget t2;
  spec::ParallelPlan p2;
  read_trial_json(trial_json(t, p, "vocab-2"), t2, p2, label);
  EXPECT_EQ(t2.model, t.model);
  EXPECT_EQ(t2.hardware, t.hardware);
  EXPECT_EQ(t2.gpus, 32);
  EXPECT_EQ(t2.nodes_of, 4);
  EXPECT_EQ(t2.global_batch, 256);
  EXPECT_EQ(t2.seq, 4096);
  EXPECT_EQ(label, "vocab-2");
  EXPECT_EQ(t2.cluster, "");
  expect_same_plan(p2, p);
  // A cluster target keeps its cluster (and trials stored before clusters read as none).
  TrialTarget c;
  c.model = "llama3-70b";
  c.cluster = "h100-mixed-nic";
  c.global_batch = 128;
  read_trial_json(trial_json(c, p, "auto"), t2, p2, label);
  EXPECT_EQ(t2.cluster, "h100-mixed-nic");
  EXPECT_EQ(t2.hardware, "");
  EXPECT_EQ(t2.gpus, 0);
  EXPECT_EQ(label, "auto");
  EXPECT_EQ(p2.vocab, schedule::VocabMode::None);
}

// The schedules' own options: token slices, the skip ratio and layered reduction come back, so
// an export or a run from the store has the plan that was ranked.
TEST(RecordJson, ScheduleOptionsRoundTrip) {
  spec::ParallelPlan p = sample_plan();
  p.slices = 3;
  p.slice_tokens = {5, 2, 1};
  p.skip_ratio = 0.25;
  p.layered_reduction = true;
  std::string label;
  const spec::ParallelPlan back = plan_from_json(plan_to_json(p, "none"), label);
  EXPECT_EQ(back.slices, 3);
  EXPECT_EQ(back.slice_tokens, p.slice_tokens);
  EXPECT_EQ(back.skip_ratio, p.skip_ratio);
  EXPECT_TRUE(back.layered_reduction);
  p.layered_reduction = false;
  EXPECT_FALSE(plan_from_json(plan_to_json(p, "none"), label).layered_reduction);
}

TEST(RecordJson, ModelAndTrainingPlanRoundTrip) {
  for (const char* name : {"mixtral-8x7b", "llama3-70b", "gpt3-175b", "tiny-moe"}) {
    spec::ModelSpec m = spec::load_model(name);
    spec::apply_defaults(m);
    const spec::ModelSpec back = model_from_json(training_specs_json(m).at("model"));
    EXPECT_EQ(back.name, m.name);
    EXPECT_EQ(back.layers, m.layers);
    EXPECT_EQ(back.hidden, m.hidden);
    EXPECT_EQ(back.heads, m.heads);
    EXPECT_EQ(back.kv_heads, m.kv_heads);
    EXPECT_EQ(back.ffn_hidden, m.ffn_hidden);
    EXPECT_EQ(back.vocab, m.vocab);
    EXPECT_EQ(back.seq_len, m.seq_len);
    EXPECT_EQ(back.experts, m.experts);
    EXPECT_EQ(back.top_k, m.top_k);
    EXPECT_EQ(back.moe_every, m.moe_every);
    EXPECT_EQ(back.activation, m.activation);
    EXPECT_EQ(back.tied_embeddings, m.tied_embeddings) << name;
  }
  spec::ParallelPlan p = sample_plan();
  p.vocab = schedule::VocabMode::Vocab1;
  const spec::ParallelPlan back =
      training_plan_from_json(training_plan_json(spec::load_model("tiny"), p, 60, 1234));
  expect_same_plan(back, p);
  // Kept (predict --against compares them, calibrate costs them).
  EXPECT_EQ(back.recompute, spec::Recompute::Selective);
  EXPECT_TRUE(back.sequence_parallel);
  EXPECT_EQ(back.layer_split, p.layer_split);
}

TEST(RecordJson, StageRecomputeRoundTripsWhenGiven) {
  spec::ParallelPlan p = sample_plan();
  EXPECT_FALSE(plan_to_json(p, "vocab-2").contains("stage_recompute"));
  p.stage_recompute = {spec::Recompute::Full, spec::Recompute::Full, spec::Recompute::Selective,
                       spec::Recompute::None};
  const nlohmann::json j = plan_to_json(p, "vocab-2");
  EXPECT_EQ(j.at("stage_recompute"),
            nlohmann::json::parse(R"(["full", "full", "selective", "none"])"));
  std::string label;
  EXPECT_EQ(plan_from_json(j, label).stage_recompute, p.stage_recompute);
  EXPECT_EQ(training_plan_from_json(training_plan_json(spec::load_model("tiny"), p, 60, 1234))
                .stage_recompute,
            p.stage_recompute);
  nlohmann::json bad = j;
  bad["stage_recompute"][1] = "most";
  EXPECT_THROW((void)plan_from_json(bad, label), InputError);
}

// Per-stage layouts: stage_tp is kept when given (plain ints, one per stage) and absent when
// every stage uses tp, in both the search's and the training run's plan records.
TEST(RecordJson, StageTpRoundTripsWhenGiven) {
  spec::ParallelPlan p = sample_plan();
  p.vocab = schedule::VocabMode::None;
  EXPECT_FALSE(plan_to_json(p, "none").contains("stage_tp"));
  std::string label;
  EXPECT_TRUE(plan_from_json(plan_to_json(p, "none"), label).stage_tp.empty());
  p.tp = 4;
  p.stage_tp = {4, 2, 2, 1};
  const nlohmann::json j = plan_to_json(p, "none");
  EXPECT_EQ(j.at("stage_tp"), nlohmann::json::parse("[4, 2, 2, 1]"));
  EXPECT_EQ(j.at("tp"), 4);
  const spec::ParallelPlan back = plan_from_json(j, label);
  EXPECT_EQ(back.stage_tp, (std::vector<int>{4, 2, 2, 1}));
  EXPECT_EQ(back.tp, 4);
  expect_same_plan(back, p);
  EXPECT_EQ(back.world_size(), 9 * 3);  // dp 3 x (4+2+2+1)
  const spec::ParallelPlan trained =
      training_plan_from_json(training_plan_json(spec::load_model("tiny"), p, 60, 1234));
  EXPECT_EQ(trained.stage_tp, p.stage_tp);
  EXPECT_EQ(trained.tp, 4);
}

TEST(RecordJson, TrainingPlanKeepsItsEngine) {
  const spec::ParallelPlan p = sample_plan();
  const nlohmann::json j = training_plan_json(spec::load_model("tiny"), p, 60, 1234,
                                              {.backend = spec::EngineBackend::cuda,
                                               .precision = spec::EnginePrecision::bf16,
                                               .attention = spec::EngineAttention::flash_tc});
  const TrainingEngine e = training_engine_from_json(j);
  EXPECT_EQ(e.backend, spec::EngineBackend::cuda);
  EXPECT_EQ(e.precision, spec::EnginePrecision::bf16);
  EXPECT_EQ(e.attention, spec::EngineAttention::flash_tc);
  EXPECT_EQ(e.gpus, 0);  // not given: not kept
  EXPECT_EQ(
      training_engine_from_json(training_plan_json(spec::load_model("tiny"), p, 60, 1234,
                                                   {.backend = spec::EngineBackend::cuda,
                                                    .precision = spec::EnginePrecision::fp32,
                                                    .gpus = 1,
                                                    .attention = spec::EngineAttention::flash}))
          .gpus,
      1);
  // The CUDA GEMM options: copies and no epilogue where not said (runs stored before they were
  // kept, and the defaults); kept both ways; refused where the engine has no such option.
  EXPECT_FALSE(e.gemm_inputs_in_gemm);
  EXPECT_FALSE(e.gelu_epilogue);
  EXPECT_EQ(j.at("gemm_inputs"), "copies");
  EXPECT_FALSE(j.contains("gelu_epilogue"));
  const TrainingEngine options =
      training_engine_from_json(training_plan_json(spec::load_model("tiny"), p, 60, 1234,
                                                   {.backend = spec::EngineBackend::cuda,
                                                    .precision = spec::EnginePrecision::bf16,
                                                    .attention = spec::EngineAttention::flash_mma,
                                                    .gemm_inputs_in_gemm = true,
                                                    .gelu_epilogue = true}));
  EXPECT_TRUE(options.gemm_inputs_in_gemm);
  EXPECT_TRUE(options.gelu_epilogue);
  EXPECT_EQ(options.attention, spec::EngineAttention::flash_mma);
  for (const auto& [key, value, message] :
       std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"gemm_inputs", "fast", "gemm_inputs is not copies or in-gemm"},
           {"gelu_epilogue", "yes", "gelu_epilogue is not true or false"}}) {
    nlohmann::json bad = j;
    bad[key] = value;
    try {
      training_engine_from_json(bad);
      FAIL() << key << " " << value.dump() << " accepted";
    } catch (const InputError& err) {
      EXPECT_NE(std::string(err.what()).find(message), std::string::npos) << err.what();
    }
  }
  nlohmann::json cpu_with_options = j;
  cpu_with_options["backend"] = "cpu";
  cpu_with_options["precision"] = "fp32";
  cpu_with_options["attention"] = "stored";
  EXPECT_THROW(training_engine_from_json(cpu_with_options), InputError);  // gemm_inputs on cpu
  cpu_with_options.erase("gemm_inputs");
  cpu_with_options["gelu_epilogue"] = true;
  EXPECT_THROW(training_engine_from_json(cpu_with_options), InputError);
  // Runs stored before the attention was kept: cuda ran flash (fp32) whatever its precision.
  nlohmann::json before_attention = j;
  before_attention.erase("attention");
  EXPECT_EQ(training_engine_from_json(before_attention).attention, spec::EngineAttention::flash);
  // A kernel that cannot have run with the stored engine is an input error.
  nlohmann::json tc_fp32 = j;
  tc_fp32["precision"] = "fp32";
  try {
    training_engine_from_json(tc_fp32);
    FAIL() << "flash-tc in fp32 accepted";
  } catch (const InputError& err) {
    EXPECT_NE(std::string(err.what()).find("training plan: attention flash-tc needs backend cuda"),
              std::string::npos)
        << err.what();
  }
  // Runs stored before the engine was kept: the CPU engine, fp32, stored attention.
  nlohmann::json old = j;
  old.erase("backend");
  old.erase("precision");
  old.erase("attention");
  old.erase("gemm_inputs");
  const TrainingEngine d = training_engine_from_json(old);
  EXPECT_EQ(d.backend, spec::EngineBackend::cpu);
  EXPECT_EQ(d.precision, spec::EnginePrecision::fp32);
  EXPECT_EQ(d.attention, spec::EngineAttention::stored);
  old["backend"] = "tpu";
  try {
    training_engine_from_json(old);
    FAIL() << "backend tpu accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown backend 'tpu'"), std::string::npos) << e.what();
  }
}

// One codec writes both records: a training run's plan is the tuner plan's keys but the global
// batch, so the stored text stays what it was; records written before the codec was shared read
// back as they did.
TEST(RecordJson, OneCodecKeepsBothStoredFormats) {
  const spec::ParallelPlan p = sample_plan();
  nlohmann::json plan = plan_to_json(p, "vocab-2");
  nlohmann::json training = training_plan_json(spec::load_model("tiny"), p, 60, 1234);
  EXPECT_EQ(plan.at("global_batch"), 96);
  EXPECT_FALSE(training.contains("global_batch"));
  for (const auto& [key, value] : training.items()) {
    if (plan.contains(key)) {
      EXPECT_EQ(value, plan[key]) << key;
    }
  }
  for (const char* key :
       {"model", "backend", "precision", "attention", "steps", "seed", "time_unit"})
    EXPECT_TRUE(training.contains(key)) << key;
  EXPECT_EQ(training.size(), plan.size() - 1 + 7);

  // A trial as `pipetune tune` has stored it, and a training run from before recomputation,
  // sequence parallelism and the layer split were kept.
  const nlohmann::json trial_plan = nlohmann::json::parse(
      R"({"chunks":1,"dp":2,"ep":1,"global_batch":32,"layer_split":[5,3],"micro_batch_size":2,)"
      R"("microbatches":8,"pp":2,"recompute":"full","schedule":"1f1b","sequence_parallel":true,)"
      R"("tp":4,"vocab":"redis","zero_stage":2})");
  std::string label;
  const spec::ParallelPlan t = plan_from_json(trial_plan, label);
  EXPECT_EQ(label, "redis");
  EXPECT_EQ(t.vocab, schedule::VocabMode::None);
  EXPECT_EQ(t.global_batch, 32);
  EXPECT_EQ(t.layer_split, (std::vector<int>{5, 3}));
  EXPECT_EQ(t.recompute, spec::Recompute::Full);
  EXPECT_EQ(t.zero_stage, 2);
  const nlohmann::json old_run = nlohmann::json::parse(
      R"({"chunks":1,"dp":2,"ep":1,"micro_batch_size":1,"microbatches":4,"model":"tiny",)"
      R"("pp":2,"schedule":"1f1b","seed":1234,"steps":3,"time_unit":"s","tp":1,"vocab":"none",)"
      R"("zero_stage":0})");
  const spec::ParallelPlan r = training_plan_from_json(old_run);
  EXPECT_EQ(r.recompute, spec::Recompute::None);
  EXPECT_FALSE(r.sequence_parallel);
  EXPECT_EQ(r.global_batch, 8);  // micro_batch_size * microbatches * dp
  EXPECT_EQ(r.microbatches, 4);
  // A tuner plan's keys are all required; a training run's vocabulary is one the engine runs.
  nlohmann::json no_split = trial_plan;
  no_split.erase("layer_split");
  EXPECT_THROW(plan_from_json(no_split, label), InputError);
  nlohmann::json redis_run = old_run;
  redis_run["vocab"] = "redis";
  EXPECT_THROW(training_plan_from_json(redis_run), InputError);
}

TEST(RecordJson, AMissingFieldIsNamed) {
  nlohmann::json j = plan_to_json(sample_plan(), "none");
  j.erase("microbatches");
  std::string label;
  try {
    plan_from_json(j, label);
    ADD_FAILURE() << "a plan without microbatches must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("microbatches"), std::string::npos) << e.what();
  }
  nlohmann::json m = model_to_json(spec::load_model("tiny"));
  m.erase("hidden");
  EXPECT_THROW(model_from_json(m), InputError);
}

}  // namespace
}  // namespace pipetune::db
