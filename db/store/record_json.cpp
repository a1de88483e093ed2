#include "db/store/record_json.hpp"

#include "db/store/run_name.hpp"
#include "engine/errors.hpp"
#include "engine/schedule/schedule.hpp"

namespace pipetune::db {

nlohmann::json plan_to_json(const spec::ParallelPlan& p, const std::string& vocab_label,
                            PlanRecord record) {
  nlohmann::json j = {{"tp", p.tp},
                      {"pp", p.pp},
                      {"dp", p.dp},
                      {"ep", p.ep},
                      {"chunks", p.chunks},
                      {"micro_batch_size", p.micro_batch_size},
                      {"microbatches", p.microbatches},
                      {"schedule", p.schedule},
                      {"vocab", vocab_label},
                      {"layer_split", p.layer_split},
                      {"recompute", std::string(spec::recompute_name(p.recompute))},
                      {"sequence_parallel", p.sequence_parallel},
                      {"zero_stage", p.zero_stage},
                      {"rank_order", std::string(spec::rank_order_name(p.rank_order))},
                      {"node_group_order", p.node_group_order}};
  if (!p.stage_recompute.empty()) {  // per pipeline rank; absent = recompute everywhere
    std::vector<std::string> modes;
    for (spec::Recompute r : p.stage_recompute) modes.emplace_back(spec::recompute_name(r));
    j["stage_recompute"] = modes;
  }
  // Per-stage layouts: absent when every stage uses tp.
  if (!p.stage_tp.empty()) j["stage_tp"] = p.stage_tp;
  // terapipe's token slices: absent when the plan names none.
  if (p.slices > 0) j["slices"] = p.slices;
  if (!p.slice_tokens.empty()) j["slice_tokens"] = p.slice_tokens;
  if (p.skip_ratio) j["skip_ratio"] = *p.skip_ratio;
  if (p.layered_reduction) j["layered_reduction"] = true;
  if (p.moe_chunks != 1) j["moe_chunks"] = p.moe_chunks;  // absent: one all-to-all each way
  if (p.moe_a2a_node_ranks != 0) j["moe_a2a_node_ranks"] = p.moe_a2a_node_ranks;  // absent: flat
  if (p.sparse_embedding_gradient) j["sparse_embedding_gradient"] = true;         // absent: dense
  if (!p.expert_layouts.empty())  // absent: every MoE layer's experts sharded over TP
    j["expert_layout"] = spec::expert_layout_names(p.expert_layouts);
  // Offload: absent when off (and in plans stored before it was kept).
  if (p.offload_activations) j["offload_activations"] = true;
  if (p.offload_optimizer) j["offload_optimizer"] = true;
  if (record == PlanRecord::tuner) j["global_batch"] = p.global_batch;
  return j;
}

spec::ParallelPlan plan_from_json(const nlohmann::json& j, std::string& vocab_label,
                                  PlanRecord record) {
  const bool training = record == PlanRecord::training;
  try {
    spec::ParallelPlan p;
    p.tp = j.at("tp");
    p.pp = j.at("pp");
    p.dp = j.at("dp");
    p.ep = j.at("ep");
    p.chunks = j.at("chunks");
    p.micro_batch_size = j.at("micro_batch_size");
    p.microbatches = j.at("microbatches");
    if (!training) p.global_batch = j.at("global_batch");
    p.schedule = j.at("schedule");
    vocab_label = j.at("vocab");
    // A tuner plan may say "redis" or "auto", the search's labels for its uneven layer splits:
    // no vocabulary parallelism (the layer split says where the layers went).
    if (training || (vocab_label != "redis" && vocab_label != "auto"))
      p.vocab = schedule::parse_vocab_mode(vocab_label);
    // Training runs stored before these were kept do not say: none, false and the even split.
    if (!training || j.contains("layer_split"))
      p.layer_split = j.at("layer_split").get<std::vector<int>>();
    if (!training || j.contains("recompute"))
      p.recompute = spec::parse_recompute(j.at("recompute").get<std::string>());
    if (j.contains("stage_recompute"))
      for (const std::string& mode : j.at("stage_recompute").get<std::vector<std::string>>())
        p.stage_recompute.push_back(spec::parse_recompute(mode));
    if (!training || j.contains("sequence_parallel"))
      p.sequence_parallel = j.at("sequence_parallel");
    p.zero_stage = j.at("zero_stage");
    p.offload_activations = j.value("offload_activations", false);
    p.offload_optimizer = j.value("offload_optimizer", false);
    // Plans stored before placement was kept ran in the default order on the cluster as listed.
    if (j.contains("rank_order"))
      p.rank_order = spec::parse_rank_order(j.at("rank_order").get<std::string>());
    if (j.contains("node_group_order"))
      p.node_group_order = j.at("node_group_order").get<std::vector<int>>();
    if (j.contains("stage_tp")) p.stage_tp = j.at("stage_tp").get<std::vector<int>>();
    p.slices = j.value("slices", 0);
    if (j.contains("slice_tokens")) p.slice_tokens = j.at("slice_tokens").get<std::vector<int>>();
    if (j.contains("skip_ratio")) p.skip_ratio = j.at("skip_ratio").get<double>();
    p.layered_reduction = j.value("layered_reduction", false);
    p.moe_chunks = j.value("moe_chunks", 1);
    p.moe_a2a_node_ranks = j.value("moe_a2a_node_ranks", 0);
    p.sparse_embedding_gradient = j.value("sparse_embedding_gradient", false);
    if (j.contains("expert_layout"))
      for (const std::string& l : j.at("expert_layout").get<std::vector<std::string>>())
        p.expert_layouts.push_back(spec::parse_expert_layout(l));
    if (training) spec::apply_defaults(p);
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string(training ? "stored training plan: " : "stored plan: ") + e.what());
  }
}

