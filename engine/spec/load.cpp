#include "engine/spec/load.hpp"

#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "engine/errors.hpp"
#include "engine/spec/presets.hpp"
#include "engine/spec/table_loaders.hpp"
#include "engine/spec/toml_reader.hpp"
#include "engine/spec/validate.hpp"

namespace fs = std::filesystem;

namespace pipetune::spec {

namespace detail {

namespace {

// `preset` chains longer than this are taken for a cycle (a.toml -> b.toml -> a.toml).
constexpr int kMaxPresetDepth = 8;

void check_depth(int depth, const TableContext& ctx) {
  if (depth > kMaxPresetDepth) {
    throw SpecError(ctx.source + ": preset chain longer than " + std::to_string(kMaxPresetDepth) +
                    " files (a cycle?)");
  }
}

// resolve_preset() with the failure reported at the key that named the preset.
fs::path resolve_at(const TableReader& r, std::string_view key, PresetKind kind,
                    const std::string& name, const TableContext& ctx) {
  try {
    return resolve_preset(kind, name, ctx.base_dir);
  } catch (const SpecError& e) {
    r.fail(key, e.what());
  }
}

template <typename Fn>
void with_source(const TableContext& ctx, Fn&& fn) {
  try {
    fn();
  } catch (const SpecError& e) {
    throw SpecError(ctx.source + ": " + e.what(), e);
  }
}

// What an error's fields put before a key of this table: its dotted name in a run file, the
// spec's name ("model.") when the table is a whole file.
std::string field_prefix(const TableContext& ctx, std::string_view spec) {
  return ctx.prefix.empty() ? std::string(spec) + "." : ctx.prefix;
}

[[noreturn]] void missing(const TableContext& ctx, std::string_view spec, std::string_view key) {
  throw SpecError({field_prefix(ctx, spec) + std::string(key)}, ctx.source,
                  "missing key '" + ctx.prefix + std::string(key) + "'");
}

// ---- models ---------------------------------------------------------------------------------

// Absent required sizes stay 0 and kv_heads / ffn_hidden stay 0 ("default"), so that a file
// overriding a preset's hidden also moves the derived defaults.
ModelSpec read_model_raw(const toml::table& table, const TableContext& ctx, int depth) {
  check_depth(depth, ctx);
  TableReader r(table, ctx.source, ctx.prefix, field_prefix(ctx, "model"));
  ModelSpec m;
  if (auto preset = r.string("preset")) {
    const fs::path file = resolve_at(r, "preset", PresetKind::Models, *preset, ctx);
    m = read_model_raw(parse_toml_file(file), file_context(file), depth + 1);
  }
  if (!ctx.default_name.empty()) m.name = ctx.default_name;
  if (auto v = r.string("name")) m.name = *v;
  if (auto v = r.string("description")) m.description = *v;
  if (auto v = r.positive_int64("layers")) m.layers = *v;
  if (auto v = r.positive_int64("hidden")) m.hidden = *v;
  if (auto v = r.positive_int64("heads")) m.heads = *v;
  if (auto v = r.positive_int64("kv_heads")) m.kv_heads = *v;
  if (auto v = r.positive_int64("ffn_hidden")) m.ffn_hidden = *v;
  if (auto v = r.positive_int64("vocab")) m.vocab = *v;
  if (auto v = r.positive_int64("seq_len")) m.seq_len = *v;
  if (auto v = r.positive_int64("experts")) m.experts = *v;
  if (auto v = r.positive_int64("top_k")) m.top_k = *v;
  if (auto v = r.positive_int64("moe_every")) m.moe_every = *v;
  if (auto v = r.string("activation")) {
    try {
      m.activation = parse_activation(*v);
    } catch (const SpecError& e) {
      r.fail("activation", e.what());
    }
  }
  if (auto v = r.boolean("tied_embeddings")) m.tied_embeddings = *v;
  if (auto v = r.positive_int64("vocab_divisible_by")) m.vocab_divisible_by = *v;
  r.reject_unknown();
  return m;
}

// ---- clusters -------------------------------------------------------------------------------

// A cluster table before defaults: what the table (and the presets it starts from) said.
struct ClusterDraft {
  std::string name;
  std::string description;
  std::optional<HardwareSpec> hardware;
  std::optional<int> nodes;
  std::optional<int> devices;
  std::optional<int> devices_per_node;
  std::optional<double> intra_node_bandwidth;
  std::optional<double> inter_node_bandwidth;
  std::optional<double> intra_node_latency;
  std::optional<double> inter_node_latency;
  std::optional<std::vector<NodeGroup>> node_groups;
  std::optional<std::vector<NodeFault>> faults;
};

// [[faults]]: node (required), slowdown, fail_at with restart_delay.
std::vector<NodeFault> read_faults(TableReader& r, const toml::array& faults,
                                   const TableContext& ctx) {
  std::vector<NodeFault> out;
  for (std::size_t i = 0; i < faults.size(); ++i) {
    const toml::node& elem = *faults.get(i);
    if (!elem.is_table())
      r.fail("faults", "expected an array of tables ([[faults]]), element " + std::to_string(i) +
                           " is " + std::string(node_type_phrase(elem)));
    const std::string key = "faults[" + std::to_string(i) + "].";
    TableReader f(*elem.as_table(), ctx.source, ctx.prefix + key,
                  field_prefix(ctx, "cluster") + key);
    NodeFault fault;
    const auto node = f.int32("node");
    if (!node) f.fail("node", "missing: the node (from 0) the fault is on");
    fault.node = *node;
    if (auto v = f.number("slowdown")) {
      if (!(*v >= 1.0)) f.fail("slowdown", "must be a factor of at least 1");
      fault.slowdown = *v;
    }
    const auto at = f.non_negative_number("fail_at");
    const auto restart = f.non_negative_number("restart_delay");
    if (at.has_value() != restart.has_value())
      f.fail(at ? "restart_delay" : "fail_at",
             "a failure needs both fail_at (when) and restart_delay (how long until it is back)");
    if (at) fault.fail_at = *at, fault.restart_delay = *restart;
    if (fault.slowdown == 1.0 && fault.fail_at < 0.0)
      f.fail("node", "a fault needs slowdown (> 1) or fail_at and restart_delay");
    f.reject_unknown();
    out.push_back(fault);
  }
  return out;
}

std::vector<NodeGroup> read_node_groups(TableReader& r, const toml::array& groups,
                                        const TableContext& ctx) {
  std::vector<NodeGroup> out;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const toml::node& elem = *groups.get(i);
    if (!elem.is_table()) {
      r.fail("node_groups", "expected an array of tables ([[node_groups]]), element " +
                                std::to_string(i) + " is " + std::string(node_type_phrase(elem)));
    }
    const std::string group_key = "node_groups[" + std::to_string(i) + "].";
    const std::string prefix = ctx.prefix + group_key;
    const std::string fields = field_prefix(ctx, "cluster") + group_key;
    TableReader g(*elem.as_table(), ctx.source, prefix, fields);
    NodeGroup group;
    if (g.node("hardware") != nullptr || g.node("devices_per_node") != nullptr) {
      g.fail(g.node("hardware") != nullptr ? "hardware" : "devices_per_node",
             "node groups differ only in their NICs: a cluster has one kind of device (its "
             "hardware and devices_per_node), so a mixed-GPU cluster is not modelled");
    }
    const auto nodes = g.positive_int("nodes");
    const auto bandwidth = g.positive_number("inter_node_bandwidth");
    g.reject_unknown();
    if (!nodes || !bandwidth) {
      const std::string key = nodes ? "inter_node_bandwidth" : "nodes";
      throw SpecError({fields + key}, ctx.source + ":" + std::to_string(elem.source().begin.line),
                      "missing key '" + prefix + key + "'");
    }
    group.nodes = *nodes;
    group.inter_node_bandwidth = *bandwidth;
    out.push_back(group);
  }
  return out;
}

ClusterDraft read_cluster_raw(const toml::table& table, const TableContext& ctx, int depth) {
  check_depth(depth, ctx);
  TableReader r(table, ctx.source, ctx.prefix, field_prefix(ctx, "cluster"));
  ClusterDraft d;
  if (auto preset = r.string("preset")) {
    const fs::path file = resolve_at(r, "preset", PresetKind::Clusters, *preset, ctx);
    d = read_cluster_raw(parse_toml_file(file), file_context(file), depth + 1);
  }
  if (!ctx.default_name.empty()) d.name = ctx.default_name;
  if (auto v = r.string("name")) d.name = *v;
  if (auto v = r.string("description")) d.description = *v;
  const toml::node* hardware = r.node("hardware");
  if (hardware != nullptr && hardware->is_table()) {
    const TableContext inner{ctx.source, ctx.prefix + "hardware.", ctx.base_dir, ""};
    d.hardware = read_hardware_table(*hardware->as_table(), inner);
  } else if (auto v = r.string("hardware")) {
    const fs::path file = resolve_at(r, "hardware", PresetKind::Hardware, *v, ctx);
    d.hardware = read_hardware_table(parse_toml_file(file), file_context(file));
  }
  const auto nodes = r.positive_int("nodes");
  const auto devices = r.positive_int("devices");
  if (nodes && devices) r.fail("devices", "give nodes or devices, not both");
  // A size given here replaces the preset's size, whichever way the preset gave it.
  if (nodes) d.nodes = nodes, d.devices.reset();
  if (devices) d.devices = devices, d.nodes.reset();
  if (auto v = r.positive_int("devices_per_node")) d.devices_per_node = v;
  if (auto v = r.positive_number("intra_node_bandwidth")) d.intra_node_bandwidth = v;
  if (auto v = r.positive_number("inter_node_bandwidth")) d.inter_node_bandwidth = v;
  if (auto v = r.non_negative_number("intra_node_latency")) d.intra_node_latency = v;
  if (auto v = r.non_negative_number("inter_node_latency")) d.inter_node_latency = v;
  if (const toml::array* groups = r.array("node_groups")) {
    d.node_groups = read_node_groups(r, *groups, ctx);
  }
  if (const toml::array* faults = r.array("faults")) d.faults = read_faults(r, *faults, ctx);
  r.reject_unknown();
  return d;
}

ClusterSpec finish_cluster(ClusterDraft d, const TableContext& ctx) {
  if (!d.hardware) missing(ctx, "cluster", "hardware");
  ClusterSpec c = make_cluster(*d.hardware, 0, d.name.empty() ? "cluster" : d.name);
  c.description = d.description;
  c.devices_per_node = d.devices_per_node.value_or(d.hardware->devices_per_node);
  if (d.node_groups) c.node_groups = *d.node_groups;
  if (d.faults) c.faults = *d.faults;
  std::int64_t devices = 0;
  if (d.devices) {
    devices = *d.devices;
  } else if (d.nodes) {
    devices = std::int64_t{*d.nodes} * c.devices_per_node;
  } else if (!c.node_groups.empty()) {
    for (const NodeGroup& g : c.node_groups) devices += std::int64_t{g.nodes} * c.devices_per_node;
  } else {
    throw SpecError(
        {field_prefix(ctx, "cluster") + "nodes", field_prefix(ctx, "cluster") + "devices"},
        ctx.source, "missing key '" + ctx.prefix + "nodes' (or '" + ctx.prefix + "devices')");
  }
  if (devices > std::numeric_limits<int>::max()) {
    throw SpecError({field_prefix(ctx, "cluster") + "devices"}, ctx.source,
                    std::to_string(devices) + " devices is too many");
  }
  c.devices = static_cast<int>(devices);
  if (d.intra_node_bandwidth) c.intra_node_bandwidth = *d.intra_node_bandwidth;
  if (d.inter_node_bandwidth) c.inter_node_bandwidth = *d.inter_node_bandwidth;
  if (d.intra_node_latency) c.intra_node_latency = *d.intra_node_latency;
  if (d.inter_node_latency) c.inter_node_latency = *d.inter_node_latency;
  with_source(ctx, [&] { validate(c); });
  return c;
}

}  // namespace

TableContext file_context(const fs::path& file) {
  return TableContext{file.string(), "", file.parent_path(), file.stem().string()};
}

ModelSpec read_model_table(const toml::table& table, const TableContext& ctx) {
  ModelSpec m = read_model_raw(table, ctx, 0);
  if (m.name.empty()) m.name = "model";
  const std::pair<std::string_view, std::int64_t> required[] = {
      {"layers", m.layers}, {"hidden", m.hidden},   {"heads", m.heads},
      {"vocab", m.vocab},   {"seq_len", m.seq_len},
  };
  for (const auto& [key, value] : required) {
    if (value == 0) missing(ctx, "model", key);
  }
  apply_defaults(m);
  with_source(ctx, [&] { validate(m); });
  return m;
}

namespace {

// [efficiency] of a hardware file: fractions in (0, 1] (gemm_half_flops: FLOPs >= 0). Absent keys
// keep the defaults of hardware_spec.hpp.
HardwareEfficiency read_efficiency_table(const toml::table& table, const TableContext& ctx) {
  TableReader r(table, ctx.source, ctx.prefix + "efficiency.",
                field_prefix(ctx, "hardware") + "efficiency.");
  HardwareEfficiency e;
  const auto fraction = [&](std::string_view key, double& out) {
    if (auto v = r.positive_number(key)) {
      if (*v > 1.0) r.fail(key, "must be a fraction in (0, 1], got " + std::to_string(*v));
      out = *v;
    }
  };
  fraction("gemm", e.gemm);
  fraction("attention", e.attention);
  fraction("memory", e.memory);
  fraction("intra_node_bus", e.intra_node_bus);
  fraction("inter_node_bus", e.inter_node_bus);
  fraction("host_link", e.host_link);
  fraction("all_reduce_bus", e.all_reduce_bus);
  fraction("all_gather_bus", e.all_gather_bus);
  fraction("reduce_scatter_bus", e.reduce_scatter_bus);
  if (auto v = r.non_negative_number("gemm_half_flops")) e.gemm_half_flops = *v;
  r.reject_unknown();
  return e;
}

}  // namespace

HardwareSpec read_hardware_table(const toml::table& table, const TableContext& ctx) {
  TableReader r(table, ctx.source, ctx.prefix, field_prefix(ctx, "hardware"));
  HardwareSpec hw;
  hw.name = r.string("name").value_or(ctx.default_name.empty() ? "hardware" : ctx.default_name);
  hw.description = r.string("description").value_or("");
  if (auto v = r.string("device")) {
    if (*v == "gpu")
      hw.device = DeviceKind::Gpu;
    else if (*v == "cpu")
      hw.device = DeviceKind::Cpu;
    else
      r.fail("device", "must be \"gpu\" or \"cpu\", not \"" + *v + "\"");
  }
  const auto required = [&](std::optional<double> v, std::string_view key) {
    if (!v) missing(ctx, "hardware", key);
    return *v;
  };
  hw.peak_flops = required(r.positive_number("peak_flops"), "peak_flops");
  hw.fp32_peak_flops = r.non_negative_number("fp32_peak_flops").value_or(0.0);
  const auto hbm = r.positive_count("hbm_bytes");
  if (!hbm) missing(ctx, "hardware", "hbm_bytes");
  hw.hbm_bytes = *hbm;
  hw.hbm_bandwidth = required(r.positive_number("hbm_bandwidth"), "hbm_bandwidth");
  hw.intra_node_bandwidth =
      required(r.positive_number("intra_node_bandwidth"), "intra_node_bandwidth");
  hw.inter_node_bandwidth =
      required(r.positive_number("inter_node_bandwidth"), "inter_node_bandwidth");
  hw.devices_per_node = r.positive_int("devices_per_node").value_or(hw.devices_per_node);
  hw.host_bandwidth = r.non_negative_number("host_bandwidth").value_or(0.0);
  if (auto v = r.positive_count("host_memory_bytes")) hw.host_memory_bytes = *v;
  hw.intra_node_latency =
      r.non_negative_number("intra_node_latency").value_or(hw.intra_node_latency);
  hw.inter_node_latency =
      r.non_negative_number("inter_node_latency").value_or(hw.inter_node_latency);
  hw.special_function_rate =
      r.non_negative_number("special_function_rate").value_or(hw.special_function_rate);
  if (const toml::table* eff = r.table("efficiency")) {
    hw.efficiency = read_efficiency_table(*eff, ctx);
  }
  r.reject_unknown();
  with_source(ctx, [&] { validate(hw); });
  return hw;
}

ClusterSpec read_cluster_table(const toml::table& table, const TableContext& ctx) {
  return finish_cluster(read_cluster_raw(table, ctx, 0), ctx);
}

}  // namespace detail

