// Every file the tuner's top 10 yields is one its framework accepts, or it is refused with a
// reason (issue 45, point 5). The searches are the ones `pipetune tune` runs (search_space from a
// request, the evaluator's scorers, keep 10): dense llama3-8b, llama3-70b and gpt3-175b and MoE
// mixtral-8x7b, with every schedule, and again with only the schedules and vocabulary modes
// Megatron-LM runs (what `pipetune export` tells a user whose results it cannot write to tune
// with); llama3-70b on 16 GPUs adds the memory-bound plans (full recomputation) and the schedules
// torchtitan runs from pipetune's schedule CSV (zb-h2, zb-v, v-min). Each of the top 10 plans is
// exported as `pipetune export --rank N` does for each format (megatron, torchtitan's config
// module and its TOML, deepspeed), and what is written (the file and the side file beside it) is
// checked against the framework's own rules (megatron_rules, torchtitan_config_rules,
// torchtitan_rules, deepspeed_rules); a refusal is an InputError naming the framework and why.
// The lists together must hold interleaving, zero-bubble and V schedules, uneven layer splits,
// selective and full recomputation, sequence parallelism, ZeRO and expert parallelism, so the
// test cannot quietly stop covering one when the cost model ranks plans differently.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "tuner/export/deepspeed_rules.hpp"
#include "tuner/export/exporters.hpp"
#include "tuner/export/megatron_rules.hpp"
#include "tuner/export/torchtitan_config_rules.hpp"
#include "tuner/export/torchtitan_plan_layout.hpp"
#include "tuner/export/torchtitan_rules.hpp"
#include "tuner/search/evaluator_scorer.hpp"
#include "tuner/search/search.hpp"
#include "tuner/search/search_request.hpp"
#include "tuner/search/tuning_target.hpp"

