#include "tuner/export/deepspeed_rules.hpp"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "engine/errors.hpp"

namespace pipetune::tuner {

namespace {

constexpr const char* kConfig = "deepspeedai/DeepSpeed deepspeed/runtime/config.py@029f12b";
constexpr const char* kBatch =
    "deepspeedai/DeepSpeed deepspeed/runtime/config.py@029f12b DeepSpeedConfig._batch_assertion";
constexpr const char* kErrorCheck =
    "deepspeedai/DeepSpeed deepspeed/runtime/config.py@029f12b DeepSpeedConfig._do_error_check";
constexpr const char* kPipeEngine =
    "deepspeedai/DeepSpeed deepspeed/runtime/pipe/engine.py@e787c16 PipelineEngine.__init__";

std::string n(std::int64_t v) {
  return std::to_string(v);
}

// An integer field, or nullopt when absent; a present non-integer is reported.
std::optional<std::int64_t> integer(const nlohmann::json& j, const char* key, RuleViolations& out) {
  if (!j.contains(key)) return std::nullopt;
  if (!j[key].is_number_integer()) {
    out.push_back({std::string(key) + " is an integer", kConfig, j[key].dump()});
    return std::nullopt;
  }
  return j[key].get<std::int64_t>();
}

bool enabled(const nlohmann::json& j, const char* section) {
  return j.contains(section) && j[section].is_object() && j[section].value("enabled", false);
}

}  // namespace

RuleViolations check_deepspeed_config(std::string_view text, int world_size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("not a DeepSpeed JSON config: ") + e.what());
  }
  RuleViolations out;
  auto require = [&](bool ok, const char* rule, const char* source, const std::string& detail) {
    if (!ok) out.push_back({rule, source, detail});
  };

  // The data-parallel world: the pipeline grid and AutoTP take their ranks out of the world.
  std::int64_t stages = 1;
  if (j.contains("pipeline") && j["pipeline"].is_object() && j["pipeline"].contains("stages")) {
    const nlohmann::json& s = j["pipeline"]["stages"];
    if (s.is_number_integer())
      stages = s.get<std::int64_t>();
    else
      require(s == "auto", "pipeline.stages is an integer or \"auto\"", kConfig, s.dump());
  }
  std::int64_t autotp = 1;
  if (j.contains("tensor_parallel") && j["tensor_parallel"].is_object())
    autotp = j["tensor_parallel"].value("autotp_size", std::int64_t{1});
  const std::int64_t model = stages * std::max<std::int64_t>(1, autotp);
  require(model > 0 && world_size % model == 0, "world divisible by pipeline stages x AutoTP size",
          kPipeEngine,
          "world " + n(world_size) + ", stages " + n(stages) + ", autotp " + n(autotp));
  const std::int64_t dp = model > 0 ? world_size / model : 0;

  // _set_batch_related_parameters derives a missing one of the three; _batch_assertion: all
  // positive and train_batch_size = micro x accumulation x DP world size.
  std::optional<std::int64_t> train = integer(j, "train_batch_size", out);
  std::optional<std::int64_t> micro = integer(j, "train_micro_batch_size_per_gpu", out);
  std::optional<std::int64_t> gas = integer(j, "gradient_accumulation_steps", out);
  require(train || micro, "train_batch_size or train_micro_batch_size_per_gpu is given", kBatch,
          "neither given");
  if (dp > 0 && (train || micro)) {
    if (!gas && train && micro) gas = *train / *micro / dp;
    if (!micro && train && gas && *gas > 0) micro = *train / dp / *gas;
    if (!train && micro) train = *micro * gas.value_or(1) * dp;
    if (!gas) gas = 1;
    if (!micro && train) micro = *train / dp;
    require(*train > 0, "train_batch_size > 0", kBatch, n(*train));
    require(*micro > 0, "train_micro_batch_size_per_gpu > 0", kBatch, n(*micro));
    require(*gas > 0, "gradient_accumulation_steps > 0", kBatch, n(*gas));
    require(*train == *micro * *gas * dp,
            "train_batch_size = micro-batch x gradient accumulation x data-parallel world", kBatch,
            n(*train) + " != " + n(*micro) + " x " + n(*gas) + " x " + n(dp));
  }

  // ZeRO: stage 0..3 (_do_error_check: at most ZeroStageEnum.max_stage); the pipeline engine
  // allows stage 0 or 1 only.
  std::int64_t zero = 0;
  if (j.contains("zero_optimization") && j["zero_optimization"].is_object())
    zero = j["zero_optimization"].value("stage", std::int64_t{0});
  require(zero >= 0 && zero <= 3, "ZeRO stage is 0..3", kErrorCheck, n(zero));
  require(stages <= 1 || zero < 2, "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism",
          kPipeEngine, "ZeRO stage " + n(zero) + " with " + n(stages) + " pipeline stages");
  // _initialize_params: bf16 and fp16 exclude each other.
  require(!(enabled(j, "bf16") && enabled(j, "fp16")), "bf16 and fp16 are not both enabled",
          kConfig, "both enabled");
  // PipelineEngine: pipe_partitioned and grad_partitioned are booleans.
  if (j.contains("pipeline") && j["pipeline"].is_object())
    for (const char* k : {"pipe_partitioned", "grad_partitioned"})
      if (j["pipeline"].contains(k))
        require(j["pipeline"][k].is_boolean(), "pipeline partition flags are booleans", kPipeEngine,
                std::string(k) + " = " + j["pipeline"][k].dump());
  return out;
}

}  // namespace pipetune::tuner
