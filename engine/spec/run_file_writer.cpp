#include "engine/spec/run_file_writer.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "engine/errors.hpp"
#include "engine/spec/hardware_toml.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/presets.hpp"
#include "engine/spec/spec_file.hpp"
#include "engine/spec/toml_text.hpp"

namespace pipetune::spec {

namespace {

using detail::toml_number;

std::string text(const std::string& value, const std::string& key) {
  return detail::toml_string(value, "run file key '" + key + "'");
}

// Whether `spec` is exactly the preset of its own name (then the file names the preset).
template <typename Spec, typename Load>
bool is_preset(PresetKind kind, const std::string& name, const Spec& spec, Load&& load) {
  if (name.empty() || is_preset_path(name)) return false;
  try {
    const std::vector<std::string> names = list_presets(kind);
    if (std::find(names.begin(), names.end(), name) == names.end()) return false;
    return load(name) == spec;
  } catch (const InputError&) {
    return false;  // a preset that does not load is no preset to name
  }
}

bool is_model_preset(const ModelSpec& m) {
  return is_preset(PresetKind::Models, m.name, m,
                   [](const std::string& n) { return load_model(n); });
}

bool is_cluster_preset(const ClusterSpec& c) {
  return is_preset(PresetKind::Clusters, c.name, c,
                   [](const std::string& n) { return load_cluster(n); });
}

bool is_hardware_preset(const HardwareSpec& h) {
  return is_preset(PresetKind::Hardware, h.name, h,
                   [](const std::string& n) { return load_hardware(n); });
}

// Keys with a positive value only: 0 there means "derived", which the reader does when absent.
void positive_key(std::ostream& out, const char* key, std::int64_t value) {
  if (value > 0) out << key << " = " << value << "\n";
}

void write_model_table(std::ostream& out, const ModelSpec& m) {
  out << "\n[model]\n";
  out << "name = " << text(m.name, "model.name") << "\n";
  out << "description = " << text(m.description, "model.description") << "\n";
  out << "layers = " << m.layers << "\n";
  out << "hidden = " << m.hidden << "\n";
  out << "heads = " << m.heads << "\n";
  positive_key(out, "kv_heads", m.kv_heads);
  positive_key(out, "ffn_hidden", m.ffn_hidden);
  out << "vocab = " << m.vocab << "\n";
  out << "seq_len = " << m.seq_len << "\n";
  out << "experts = " << m.experts << "\n";
  out << "top_k = " << m.top_k << "\n";
  out << "moe_every = " << m.moe_every << "\n";
  out << "activation = \"" << activation_name(m.activation) << "\"\n";
  out << "tied_embeddings = " << (m.tied_embeddings ? "true" : "false") << "\n";
  out << "vocab_divisible_by = " << m.vocab_divisible_by << "\n";
}

void write_cluster_table(std::ostream& out, const ClusterSpec& c) {
  const bool hardware_preset = is_hardware_preset(c.hardware);
  out << "\n[cluster]\n";
  out << "name = " << text(c.name, "cluster.name") << "\n";
  out << "description = " << text(c.description, "cluster.description") << "\n";
  if (hardware_preset) out << "hardware = " << text(c.hardware.name, "cluster.hardware") << "\n";
  out << "devices = " << c.devices << "\n";
  out << "devices_per_node = " << c.devices_per_node << "\n";
  out << "intra_node_bandwidth = " << toml_number(c.intra_node_bandwidth) << "\n";
  out << "inter_node_bandwidth = " << toml_number(c.inter_node_bandwidth) << "\n";
  out << "intra_node_latency = " << toml_number(c.intra_node_latency) << "\n";
  out << "inter_node_latency = " << toml_number(c.inter_node_latency) << "\n";
  for (const NodeGroup& g : c.node_groups) {
    out << "\n[[cluster.node_groups]]\n";
    out << "nodes = " << g.nodes << "\n";
    out << "inter_node_bandwidth = " << toml_number(g.inter_node_bandwidth) << "\n";
  }
  for (const NodeFault& f : c.faults) {
    out << "\n[[cluster.faults]]\n";
    out << "node = " << f.node << "\n";
    if (f.slowdown != 1.0) out << "slowdown = " << toml_number(f.slowdown) << "\n";
    if (f.fail_at >= 0.0) {
      out << "fail_at = " << toml_number(f.fail_at) << "\n";
      out << "restart_delay = " << toml_number(f.restart_delay) << "\n";
    }
  }
  if (!hardware_preset) out << "\n" << hardware_toml_table(c.hardware, "cluster.hardware");
}

// `key = [a, b, ...]`, nothing when empty (the key's default).
void int_array_key(std::ostream& out, const char* key, const std::vector<int>& values) {
  if (values.empty()) return;
  out << key << " = [";
  for (std::size_t i = 0; i < values.size(); ++i) out << (i == 0 ? "" : ", ") << values[i];
  out << "]\n";
}

void write_plan_table(std::ostream& out, const RunSpec& run) {
  const ParallelPlan& p = run.plan;
  out << "\n[plan]\n";
  out << "tp = " << p.tp << "\n";
  out << "pp = " << p.pp << "\n";
  positive_key(out, "dp", p.dp);
  out << "ep = " << p.ep << "\n";
  positive_key(out, "chunks", p.chunks);
  out << "micro_batch_size = " << p.micro_batch_size << "\n";
  positive_key(out, "microbatches", p.microbatches);
  if (run.global_batch_given) out << "global_batch = " << p.global_batch << "\n";
  out << "schedule = " << text(p.schedule, "plan.schedule") << "\n";
  out << "vocab = \"" << schedule::vocab_mode_name(p.vocab) << "\"\n";
  int_array_key(out, "layer_split", p.layer_split);
  out << "recompute = \"" << recompute_name(p.recompute) << "\"\n";
  if (!p.stage_recompute.empty()) {
    out << "stage_recompute = [";
    for (std::size_t i = 0; i < p.stage_recompute.size(); ++i)
      out << (i == 0 ? "\"" : ", \"") << recompute_name(p.stage_recompute[i]) << "\"";
    out << "]\n";
  }
  out << "sequence_parallel = " << (p.sequence_parallel ? "true" : "false") << "\n";
  if (p.offload_activations) out << "offload_activations = true\n";
  if (p.offload_optimizer) out << "offload_optimizer = true\n";
  out << "zero_stage = " << p.zero_stage << "\n";
  out << "group_size = " << p.group_size << "\n";
  if (p.slices > 0) out << "slices = " << p.slices << "\n";
  int_array_key(out, "slice_tokens", p.slice_tokens);
  if (p.skip_ratio) {  // exactly: 17 digits
    std::ostringstream v;
    v << std::setprecision(17) << *p.skip_ratio;
    out << "skip_ratio = " << v.str() << "\n";
  }
  if (p.layered_reduction) out << "layered_reduction = true\n";
  if (p.moe_chunks != 1) out << "moe_chunks = " << p.moe_chunks << "\n";
  if (p.moe_a2a_node_ranks != 0) out << "moe_a2a_node_ranks = " << p.moe_a2a_node_ranks << "\n";
  if (p.sparse_embedding_gradient) out << "sparse_embedding_gradient = true\n";
  if (!p.expert_layouts.empty())
    out << "expert_layout = " << expert_layouts_toml(p.expert_layouts) << "\n";
  out << "rank_order = \"" << rank_order_name(p.rank_order) << "\"\n";
  int_array_key(out, "node_group_order", p.node_group_order);
  int_array_key(out, "stage_tp", p.stage_tp);
}

// The checks load_run makes, so that no file is written that would not load.
void check_loadable(const RunSpec& run) {
  if (run.precision == EnginePrecision::bf16 && run.backend != EngineBackend::cuda)
    throw SpecError("precision bf16 is for backend cuda (the cpu backend computes in fp32)");
  if (run.attention) {
    const std::string problem =
        engine_attention_problem(*run.attention, run.backend, run.precision);
    if (!problem.empty()) throw SpecError(problem);
  }
  validate(run);
}

}  // namespace

std::string run_file_toml(const RunSpec& run) {
  check_loadable(run);
  std::ostringstream out;
  out << "# Written by pipetune: a run file for `pipetune train --config`.\n";
  out << "name = " << text(run.name, "name") << "\n";
  out << "description = " << text(run.description, "description") << "\n";
  out << "backend = \"" << engine_backend_name(run.backend) << "\"\n";
  out << "precision = \"" << engine_precision_name(run.precision) << "\"\n";
  if (run.attention) out << "attention = \"" << engine_attention_name(*run.attention) << "\"\n";
  if (run.moe_imbalance != 1.0) {  // exactly: 17 digits
    std::ostringstream u;
    u << std::setprecision(17) << run.moe_imbalance;
    out << "moe_imbalance = " << u.str() << "\n";
  }
  const bool model_preset = is_model_preset(run.model);
  const bool cluster_preset = is_cluster_preset(run.cluster);
  if (model_preset) out << "model = " << text(run.model.name, "model") << "\n";
  if (cluster_preset) out << "cluster = " << text(run.cluster.name, "cluster") << "\n";
  if (!model_preset) write_model_table(out, run.model);
  if (!cluster_preset) write_cluster_table(out, run.cluster);
  write_plan_table(out, run);
  return out.str();
}

void write_run_file(const RunSpec& run, const std::string& path) {
  write_spec_file(path, run_file_toml(run));
}

}  // namespace pipetune::spec
