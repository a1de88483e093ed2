#include "engine/spec/run_spec.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "engine/errors.hpp"
#include "engine/spec/presets.hpp"
#include "engine/spec/table_loaders.hpp"
#include "engine/spec/toml_reader.hpp"
#include "engine/spec/validate.hpp"

namespace fs = std::filesystem;

namespace pipetune::spec {

namespace {

using detail::TableContext;
using detail::TableReader;

// `key = "name or path"` or an inline table `[key]`.
template <typename Spec, typename LoadTable>
Spec read_named_or_table(const TableReader& r, std::string_view key, const toml::node* node,
                         PresetKind kind, const TableContext& ctx, LoadTable&& load_table) {
  if (node == nullptr) {
    throw SpecError({std::string(key)}, ctx.source, "missing key '" + std::string(key) + "'");
  }
  if (node->is_string()) {
    fs::path file;
    try {
      file = resolve_preset(kind, node->as_string()->get(), ctx.base_dir);
    } catch (const SpecError& e) {
      r.fail(key, e.what());
    }
    return load_table(detail::parse_toml_file(file), detail::file_context(file));
  }
  if (node->is_table()) {
    const TableContext inner{ctx.source, std::string(key) + ".", ctx.base_dir, ""};
    return load_table(*node->as_table(), inner);
  }
  r.fail(key, "expected a preset name, a path or a table, got " +
                  std::string(detail::node_type_phrase(*node)));
}

// A rule the run breaks, at the line of the first of its plan fields that the file gives
// ("r.toml:5: key 'plan.tp': tp=3 does not divide heads=4"), else at the file.
[[noreturn]] void fail_at_field(const SpecError& e, const toml::table* plan_table,
                                const std::string& source) {
  constexpr std::string_view kPlan = "plan.";
  for (const std::string& key : e.fields()) {
    if (plan_table == nullptr || key.rfind(kPlan, 0) != 0) continue;
    if (const toml::node* node = plan_table->get(std::string_view(key).substr(kPlan.size())))
      throw SpecError(source + ":" + std::to_string(node->source().begin.line) + ": key '" + key +
                          "': " + e.what(),
                      e);
  }
  throw SpecError(source + ": " + e.what(), e);
}

// An array of non-negative integers (layer_split, node_group_order); empty when absent.
std::vector<int> read_int_array(TableReader& r, const char* key) {
  std::vector<int> out;
  const toml::array* array = r.array(key);
  if (array == nullptr) return out;
  for (const toml::node& elem : *array) {
    if (!elem.is_integer()) {
      r.fail(key,
             "expected an array of integers, found " + std::string(detail::node_type_phrase(elem)));
    }
    const std::int64_t v = elem.as_integer()->get();
    if (v < 0 || v > std::numeric_limits<int>::max()) {
      r.fail(key, "entry " + std::to_string(v) + " is out of range");
    }
    out.push_back(static_cast<int>(v));
  }
  return out;
}

// `stage_recompute = ["full", "none"]`: one mode name per pipeline rank.
std::vector<Recompute> read_stage_recompute(TableReader& r) {
  std::vector<Recompute> modes;
  const toml::array* array = r.array("stage_recompute");
  if (array == nullptr) return modes;
  for (const toml::node& elem : *array) {
    if (!elem.is_string()) {
      r.fail("stage_recompute", "expected an array of mode names, found " +
                                    std::string(detail::node_type_phrase(elem)));
    }
    const std::string& name = elem.as_string()->get();
    try {
      modes.push_back(parse_recompute(name));
    } catch (const SpecError&) {
      r.fail("stage_recompute", "entry " + std::to_string(modes.size()) + ": unknown mode '" +
                                    name + "' (valid: none, selective, full)");
    }
  }
  return modes;
}

// `expert_layout = "whole"` (every MoE layer) or `["whole", "sharded"]` (one per MoE layer).
std::vector<ExpertLayout> read_expert_layouts(TableReader& r) {
  std::vector<ExpertLayout> layouts;
  const toml::node* node = r.node("expert_layout");
  if (node == nullptr) return layouts;
  const auto parse = [&](const toml::node& elem, bool in_array) {
    if (!elem.is_string())
      r.fail("expert_layout", std::string(in_array ? "expected an array of layout names"
                                                   : "expected a layout name or an array of them") +
                                  ", found " + std::string(detail::node_type_phrase(elem)));
    const std::string& name = elem.as_string()->get();
    try {
      layouts.push_back(parse_expert_layout(name));
    } catch (const SpecError&) {
      r.fail("expert_layout",
             (in_array ? "entry " + std::to_string(layouts.size()) + ": " : std::string()) +
                 "unknown layout '" + name + "' (valid: sharded, whole, dedup, adaptive)");
    }
  };
  if (const toml::array* array = node->as_array()) {
    for (const toml::node& elem : *array) parse(elem, true);
  } else {
    parse(*node, false);
  }
  return layouts;
}

// The [plan] table; dp and chunks are left 0 when absent, for the caller to derive.
ParallelPlan read_plan(const toml::table& table, const std::string& source) {
  TableReader r(table, source, "plan.");
  ParallelPlan p;
  p.dp = 0;
  p.chunks = 0;
  if (auto v = r.positive_int("tp")) p.tp = *v;
  if (auto v = r.positive_int("pp")) p.pp = *v;
  if (auto v = r.positive_int("dp")) p.dp = *v;
  if (auto v = r.positive_int("ep")) p.ep = *v;
  if (auto v = r.positive_int("chunks")) p.chunks = *v;
  if (auto v = r.positive_int("micro_batch_size")) p.micro_batch_size = *v;
  if (auto v = r.positive_int("microbatches")) p.microbatches = *v;
  if (auto v = r.positive_int64("global_batch")) p.global_batch = *v;
  if (auto v = r.string("schedule")) p.schedule = *v;
  if (auto v = r.string("vocab")) {
    try {
      p.vocab = schedule::parse_vocab_mode(*v);
    } catch (const InputError& e) {
      r.fail("vocab", e.what());
    }
  }
  p.layer_split = read_int_array(r, "layer_split");
  if (auto v = r.string("recompute")) {
    try {
      p.recompute = parse_recompute(*v);
    } catch (const SpecError& e) {
      r.fail("recompute", e.what());
    }
  }
  p.stage_recompute = read_stage_recompute(r);
  if (auto v = r.boolean("sequence_parallel")) p.sequence_parallel = *v;
  if (auto v = r.boolean("offload_activations")) p.offload_activations = *v;
  if (auto v = r.boolean("offload_optimizer")) p.offload_optimizer = *v;
  if (auto v = r.int32("zero_stage")) {
    if (*v < 0 || *v > 3) r.fail("zero_stage", "must be 0..3, got " + std::to_string(*v));
    p.zero_stage = *v;
  }
  if (auto v = r.int32("group_size")) {
    if (*v < 0) r.fail("group_size", "must not be negative, got " + std::to_string(*v));
    p.group_size = *v;
  }
  if (auto v = r.int32("slices")) {
    if (*v < 1) r.fail("slices", "must be positive, got " + std::to_string(*v));
    p.slices = *v;
  }
  p.slice_tokens = read_int_array(r, "slice_tokens");
  if (auto v = r.number("skip_ratio")) {
    if (!(*v >= 0.0 && *v < 1.0))
      r.fail("skip_ratio", "must be at least 0 and below 1, got " + std::to_string(*v));
    p.skip_ratio = *v;
  }
  if (auto v = r.boolean("layered_reduction")) p.layered_reduction = *v;
  if (auto v = r.int32("moe_chunks")) {
    if (*v < 1) r.fail("moe_chunks", "must be positive, got " + std::to_string(*v));
    p.moe_chunks = *v;
  }
  if (auto v = r.int32("moe_a2a_node_ranks")) {
    if (*v < 0) r.fail("moe_a2a_node_ranks", "must be 0 or more, got " + std::to_string(*v));
    p.moe_a2a_node_ranks = *v;
  }
  p.expert_layouts = read_expert_layouts(r);
  if (auto v = r.boolean("sparse_embedding_gradient")) p.sparse_embedding_gradient = *v;
  for (int t : p.slice_tokens)
    if (t < 1)
      r.fail("slice_tokens", "entry " + std::to_string(t) + " is not a slice (>= 1 token)");
  if (auto v = r.string("rank_order")) {
    try {
      p.rank_order = parse_rank_order(*v);
    } catch (const SpecError& e) {
      r.fail("rank_order", e.what());
    }
  }
  p.node_group_order = read_int_array(r, "node_group_order");
  p.stage_tp = read_int_array(r, "stage_tp");
  for (int t : p.stage_tp)
    if (t < 1) r.fail("stage_tp", "entry " + std::to_string(t) + " is not a TP degree (>= 1)");
  // tp is the first stage's: taken from stage_tp when the file leaves it out.
  if (!p.stage_tp.empty() && !table.contains("tp")) p.tp = p.stage_tp.front();
  r.reject_unknown();
  return p;
}

RunSpec read_run(const toml::table& table, const TableContext& ctx, RunCheck check) {
  TableReader r(table, ctx.source);
  RunSpec run;
  run.source = ctx.source;
  run.name = r.string("name").value_or(ctx.default_name.empty() ? "run" : ctx.default_name);
  run.description = r.string("description").value_or("");
  if (const auto backend = r.string("backend")) {
    try {
      run.backend = parse_engine_backend(*backend);
    } catch (const SpecError& e) {
      r.fail("backend", e.what());
    }
  }
  if (const auto precision = r.string("precision")) {
    try {
      run.precision = parse_engine_precision(*precision);
    } catch (const SpecError& e) {
      r.fail("precision", e.what());
    }
    if (run.precision == EnginePrecision::bf16 && run.backend != EngineBackend::cuda)
      r.fail("precision", "bf16 is for backend = \"cuda\" (the cpu backend computes in fp32)");
  }
  if (const auto attention = r.string("attention")) {
    try {
      run.attention = parse_engine_attention(*attention);
    } catch (const SpecError& e) {
      r.fail("attention", e.what());
    }
    const std::string problem =
        engine_attention_problem(*run.attention, run.backend, run.precision);
    if (!problem.empty()) r.fail("attention", problem);
  }
  if (const auto u = r.number("moe_imbalance")) {
    if (const std::string problem = moe_imbalance_problem(*u); !problem.empty())
      r.fail("moe_imbalance", problem);
    run.moe_imbalance = *u;
  }
  const toml::node* model_node = r.node("model");
  const toml::node* cluster_node = r.node("cluster");
  const toml::table* plan_table = r.table("plan");
  r.reject_unknown();  // before loading anything, so a misspelt key is the error reported
  run.model = read_named_or_table<ModelSpec>(r, "model", model_node, PresetKind::Models, ctx,
                                             detail::read_model_table);
  run.cluster = read_named_or_table<ClusterSpec>(r, "cluster", cluster_node, PresetKind::Clusters,
                                                 ctx, detail::read_cluster_table);
  run.global_batch_given = plan_table != nullptr && plan_table->contains("global_batch");
  run.plan = plan_table != nullptr ? read_plan(*plan_table, ctx.source) : [] {
    ParallelPlan p;
    p.dp = p.chunks = 0;
    return p;
  }();

  ParallelPlan& plan = run.plan;
  if (plan.dp == 0) {
    // 64-bit: tp and pp are each only checked positive here, so their product may pass int.
    std::int64_t tp_pp = std::int64_t{plan.tp} * plan.pp;
    if (!plan.stage_tp.empty()) {  // per-stage layouts: stage s holds stage_tp[s] * dp devices
      tp_pp = 0;
      for (int t : plan.stage_tp) tp_pp += t;
    }
    const char* what = plan.stage_tp.empty() ? "tp*pp=" : "sum(stage_tp)=";
    if (tp_pp <= 0 || run.cluster.devices % tp_pp != 0) {
      throw SpecError({"plan.dp", plan.stage_tp.empty() ? "plan.tp" : "plan.stage_tp", "plan.pp",
                       "cluster.devices"},
                      ctx.source + ": plan.dp is not given and the cluster's " +
                          std::to_string(run.cluster.devices) + " devices are not divisible by " +
                          what + std::to_string(tp_pp));
    }
    plan.dp = static_cast<int>(run.cluster.devices / tp_pp);
  }
  apply_defaults(plan);  // chunks left 0 become the schedule's default
  if (check == RunCheck::Full) {
    try {
      validate(run);
    } catch (const SpecError& e) {
      fail_at_field(e, plan_table, ctx.source);
    }
  }
  return run;
}

}  // namespace

std::string moe_imbalance_problem(double u) {
  if (u >= 1.0 && std::isfinite(u)) return "";
  return "must be a finite number >= 1 (the busiest expert-parallel rank's tokens over the "
         "mean), got " +
         std::to_string(u);
}

std::string embedding_rows_problem(double factor) {
  if (factor > 0.0 && std::isfinite(factor)) return "";
  return "must be a finite number above 0 (the touched rows over the uniform estimate), got " +
         std::to_string(factor);
}

std::string_view engine_backend_name(EngineBackend b) {
  return b == EngineBackend::cuda ? "cuda" : "cpu";
}

std::string_view engine_precision_name(EnginePrecision p) {
  return p == EnginePrecision::bf16 ? "bf16" : "fp32";
}

EnginePrecision parse_engine_precision(std::string_view name) {
  if (name == "fp32") return EnginePrecision::fp32;
  if (name == "bf16") return EnginePrecision::bf16;
  throw SpecError("unknown precision '" + std::string(name) + "' (valid: fp32, bf16)");
}

std::string_view engine_attention_name(EngineAttention a) {
  switch (a) {
    case EngineAttention::stored:
      return "stored";
    case EngineAttention::flash:
      return "flash";
    case EngineAttention::flash_tc:
      return "flash-tc";
    case EngineAttention::flash_mma:
      return "flash-mma";
  }
  return "flash";
}

namespace {
constexpr EngineAttention kEveryAttention[] = {EngineAttention::stored, EngineAttention::flash,
                                               EngineAttention::flash_tc,
                                               EngineAttention::flash_mma};
}  // namespace

std::string engine_attention_names() {
  std::string names;
  for (const EngineAttention a : kEveryAttention)
    names += (names.empty() ? "" : ", ") + std::string(engine_attention_name(a));
  return names;
}

EngineAttention parse_engine_attention(std::string_view name) {
  for (const EngineAttention a : kEveryAttention)
    if (name == engine_attention_name(a)) return a;
  throw SpecError("unknown attention '" + std::string(name) +
                  "' (valid: " + engine_attention_names() + ")");
}

EngineAttention default_engine_attention(EngineBackend backend, EnginePrecision precision) {
  if (backend == EngineBackend::cpu) return EngineAttention::stored;
  return precision == EnginePrecision::bf16 ? EngineAttention::flash_mma : EngineAttention::flash;
}

std::string engine_attention_problem(EngineAttention attention, EngineBackend backend,
                                     EnginePrecision precision) {
  if (attention != EngineAttention::flash_tc && attention != EngineAttention::flash_mma) return {};
  if (backend == EngineBackend::cuda && precision == EnginePrecision::bf16) return {};
  return std::string(engine_attention_name(attention)) +
         " needs backend cuda and precision bf16 (bf16 products on tensor cores), not " +
         std::string(engine_backend_name(backend)) + " " +
         std::string(engine_precision_name(precision));
}

EngineAttention engine_attention(const RunSpec& run) {
  return run.attention.value_or(default_engine_attention(run.backend, run.precision));
}

EngineBackend parse_engine_backend(std::string_view name) {
  if (name == "cpu") return EngineBackend::cpu;
  if (name == "cuda") return EngineBackend::cuda;
  throw SpecError("unknown backend '" + std::string(name) + "' (valid: cpu, cuda)");
}

RunSpec load_run(std::string_view name_or_path, RunCheck check) {
  const fs::path file = resolve_preset(PresetKind::Runs, name_or_path);
  return read_run(detail::parse_toml_file(file), detail::file_context(file), check);
}

RunSpec parse_run(std::string_view toml_text, std::string_view source, const fs::path& base_dir,
                  RunCheck check) {
  const TableContext ctx{std::string(source), "", base_dir,
                         fs::path(std::string(source)).stem().string()};
  return read_run(detail::parse_toml_text(toml_text, source), ctx, check);
}

void validate(const RunSpec& run) {
  validate(run.model, run.cluster, run.plan);
}

}  // namespace pipetune::spec
