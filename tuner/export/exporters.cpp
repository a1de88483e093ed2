#include "tuner/export/exporters.hpp"

#include <array>
#include <iomanip>
#include <sstream>

#include "tuner/export/export_common.hpp"
#include "tuner/export/torchtitan_plan_layout.hpp"

namespace pipetune::tuner {

namespace {

constexpr std::array kFormats{ExportFormat::Megatron, ExportFormat::Torchtitan,
                              ExportFormat::TorchtitanToml, ExportFormat::Deepspeed,
                              ExportFormat::Pipetune};

}  // namespace

std::string_view export_format_name(ExportFormat f) {
  switch (f) {
    case ExportFormat::Megatron:
      return "megatron";
    case ExportFormat::Torchtitan:
      return "torchtitan";
    case ExportFormat::TorchtitanToml:
      return "torchtitan-toml";
    case ExportFormat::Deepspeed:
      return "deepspeed";
    case ExportFormat::Pipetune:
      return "pipetune";
  }
  return "?";
}

std::vector<std::string> export_format_names() {
  std::vector<std::string> out;
  for (ExportFormat f : kFormats) out.emplace_back(export_format_name(f));
  return out;
}

ExportFormat parse_export_format(std::string_view name) {
  for (ExportFormat f : kFormats)
    if (export_format_name(f) == name) return f;
  std::string valid;
  for (const std::string& n : export_format_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw InputError("unknown export format '" + std::string(name) + "' (valid: " + valid + ")");
}

ExportSideFile export_side_file(ExportFormat format, const ExportRequest& given) {
  // A stage_tp list whose entries are all equal is plain tp, as in the main file (which refuses
  // one whose entries differ before any side file is asked for).
  ExportRequest request = given;
  if (!spec::stage_tp_varies(request.plan) && !request.plan.stage_tp.empty()) {
    request.plan.tp = request.plan.stage_tp.front();
    request.plan.stage_tp.clear();
  }
  if (format == ExportFormat::Torchtitan || format == ExportFormat::TorchtitanToml)
    return {torchtitan_detail::kScheduleCsvFile, torchtitan_schedule_csv(request),
            "its schedule (pipeline_parallel_schedule_csv)"};
  if (format == ExportFormat::Deepspeed)
    return {std::string(deepspeed_model_code_file()), deepspeed_model_code(request),
            "its model code (the PipelineModule, recomputation)"};
  return {};
}

std::string export_plan(ExportFormat format, const ExportRequest& request) {
  switch (format) {
    case ExportFormat::Megatron:
      return export_megatron(request);
    case ExportFormat::Torchtitan:
      return export_torchtitan(request);
    case ExportFormat::TorchtitanToml:
      return export_torchtitan_toml(request);
    case ExportFormat::Deepspeed:
      return export_deepspeed(request);
    case ExportFormat::Pipetune:
      return export_pipetune(request);
  }
  throw InputError("unknown export format");
}

namespace export_detail {

namespace {

std::string gb_per_s(double bytes_per_s) {
  std::ostringstream o;
  o << std::setprecision(3) << bytes_per_s / 1e9 << " GB/s";
  return o.str();
}

std::string nodes_text(const char* what, int first, int count) {
  return count == 1 ? std::string(what) + " " + std::to_string(first)
                    : std::string(what) + "s " + std::to_string(first) + "-" +
                          std::to_string(first + count - 1);
}

// The plan's node group order, every group named once; the listed order when it is empty.
std::vector<int> group_order(const ExportRequest& r, std::string_view fw) {
  const auto groups = static_cast<int>(r.cluster.node_groups.size());
  std::vector<int> order = r.plan.node_group_order;
  if (order.empty())
    for (int g = 0; g < groups; ++g) order.push_back(g);
  std::vector<char> seen(static_cast<std::size_t>(groups), 0);
  bool once = static_cast<int>(order.size()) == groups;
  for (int g : order) {
    once = once && g >= 0 && g < groups && !seen[static_cast<std::size_t>(g)];
    if (g >= 0 && g < groups) seen[static_cast<std::size_t>(g)] = 1;
  }
  std::string listed;
  for (int g : order) listed += (listed.empty() ? "" : ",") + std::to_string(g);
  require(once, fw,
          "node_group_order " + listed + " does not name each of the cluster's " +
              std::to_string(groups) + " node groups once");
  return order;
}

}  // namespace

std::string placement_comment(const ExportRequest& r, std::string_view fw, std::string_view prefix,
                              std::string_view how) {
  const std::vector<spec::NodeGroup>& groups = r.cluster.node_groups;
  const std::vector<int> order = group_order(r, fw);
  if (groups.empty()) return "";
  std::vector<int> first(groups.size(), 0);  // each group's first node as the cluster lists them
  for (std::size_t g = 1; g < groups.size(); ++g) first[g] = first[g - 1] + groups[g - 1].nodes;
  std::string listed;
  for (int g : order) listed += (listed.empty() ? "" : ", ") + std::to_string(g);
  const std::string p(prefix);
  std::string out = p + "Placement: the plan fills the cluster's node groups in the order " +
                    listed + " (node_group_order),\n" + p +
                    "so the nodes must take these node ranks (the launcher numbers them):\n";
  int rank = 0;
  for (int g : order) {
    const spec::NodeGroup& group = groups[static_cast<std::size_t>(g)];
    out += p + "  " + nodes_text("node rank", rank, group.nodes) + " -> node group " +
           std::to_string(g) + " (" +
           nodes_text("the cluster's node", first[static_cast<std::size_t>(g)], group.nodes) +
           ", " + gb_per_s(group.inter_node_bandwidth) + " NICs)\n";
    rank += group.nodes;
  }
  return out + p + std::string(how) + "\n";
}

std::int64_t accumulation_steps(const spec::ParallelPlan& plan) {
  return plan.global_batch / (static_cast<std::int64_t>(plan.micro_batch_size) * plan.dp);
}

std::string split_text(const std::vector<int>& split) {
  std::string out;
  for (int n : split) out += (out.empty() ? "" : "/") + std::to_string(n);
  return out;
}

ExportRequest with_uniform_recompute(const ExportRequest& request, std::string_view framework,
                                     std::string_view why) {
  ExportRequest r = request;
  spec::ParallelPlan& p = r.plan;
  require(!spec::stage_recompute_varies(p), framework,
          "stage_recompute = " + spec::stage_recompute_text(p.stage_recompute) +
              " (recomputation per pipeline stage): " + std::string(why));
  if (!p.stage_recompute.empty()) p.recompute = p.stage_recompute.front();
  p.stage_recompute.clear();
  return r;
}

ExportRequest with_uniform_stage_tp(const ExportRequest& request, std::string_view framework,
                                    std::string_view why) {
  ExportRequest r = request;
  spec::ParallelPlan& p = r.plan;
  require(!spec::stage_tp_varies(p), framework,
          "stage_tp=" + spec::stage_tp_text(p.stage_tp) +
              " (per-stage tensor parallel sizes): " + std::string(why));
  if (!p.stage_tp.empty()) p.tp = p.stage_tp.front();
  p.stage_tp.clear();
  return r;
}

void check_common(const ExportRequest& r, std::string_view fw) {
  const spec::ParallelPlan& p = r.plan;
  const spec::ModelSpec& m = r.model;
  const std::int64_t world = static_cast<std::int64_t>(p.tp) * p.pp * p.dp;
  require(r.cluster.devices <= 0 || world == r.cluster.devices, fw,
          "tp*pp*dp = " + std::to_string(world) + " does not fill the cluster's " +
              std::to_string(r.cluster.devices) + " devices");
  require(
      m.heads % p.tp == 0, fw,
      "tp=" + std::to_string(p.tp) + " does not divide attention heads=" + std::to_string(m.heads));
  require(m.kv_heads % p.tp == 0, fw,
          "tp=" + std::to_string(p.tp) +
              " does not divide query groups (kv heads)=" + std::to_string(m.kv_heads));
  require(
      m.ffn_hidden % p.tp == 0, fw,
      "tp=" + std::to_string(p.tp) + " does not divide ffn hidden=" + std::to_string(m.ffn_hidden));
  require(p.dp % p.ep == 0, fw,
          "ep=" + std::to_string(p.ep) + " does not divide dp=" + std::to_string(p.dp));
  require(m.experts % p.ep == 0, fw,
          "ep=" + std::to_string(p.ep) + " does not divide experts=" + std::to_string(m.experts));
  const std::int64_t per_step = static_cast<std::int64_t>(p.micro_batch_size) * p.dp;
  require(p.global_batch > 0 && p.global_batch % per_step == 0, fw,
          "global batch " + std::to_string(p.global_batch) + " is not divisible by micro-batch " +
              std::to_string(p.micro_batch_size) + " x data-parallel " + std::to_string(p.dp));
}

}  // namespace export_detail

}  // namespace pipetune::tuner