nlohmann::json model_to_json(const spec::ModelSpec& m) {
  return {{"name", m.name},
          {"layers", m.layers},
          {"hidden", m.hidden},
          {"heads", m.heads},
          {"kv_heads", m.kv_heads},
          {"ffn_hidden", m.ffn_hidden},
          {"vocab", m.vocab},
          {"seq_len", m.seq_len},
          {"experts", m.experts},
          {"top_k", m.top_k},
          {"moe_every", m.moe_every},
          {"activation", std::string(spec::activation_name(m.activation))},
          {"tied_embeddings", m.tied_embeddings},
          {"vocab_divisible_by", m.vocab_divisible_by}};
}

spec::ModelSpec model_from_json(const nlohmann::json& j) {
  try {
    spec::ModelSpec m;
    m.name = j.value("name", "");
    m.layers = j.at("layers");
    m.hidden = j.at("hidden");
    m.heads = j.at("heads");
    m.kv_heads = j.at("kv_heads");
    m.ffn_hidden = j.at("ffn_hidden");
    m.vocab = j.at("vocab");
    m.seq_len = j.at("seq_len");
    m.experts = j.at("experts");
    m.top_k = j.at("top_k");
    m.moe_every = j.at("moe_every");
    m.activation = spec::parse_activation(j.at("activation").get<std::string>());
    m.tied_embeddings = j.value("tied_embeddings", false);
    // Runs stored before padding rows existed had none.
    m.vocab_divisible_by = j.value("vocab_divisible_by", std::int64_t{1});
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("stored model: ") + e.what());
  }
}

nlohmann::json trial_json(const TrialTarget& t, const spec::ParallelPlan& plan,
                          const std::string& vocab_label) {
  nlohmann::json j = {{"model", t.model},
                      {"hardware", t.hardware},
                      {"gpus", t.gpus},
                      {"nodes_of", t.nodes_of},
                      {"global_batch", t.global_batch},
                      {"seq", t.seq},
                      {"plan", plan_to_json(plan, vocab_label)}};
  if (!t.cluster.empty()) j["cluster"] = t.cluster;  // trials stored before clusters had none
  return j;
}

void read_trial_json(const nlohmann::json& j, TrialTarget& t, spec::ParallelPlan& plan,
                     std::string& vocab_label) {
  try {
    t.model = j.at("model");
    t.cluster = j.value("cluster", std::string());
    t.hardware = j.at("hardware");
    t.gpus = j.at("gpus");
    t.nodes_of = j.at("nodes_of");
    t.global_batch = j.at("global_batch");
    t.seq = j.at("seq");
    plan = plan_from_json(j.at("plan"), vocab_label);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("stored trial: ") + e.what());
  }
}

