#include "cli/train_output.hpp"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/format.hpp"
#include "cli/json_output.hpp"
#include "db/store/record_json.hpp"
#include "engine/schedule/schedule.hpp"
#include "engine/spec/model_spec.hpp"

namespace pipetune::cli {

namespace {

nlohmann::json plan_json(const runtime::TrainOptions& o, const runtime::TrainResult& r) {
  const spec::ParallelPlan& p = o.plan;
  nlohmann::json j = {{"model", o.model.name},
                      {"tp", p.tp},
                      {"pp", p.pp},
                      {"dp", p.dp},
                      {"ep", p.ep},
                      {"world", p.world_size()},
                      {"schedule", r.schedule},
                      {"chunks", r.chunks},
                      {"vocab", std::string(schedule::vocab_mode_name(p.vocab))},
                      {"vocab_rows", spec::padded_vocab(o.model, p.vocab_shards())},
                      {"microbatches", r.microbatches},
                      {"micro_batch_size", p.micro_batch_size},
                      {"seq_len", o.model.seq_len},
                      {"zero_stage", p.zero_stage},
                      {"recompute", std::string(spec::recompute_name(p.recompute))},
                      {"sequence_parallel", p.sequence_parallel && p.tp > 1},
                      {"tokens_per_step", r.tokens_per_step}};
  if (!p.stage_recompute.empty()) {  // per pipeline rank, only when the plan gives them
    nlohmann::json modes = nlohmann::json::array();
    for (spec::Recompute m : p.stage_recompute) modes.push_back(spec::recompute_name(m));
    j["stage_recompute"] = modes;
  }
  if (!p.stage_tp.empty()) j["stage_tp"] = p.stage_tp;  // per-stage layouts, only when given
  if (p.moe_chunks != 1) j["moe_chunks"] = p.moe_chunks;
  if (p.moe_a2a_node_ranks != 0) j["moe_a2a_node_ranks"] = p.moe_a2a_node_ranks;
  if (p.sparse_embedding_gradient) j["sparse_embedding_gradient"] = true;
  if (!p.expert_layouts.empty())  // experts inside the TP group, only when given
    j["expert_layout"] = spec::expert_layout_names(p.expert_layouts);
  return j;
}

}  // namespace

void print_train_json(const runtime::TrainOptions& o, const runtime::TrainResult& r,
                      std::int64_t run_id, const TrainEngineChoices& choices) {
  const std::string& precision = choices.precision;
  const std::string& attention = choices.attention;
  nlohmann::json losses = nlohmann::json::array(), steps = nlohmann::json::array(),
                 ranks = nlohmann::json::array();
  for (const auto& s : r.steps) {
    losses.push_back(s.loss);
    steps.push_back({{"step", s.step},
                     {"loss", s.loss},
                     {"aux_loss", s.aux_loss},
                     {"grad_norm", s.grad_norm},
                     {"seconds", s.seconds},
                     {"tokens_per_s", s.tokens_per_s}});
  }
  for (const auto& k : r.ranks)
    ranks.push_back({{"rank", k.rank},
                     {"stage", k.pp_rank},
                     {"tp_rank", k.tp_rank},
                     {"dp_rank", k.dp_rank},
                     {"compute", k.compute_seconds},
                     {"bubble", k.bubble_seconds},
                     {"bubble_ratio", k.bubble_ratio},
                     {"parameter_bytes", k.parameter_bytes},
                     {"gradient_bytes", k.gradient_bytes},
                     {"optimizer_bytes", k.optimizer_bytes},
                     {"peak_activation_bytes", k.peak_activation_bytes},
                     {"peak_offloaded_bytes", k.peak_offloaded_bytes},
                     {"offloaded_optimizer_bytes", k.offloaded_optimizer_bytes},
                     {"reductions_overlapped", k.reductions_overlapped},
                     {"moe_all_to_all_overlapped", k.moe_all_to_all_overlapped},
                     {"pairs_run_at_once", k.pairs_run_at_once}});
  nlohmann::json j = {{"losses", losses},        {"tokens_per_s", runtime::steady_tokens_per_s(r)},
                      {"plan", plan_json(o, r)}, {"first_step", r.first_step},
                      {"steps", steps},          {"iteration_time", r.iteration_seconds},
                      {"ranks", ranks},          {"precision", precision}};
  if (!attention.empty())
    j["attention"] = attention;
  else if (o.attention)
    j["attention"] = std::string(tensor::attention_kernel_name(*o.attention));
  if (o.rank_device && precision == "bf16")
    j["gemm_inputs"] = choices.gemm_inputs.empty() ? "copies" : choices.gemm_inputs;
  if (o.rank_device) j["gelu_epilogue"] = choices.gelu_epilogue;
  if (r.gpu_capture.activities > 0)
    j["gpu_capture"] = {{"activities", r.gpu_capture.activities},
                        {"attributed", r.gpu_capture.attributed},
                        {"outside_ops", r.gpu_capture.outside_ops},
                        {"without_launch", r.gpu_capture.without_launch},
                        {"flushes", r.gpu_capture.flushes},
                        {"forced_flushes", r.gpu_capture.forced_flushes},
                        {"flush_ms", 1e-6 * static_cast<double>(r.gpu_capture.flush_ns)},
                        {"route_ms", 1e-6 * static_cast<double>(r.gpu_capture.route_ns)},
                        {"waiting_launch_calls", r.gpu_capture.waiting_launch_calls},
                        {"takes", r.gpu_capture.takes},
                        {"most_steps_per_take", r.gpu_capture.most_steps_per_take}};
  if (!r.expert_layout_choices.empty()) {
    nlohmann::json choices_json = nlohmann::json::array();
    for (const runtime::TrainResult::ExpertLayoutChoice& c : r.expert_layout_choices)
      choices_json.push_back({{"layer", c.layer},
                              {"sharded_seconds", c.sharded_seconds},
                              {"dedup_seconds", c.dedup_seconds},
                              {"chosen", std::string(spec::expert_layout_name(c.chosen))}});
    j["expert_layout_choices"] = choices_json;
  }
  if (run_id >= 0) j["run_id"] = run_id;
  print_json_value(j);
}

void print_train_summary(const runtime::TrainResult& r) {
  std::printf("\nlast step: pipeline %s, %.0f tokens/s over steps %d-%d\n",
              human_time(r.iteration_seconds).c_str(), runtime::steady_tokens_per_s(r),
              r.steps.size() > 1 ? r.steps[1].step : r.first_step,
              r.steps.empty() ? r.first_step : r.steps.back().step);
  std::printf("%-5s %-5s %-3s %-3s %11s %11s %7s %11s %11s %11s %11s\n", "rank", "stage", "tp",
              "dp", "compute", "bubble", "bubble%", "params", "grads", "optimizer", "peak act");
  for (const auto& k : r.ranks)
    std::printf("%-5d %-5d %-3d %-3d %11s %11s %6.1f%% %11s %11s %11s %11s\n", k.rank, k.pp_rank,
                k.tp_rank, k.dp_rank, human_time(k.compute_seconds).c_str(),
                human_time(k.bubble_seconds).c_str(), 100.0 * k.bubble_ratio,
                human_bytes(static_cast<double>(k.parameter_bytes)).c_str(),
                human_bytes(static_cast<double>(k.gradient_bytes)).c_str(),
                human_bytes(static_cast<double>(k.optimizer_bytes)).c_str(),
                human_bytes(static_cast<double>(k.peak_activation_bytes)).c_str());
  if (std::any_of(r.ranks.begin(), r.ranks.end(), [](const runtime::RankSummary& k) {
        return k.peak_offloaded_bytes + k.offloaded_optimizer_bytes > 0;
      })) {
    std::printf("offloaded to host memory (peak activations + optimizer state), per rank:");
    for (const auto& k : r.ranks)
      std::printf(" %d: %s + %s", k.rank,
                  human_bytes(static_cast<double>(k.peak_offloaded_bytes)).c_str(),
                  human_bytes(static_cast<double>(k.offloaded_optimizer_bytes)).c_str());
    std::printf("\n");
  }
  if (!r.expert_layout_choices.empty()) {
    std::printf("adaptive experts (sharded / dedup over the trial steps), chosen per layer:");
    for (const runtime::TrainResult::ExpertLayoutChoice& c : r.expert_layout_choices)
      std::printf(" %lld: %s (%s / %s)", static_cast<long long>(c.layer),
                  std::string(spec::expert_layout_name(c.chosen)).c_str(),
                  human_time(c.sharded_seconds).c_str(), human_time(c.dedup_seconds).c_str());
    std::printf("\n");
  }
  const runtime::TrainResult::GpuCaptureCounts& g = r.gpu_capture;
  if (g.activities > 0)
    std::printf(
        "GPU activity (CUPTI): %zu kernels, copies and memsets; %zu launched inside ops, %zu "
        "between ops, %zu without their launch call; taken at %zu rank step ends (up to %d "
        "steps a take), %zu flushes, %zu of them forced (%s flushing, %s routing, host time in "
        "all)\n",
        g.activities, g.attributed, g.outside_ops, g.without_launch, g.takes, g.most_steps_per_take,
        g.flushes, g.forced_flushes, human_time(seconds_of(g.flush_ns)).c_str(),
        human_time(seconds_of(g.route_ns)).c_str());
}
}  // namespace pipetune::cli