namespace pipetune::tuner {
namespace {

constexpr std::size_t kTop = 10;  // `pipetune tune`'s default --top

struct TopSearch {
  const char* model;
  int gpus;
  std::int64_t global_batch;
  std::vector<std::string> schedules;    // empty: every schedule
  std::vector<std::string> vocab_modes;  // empty: every mode
};

std::vector<TopSearch> top_searches() {
  const std::vector<std::string> megatron_schedules = {"1f1b", "interleaved-1f1b"};
  const std::vector<std::string> no_vocab_parallelism = {"none", "redis"};
  std::vector<TopSearch> out;
  for (const TopSearch& t :
       {TopSearch{"llama3-8b", 8, 64, {}, {}}, TopSearch{"llama3-70b", 64, 256, {}, {}},
        TopSearch{"gpt3-175b", 128, 512, {}, {}}, TopSearch{"mixtral-8x7b", 16, 128, {}, {}},
        TopSearch{"llama3-70b", 16, 64, {}, {}}}) {
    out.push_back(t);
    out.push_back({t.model, t.gpus, t.global_batch, megatron_schedules, no_vocab_parallelism});
  }
  out.push_back({"llama3-70b", 16, 64, {"zb-h2", "zb-v", "v-min"}, no_vocab_parallelism});
  // pipetune's own orders without vocabulary parallelism on a model torchtitan has: its schedule
  // CSV (on 8 GPUs the unrestricted search's top plans shard the vocabulary, which it refuses).
  out.push_back({"llama3-8b", 8, 64, {"zb-h1", "zb-v", "v-half"}, no_vocab_parallelism});
  return out;
}

std::string list_text(const std::vector<std::string>& names) {
  if (names.empty()) return "all";
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

std::string search_text(const TopSearch& t) {
  return std::string(t.model) + " on " + std::to_string(t.gpus) + " x h100-sxm, global batch " +
         std::to_string(t.global_batch) + ", schedules " + list_text(t.schedules) + ", vocab " +
         list_text(t.vocab_modes);
}

// The search `pipetune tune --model M --hardware h100-sxm --gpus N --global-batch B --keep 10
// [--schedules ...] [--vocab-modes ...] --no-moe-chunks --no-whole-experts --no-sparse-embedding`
// runs (the frameworks neither chunk the MoE all-to-all nor exchange the embedding gradient's
// rows: the exports refuse both).
SearchResult run_search(const TopSearch& t, SearchSpace& space) {
  const SearchRequest request{.target = {.model = t.model,
                                         .hardware = "h100-sxm",
                                         .gpus = t.gpus,
                                         .global_batch = t.global_batch,
                                         .seq = 0,
                                         .cluster = {}},
                              .schedules = t.schedules,
                              .vocab_modes = t.vocab_modes,
                              .moe_chunks = false,
                              .whole_experts = false,
                              .sparse_embedding = false,
                              .keep = static_cast<std::int64_t>(kTop)};
  space = search_space(request);
  return search_plans(space, evaluator_scorers(space.model, space.cluster));
}

// What the issue lists, as the plan shows it.
const std::vector<std::string>& feature_names() {
  static const std::vector<std::string> names = {"interleaved-1f1b",
                                                 "zero-bubble schedule (zb-h1, zb-h2, zb-v)",
                                                 "V schedule (v-half, v-min, dualpipe-v)",
                                                 "uneven layer split (redis)",
                                                 "selective recomputation",
                                                 "full recomputation",
                                                 "sequence parallelism",
                                                 "ZeRO (stage 1 to 3)",
                                                 "expert parallelism"};
  return names;
}

std::vector<std::string> features_of(const ScoredPlan& r) {
  const spec::ParallelPlan& p = r.plan;
  const std::vector<std::string>& f = feature_names();
  std::vector<std::string> out;
  if (p.schedule == "interleaved-1f1b") out.push_back(f[0]);
  if (p.schedule.rfind("zb-", 0) == 0) out.push_back(f[1]);
  if (p.schedule == "v-half" || p.schedule == "v-min" || p.schedule == "dualpipe-v")
    out.push_back(f[2]);
  if (!p.layer_split.empty() && *std::min_element(p.layer_split.begin(), p.layer_split.end()) !=
                                    *std::max_element(p.layer_split.begin(), p.layer_split.end()))
    out.push_back(f[3]);
  if (p.recompute == spec::Recompute::Selective) out.push_back(f[4]);
  if (p.recompute == spec::Recompute::Full) out.push_back(f[5]);
  if (p.sequence_parallel && p.tp > 1) out.push_back(f[6]);
  if (p.zero_stage > 0) out.push_back(f[7]);
  if (p.ep > 1) out.push_back(f[8]);
  return out;
}

// The request `pipetune export --rank N` builds from a stored result (cli/export_command.cpp
// export_trial): the search's model and cluster, the plan and its vocabulary label.
ExportRequest export_request(const SearchSpace& space, const ScoredPlan& r, std::size_t rank) {
  ExportRequest q;
  q.model = space.model;
  q.cluster = space.cluster;
  q.plan = r.plan;
  q.vocab_label = r.vocab_label;
  q.train_iters = 100;
  char note[160];
  std::snprintf(note, sizeof note,
                "pipetune tune rank %zu: predicted %.3f s per iteration, %.0f tokens/s, MFU %.1f%%",
                rank, r.score.iteration_time, r.score.tokens_per_s, 100.0 * r.score.mfu);
  q.description = note;
  return q;
}

RuleViolation mismatch(const std::string& rule, const std::string& detail) {
  return {rule, "pipetune tests/tuner/export/tuner_top10_export_test.cpp", detail};
}

// Megatron-LM's rules on the launch script, and that it launches the plan's ranks and batch.
RuleViolations check_megatron(const ExportRequest& q, const std::string& script,
                              const ExportSideFile&) {
  const MegatronLaunch l = parse_megatron_script(script);
  RuleViolations v = check_megatron_launch(l);
  if (l.world_size() != q.plan.world_size())
    v.push_back(mismatch("the launch starts the plan's ranks",
                         "launch " + std::to_string(l.world_size()) + ", plan " +
                             std::to_string(q.plan.world_size())));
  const auto gb = l.flags.find("--global-batch-size");
  if (gb == l.flags.end() || gb->second != std::to_string(q.plan.global_batch))
    v.push_back(mismatch("--global-batch-size is the plan's global batch",
                         "plan " + std::to_string(q.plan.global_batch)));
  return v;
}

// torchtitan's rules on the TOML with the schedule CSV written beside it (pipetune_schedule.csv,
// when the plan's schedule has no torch class), for the plan's model; the TOML names that file
// and embeds the same CSV.
RuleViolations check_torchtitan_toml(const ExportRequest& q, const std::string& toml,
                                     const ExportSideFile& side) {
  const TorchtitanLaunch launch{q.plan.world_size(), static_cast<int>(q.model.layers), side.text,
                                torchtitan_shape(q.model)};
  RuleViolations v = check_torchtitan_config(toml, launch);
  const auto keys = parse_torchtitan_toml(toml);
  const auto csv = keys.find("parallelism.pipeline_parallel_schedule_csv");
  if (csv != keys.end() && csv->second != side.name)
    v.push_back(mismatch("the schedule CSV named is the file written beside the TOML",
                         "named '" + csv->second + "', written '" + side.name + "'"));
  if (embedded_schedule_csv(toml) != side.text)
    v.push_back(mismatch("the CSV embedded in the TOML is the one written beside it",
                         std::to_string(embedded_schedule_csv(toml).size()) + " against " +
                             std::to_string(side.text.size()) + " characters"));
  return v;
}

// torchtitan's rules on the config module (current torchtitan) with the schedule CSV written
// beside it, which the module names by its path beside the module.
RuleViolations check_torchtitan_module(const ExportRequest& q, const std::string& module,
                                       const ExportSideFile& side) {
  const TorchtitanLaunch launch{q.plan.world_size(), static_cast<int>(q.model.layers), side.text,
                                torchtitan_shape(q.model)};
  RuleViolations v = check_torchtitan_config_module(module, launch);
  const bool names_csv = module.find(kTorchtitanCsvBesideThisFile) != std::string::npos;
  if (names_csv != !side.text.empty() ||
      (names_csv && side.name != torchtitan_detail::kScheduleCsvFile))
    v.push_back(mismatch("the module names the schedule CSV exactly when one is written beside it",
                         "written '" + side.name + "'"));
  return v;
}

// DeepSpeed's rules on the JSON with the model code written beside it.
RuleViolations check_deepspeed(const ExportRequest& q, const std::string& json,
                               const ExportSideFile& side) {
  return check_deepspeed_config(
      json, DeepspeedLaunch{q.plan.world_size(), static_cast<int>(q.model.layers), side.text});
}

// One export format: how its refusals start, the check of what it writes (the file and the side
// file export_side_file gives), and the plans it must write (none named: it may refuse any).
struct Framework {
  ExportFormat format;
  std::string refusal_prefix;
  std::function<RuleViolations(const ExportRequest&, const std::string& text,
                               const ExportSideFile& side)>
      check;
  std::function<bool(const ScoredPlan&)> must_write;
};

std::vector<Framework> frameworks() {
  // Megatron-LM runs 1F1B and interleaved 1F1B with any layer split, but no vocabulary
  // parallelism.
  // Its activation offload needs one stage without recomputation, and its optimizer offload the
  // distributed optimizer (ZeRO 0 only over one replica).
  const auto megatron_runs = [](const ScoredPlan& r) {
    const spec::ParallelPlan& p = r.plan;
    const bool activation_offload_runs =
        !p.offload_activations ||
        (p.pp == 1 && p.recompute == spec::Recompute::None && p.stage_recompute.empty());
    const bool optimizer_offload_runs = !p.offload_optimizer || p.zero_stage > 0 || p.dp == 1;
    return (p.schedule == "1f1b" || p.schedule == "interleaved-1f1b") &&
           (r.vocab_label == "none" || r.vocab_label == "redis") && activation_offload_runs &&
           optimizer_offload_runs;
  };
  return {{ExportFormat::Megatron, "megatron: ", check_megatron, megatron_runs},
          {ExportFormat::Torchtitan, "torchtitan: ", check_torchtitan_module, {}},
          {ExportFormat::TorchtitanToml, "torchtitan: ", check_torchtitan_toml, {}},
          {ExportFormat::Deepspeed, "deepspeed: ", check_deepspeed, {}}};
}

// Exports the plan for the framework as `pipetune export` does (the file, then the side file
// beside it) and checks what is written against the framework's rules. Returns the refusal's
// reason, or "" when the files were written; side_file: a side file was written too.
std::string export_and_check(const Framework& fw, const ExportRequest& q, const ScoredPlan& r,
                             const std::string& what, bool& side_file) {
  const std::string name(export_format_name(fw.format));
  std::string text;
  ExportSideFile side;
  try {
    text = export_plan(fw.format, q);
    side = export_side_file(fw.format, q);
  } catch (const InputError& e) {
    const std::string reason = e.what();
    EXPECT_EQ(reason.rfind(fw.refusal_prefix, 0), 0u) << name << ", " << what << ": " << reason;
    EXPECT_GT(reason.size(), fw.refusal_prefix.size() + 10) << name << ", " << what;
    if (fw.must_write && fw.must_write(r))
      ADD_FAILURE() << name << " refused a plan it runs, " << what << ": " << reason;
    return reason.empty() ? "(no reason)" : reason;
  } catch (const std::exception& e) {
    ADD_FAILURE() << name << ", " << what << ": not an InputError: " << e.what();
    return std::string("not an InputError: ") + e.what();
  }
  side_file = !side.text.empty();
  std::string violations;
  try {
    violations = format_violations(fw.check(q, text, side));
  } catch (const std::exception& e) {
    violations = std::string("the check cannot read what was written: ") + e.what();
  }
  EXPECT_EQ(violations, "") << name << ", " << what << "\n"
                            << text << (side.text.empty() ? "" : "\n--- " + side.name + "\n")
                            << side.text;
  return "";
}

struct Tally {
  int written = 0;
  int refused = 0;
  int refused_for_offload = 0;  // of refused: plans whose offload the framework cannot express
};

TEST(TunerTop10Export, EveryTopPlanIsWrittenAndPassesItsFrameworksRulesOrRefusedWithAReason) {
  const std::vector<Framework> fws = frameworks();
  std::map<std::string, Tally> total;                            // format name -> files
  std::map<std::string, std::map<std::string, Tally>> by_model;  // format -> model -> files
  std::map<std::string, int> reasons;                            // "format: reason" -> refusals
  std::map<std::string, int> features;                           // feature -> top-10 plans with it
  int torchtitan_csvs = 0;
  for (const TopSearch& t : top_searches()) {
    SearchSpace space;
    const SearchResult result = run_search(t, space);
    const std::string searched = search_text(t);
    ASSERT_FALSE(result.ranked.empty()) << searched;
    const std::size_t top = std::min(kTop, result.ranked.size());
    std::map<std::string, int> schedules;
    std::vector<Tally> tally(fws.size());
    for (std::size_t i = 0; i < top; ++i) {
      const ScoredPlan& r = result.ranked[i];
      ++schedules[r.plan.schedule];
      for (const std::string& f : features_of(r)) ++features[f];
      const ExportRequest q = export_request(space, r, i + 1);
      const std::string what =
          searched + ", rank " + std::to_string(i + 1) + ": " + plan_summary(r.plan, r.vocab_label);
      for (std::size_t k = 0; k < fws.size(); ++k) {
        const std::string name(export_format_name(fws[k].format));
        bool side_file = false;
        const std::string refusal = export_and_check(fws[k], q, r, what, side_file);
        Tally& model_tally = by_model[name][q.model.name];
        if (refusal.empty()) {
          ++tally[k].written;
          ++total[name].written;
          ++model_tally.written;
          if (fws[k].format == ExportFormat::Torchtitan && side_file) ++torchtitan_csvs;
        } else {
          ++tally[k].refused;
          ++total[name].refused;
          ++model_tally.refused;
          if (r.plan.offload_activations || r.plan.offload_optimizer)
            ++model_tally.refused_for_offload;
          ++reasons[name + ": " + refusal.substr(0, 110)];
        }
      }
    }
    // One line per search, to quote: its top plans' schedules and what each format did.
    std::string line = searched + ": top " + std::to_string(top) + " (";
    for (const auto& [sched, n] : schedules)
      line += (line.back() == '(' ? "" : ", ") + sched + " " + std::to_string(n);
    line += ")";
    for (std::size_t k = 0; k < fws.size(); ++k)
      line += "; " + std::string(export_format_name(fws[k].format)) + " " +
              std::to_string(tally[k].written) + " written, " + std::to_string(tally[k].refused) +
              " refused";
    std::printf("%s\n", line.c_str());
  }
  for (const auto& [name, n] : total)
    std::printf("%s: %d written, %d refused\n", name.c_str(), n.written, n.refused);
  for (const auto& [reason, n] : reasons) std::printf("  %3d x %s\n", n, reason.c_str());

  // Each feature is in some top 10 (else change the searches so one yields it again).
  for (const std::string& f : feature_names())
    EXPECT_GT(features[f], 0) << f << " is in none of the top-10 lists";
  // Each format writes files (it does not pass by refusing everything): torchtitan some with a
  // schedule CSV, and most of the llama3 plans (the models it has a flavor of; it may refuse
  // every gpt3-175b and mixtral-8x7b plan for want of one).
  for (const Framework& fw : fws) {
    const std::string name(export_format_name(fw.format));
    EXPECT_GT(total[name].written, 0) << name << " wrote nothing";
  }
  EXPECT_GT(torchtitan_csvs, 0) << "no torchtitan export with a schedule CSV";
  for (const char* format : {"torchtitan", "torchtitan-toml"})
    for (const char* llama : {"llama3-8b", "llama3-70b"}) {
      const Tally& tt = by_model[format][llama];
      // torchtitan has no offload: plans the search offloads (tight memory) are refused for it.
      EXPECT_GT(tt.written, tt.refused - tt.refused_for_offload) << format << " on " << llama;
    }
}

}  // namespace
}  // namespace pipetune::tuner