nlohmann::json training_plan_json(const spec::ModelSpec& model, const spec::ParallelPlan& p,
                                  int steps, std::uint64_t seed, const TrainingEngine& engine) {
  nlohmann::json j =
      plan_to_json(p, std::string(schedule::vocab_mode_name(p.vocab)), PlanRecord::training);
  j["model"] = model.name;
  j["backend"] = std::string(spec::engine_backend_name(engine.backend));
  j["precision"] = std::string(spec::engine_precision_name(engine.precision));
  j["attention"] = std::string(spec::engine_attention_name(engine.attention));
  j["steps"] = steps;
  j["seed"] = seed;
  j["time_unit"] = "s";
  if (engine.gpus > 0) j["gpus"] = engine.gpus;
  if (engine.backend == spec::EngineBackend::cuda &&
      engine.precision == spec::EnginePrecision::bf16)
    j["gemm_inputs"] = engine.gemm_inputs_in_gemm ? "in-gemm" : "copies";
  if (engine.gelu_epilogue) j["gelu_epilogue"] = true;
  return j;
}

TrainingEngine training_engine_from_json(const nlohmann::json& j) {
  TrainingEngine e;
  for (const char* key : {"backend", "precision", "attention"}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_string())
      throw InputError(std::string("training plan: ") + key + " is not a string");
    const std::string text = j[key].get<std::string>();
    try {
      if (std::string(key) == "backend")
        e.backend = spec::parse_engine_backend(text);
      else if (std::string(key) == "precision")
        e.precision = spec::parse_engine_precision(text);
      else
        e.attention = spec::parse_engine_attention(text);
    } catch (const SpecError& err) {
      throw InputError(std::string("training plan: ") + err.what());
    }
  }
  // Runs stored before "attention" was kept ran the defaults of those days: flash on cuda (in
  // either precision), stored on the cpu.
  if (!j.contains("attention"))
    e.attention = e.backend == spec::EngineBackend::cuda ? spec::EngineAttention::flash
                                                         : spec::EngineAttention::stored;
  if (const std::string problem =
          spec::engine_attention_problem(e.attention, e.backend, e.precision);
      !problem.empty())
    throw InputError("training plan: attention " + problem);
  if (j.contains("gpus")) {
    if (!j["gpus"].is_number_integer() || j["gpus"].get<long long>() < 0 ||
        j["gpus"].get<long long>() > (1 << 20))
      throw InputError("training plan: gpus is not a count of GPUs");
    e.gpus = j["gpus"].get<int>();
  }
  if (j.contains("gemm_inputs")) {
    const nlohmann::json& g = j["gemm_inputs"];
    if (!g.is_string() || (g != "copies" && g != "in-gemm"))
      throw InputError("training plan: gemm_inputs is not copies or in-gemm");
    if (e.backend != spec::EngineBackend::cuda || e.precision != spec::EnginePrecision::bf16)
      throw InputError("training plan: gemm_inputs without backend cuda and precision bf16");
    e.gemm_inputs_in_gemm = g == "in-gemm";
  }
  if (j.contains("gelu_epilogue")) {
    if (!j["gelu_epilogue"].is_boolean())
      throw InputError("training plan: gelu_epilogue is not true or false");
    e.gelu_epilogue = j["gelu_epilogue"].get<bool>();
    if (e.gelu_epilogue && e.backend != spec::EngineBackend::cuda)
      throw InputError("training plan: gelu_epilogue without backend cuda");
  }
  return e;
}

spec::ParallelPlan training_plan_from_json(const nlohmann::json& j) {
  std::string vocab_label;
  return plan_from_json(j, vocab_label, PlanRecord::training);
}

nlohmann::json training_specs_json(const spec::ModelSpec& model) {
  return {{"model", model_to_json(model)}};
}

std::string training_run_name(const spec::ModelSpec& model, const spec::ParallelPlan& plan) {
  // A model file's name may hold any TOML string: the default name is one the store takes.
  return printable_text(model.name) + " tp=" + std::to_string(plan.tp) +
         " pp=" + std::to_string(plan.pp) + " dp=" + std::to_string(plan.dp) + " " + plan.schedule;
}

nlohmann::json training_summary_json(double iteration_seconds, double tokens_per_s,
                                     const std::vector<double>& losses) {
  return {{"iteration_time", iteration_seconds},
          {"time_unit", "s"},
          {"tokens_per_s", tokens_per_s},
          {"losses", losses}};
}

}  // namespace pipetune::db
