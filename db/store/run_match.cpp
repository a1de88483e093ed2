#include "db/store/run_match.hpp"

#include <nlohmann/json.hpp>
#include <vector>

#include "db/store/record_json.hpp"
#include "db/store/run_layout.hpp"
#include "db/store/run_name.hpp"
#include "engine/errors.hpp"
#include "engine/schedule/schedule.hpp"

namespace pipetune::db {

namespace {

using nlohmann::json;

std::string shown(const json& v) {
  if (v.is_null()) return "not recorded";
  if (v.is_string()) return printable_text(v.get<std::string>());
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string differ(const std::string& what, const json& stored, const json& given) {
  return what + ": " + shown(stored) + " vs " + shown(given);
}

json object_of(const std::string& text, const RunRecord& run, const char* what) {
  if (text.empty()) return json::object();
  json j = json::parse(text, nullptr, false);
  if (!j.is_object())
    throw InputError("run " + std::to_string(run.id) + ": its stored " + what +
                     " is not a JSON object");
  return j;
}

std::string model_difference(const json& specs, const spec::ModelSpec& model) {
  const json want = model_to_json(model);
  const json recorded = specs.contains("model") ? specs["model"] : json();
  if (recorded.is_string())  // older workspaces kept the name only
    return recorded == want["name"] ? "" : differ("model", recorded, want["name"]);
  if (!recorded.is_object()) return differ("model", nullptr, want["name"]);
  const json got = model_to_json(model_from_json(recorded));  // older fields take their defaults
  if (got["name"] != want["name"]) return differ("model", got["name"], want["name"]);
  for (const auto& [key, value] : want.items())
    if (got[key] != value) return differ("model " + key, got[key], value);
  return "";
}

std::string plan_difference(const json& plan, const spec::RunSpec& run) {
  if (plan.contains("time_unit") && plan["time_unit"] != "s")
    return differ("time unit", plan["time_unit"], "s");
  const json want = plan_to_json(run.plan, std::string(schedule::vocab_mode_name(run.plan.vocab)));
  for (const char* key : {"tp", "pp", "dp", "ep", "schedule", "chunks", "vocab", "microbatches",
                          "micro_batch_size", "zero_stage"})
    if (!plan.contains(key) || plan[key] != want[key])
      return differ(key, plan.value(key, json()), want[key]);
  // Kept by runs stored since they were: older ones are taken at their word.
  for (const char* key : {"recompute", "sequence_parallel"})
    if (plan.contains(key) && plan[key] != want[key]) return differ(key, plan[key], want[key]);
  // Per-stage recomputation: absent in runs without it (and in runs stored before it was kept).
  if (const json none = json::array();
      plan.value("stage_recompute", none) != want.value("stage_recompute", none))
    return differ("stage_recompute", plan.value("stage_recompute", none),
                  want.value("stage_recompute", none));
  // Per-stage layouts: absent when every stage uses tp.
  if (const json none = json::array(); plan.value("stage_tp", none) != want.value("stage_tp", none))
    return differ("stage_tp", plan.value("stage_tp", none), want.value("stage_tp", none));
  // Offload: absent when off.
  for (const char* key : {"offload_activations", "offload_optimizer"})
    if (plan.value(key, false) != want.value(key, false))
      return differ(key, plan.value(key, json(false)), want.value(key, json(false)));
  if (plan.contains("layer_split")) {
    // An empty split is the even one.
    const int groups = run.plan.layer_groups();
    const auto split = [&](const json& j) {
      return j.is_array() && j.empty() ? json(spec::even_layer_split(run.model.layers, groups)) : j;
    };
    if (split(plan["layer_split"]) != split(want["layer_split"]))
      return differ("layer_split", split(plan["layer_split"]), split(want["layer_split"]));
  }
  return "";
}

std::string hardware_difference(const RunRecord& stored, const json& plan, const json& specs,
                                const spec::RunSpec& run) {
  const spec::HardwareSpec& hardware = run.cluster.hardware;
  if (stored.kind == profiler::TraceKind::Imported)
    return specs.contains("hardware") && specs["hardware"] == hardware.name
               ? ""
               : differ("hardware", specs.value("hardware", json()), hardware.name);
  const TrainingEngine engine = training_engine_from_json(plan);
  if (engine.backend != run.backend)
    return differ("backend", spec::engine_backend_name(engine.backend),
                  spec::engine_backend_name(run.backend));
  if (engine.precision != run.precision)
    return differ("precision", spec::engine_precision_name(engine.precision),
                  spec::engine_precision_name(run.precision));
  const spec::EngineAttention attention = spec::engine_attention(run);
  if (engine.attention != attention)
    return differ("attention", spec::engine_attention_name(engine.attention),
                  spec::engine_attention_name(attention));
  // The engine ran on this machine's CPU or on a GPU: the run file's hardware is priced as one.
  const bool on_cpu = engine.backend == spec::EngineBackend::cpu;
  if (on_cpu != (hardware.device == spec::DeviceKind::Cpu))
    return "hardware: the " + std::string(spec::engine_backend_name(engine.backend)) +
           " engine vs " + hardware.name + ", a " + (on_cpu ? "GPU" : "CPU");
  return "";
}

}  // namespace

std::string unlike_time_units(const RunRecord& a, const RunRecord& b) {
  // The unit is the plan's to say: no span is needed for it.
  const std::string unit_a = run_layout(a, {}).time_unit, unit_b = run_layout(b, {}).time_unit;
  if (unit_a == unit_b) return "";
  return "run " + std::to_string(a.id) + " counts time in " + printable_text(unit_a) + ", run " +
         std::to_string(b.id) + " in " + printable_text(unit_b) + ": unlike units do not compare";
}

std::string difference_from_run_file(const RunRecord& stored, const spec::RunSpec& run) {
  if (stored.kind == profiler::TraceKind::Simulated)
    return "kind: simulated vs a measured or imported run";
  const json plan = object_of(stored.plan_json, stored, "plan");
  const json specs = object_of(stored.specs_json, stored, "specs");
  if (std::string d = model_difference(specs, run.model); !d.empty()) return d;
  if (std::string d = plan_difference(plan, run); !d.empty()) return d;
  return hardware_difference(stored, plan, specs, run);
}

}  // namespace pipetune::db