namespace {

detail::TableContext text_context(std::string_view source, const fs::path& base_dir) {
  return detail::TableContext{std::string(source), "", base_dir,
                              fs::path(std::string(source)).stem().string()};
}

}  // namespace

ModelSpec load_model(std::string_view name_or_path) {
  const fs::path file = resolve_preset(PresetKind::Models, name_or_path);
  return detail::read_model_table(detail::parse_toml_file(file), detail::file_context(file));
}

HardwareSpec load_hardware(std::string_view name_or_path) {
  const fs::path file = resolve_preset(PresetKind::Hardware, name_or_path);
  return detail::read_hardware_table(detail::parse_toml_file(file), detail::file_context(file));
}

ClusterSpec load_cluster(std::string_view name_or_path) {
  const fs::path file = resolve_preset(PresetKind::Clusters, name_or_path);
  return detail::read_cluster_table(detail::parse_toml_file(file), detail::file_context(file));
}

ModelSpec parse_model(std::string_view toml_text, std::string_view source,
                      const fs::path& base_dir) {
  return detail::read_model_table(detail::parse_toml_text(toml_text, source),
                                  text_context(source, base_dir));
}

HardwareSpec parse_hardware(std::string_view toml_text, std::string_view source) {
  return detail::read_hardware_table(detail::parse_toml_text(toml_text, source),
                                     text_context(source, {}));
}

ClusterSpec parse_cluster(std::string_view toml_text, std::string_view source,
                          const fs::path& base_dir) {
  return detail::read_cluster_table(detail::parse_toml_text(toml_text, source),
                                    text_context(source, base_dir));
}

}  // namespace pipetune::spec
