// op_costs in two steps (pass_costs, then the ZeRO stage's costs on top) prices a plan from the
// pass costs of the same plan at any ZeRO stage, to the last bit: the search shares one
// pass_costs among a plan's ZeRO stages. Checked over the plans two searches enumerate (MoE
// with expert layouts and chunked all-to-alls, vocabulary parallelism, layered reduction, per-stage
// layouts, offload, the sparse embedding gradient, tied embeddings), field by field; and so do
// a plan's offload variants priced one after another in one copy of its costs.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/spec/validate.hpp"
#include "tuner/cost/op_costs.hpp"
#include "tuner/memory/memory_model.hpp"
#include "tuner/search/plan_enumeration.hpp"
#include "tuner/search/search_request.hpp"
#include "tuner/search/tuning_target.hpp"

namespace pipetune::tuner {
namespace {

// Every number of the costs, named.
std::vector<std::pair<std::string, double>> fields(const OpCosts& c) {
  std::vector<std::pair<std::string, double>> out;
  const auto add = [&](std::string name, double v) { out.emplace_back(std::move(name), v); };
  const auto add_each = [&](const std::string& name, const std::vector<double>& values) {
    for (std::size_t i = 0; i < values.size(); ++i)
      add(name + "[" + std::to_string(i) + "]", values[i]);
  };
  const auto& t = c.table;
  add("p2p_latency", t.p2p_latency);
  add("p2p_bytes", t.p2p_bytes);
  add("p2p_bandwidth", t.p2p_bandwidth);
  add("collective_time", t.collective_time);
  add("w_free_fraction", t.w_free_fraction);
  add("held_reductions", t.held_reductions);
  add("copies_block_compute", t.copies_block_compute);
  add_each("pair_transfer", t.pair_transfer);
  for (std::size_t r = 0; r < t.stages.size(); ++r) {
    const schedule::StageCosts& s = t.stages[r];
    const std::string at = "table.stages[" + std::to_string(r) + "].";
    for (std::size_t k = 0; k < schedule::kOpKindCount; ++k) {
      const std::string kind = std::to_string(k);
      add(at + "op[" + kind + "]", s.op[k]);
      add(at + "comm[" + kind + "]", s.comm[k]);
      add(at + "attention[" + kind + "]", s.attention[k]);
      add(at + "fixed[" + kind + "]", s.fixed[k]);
    }
    add(at + "offload", s.offload);
    add(at + "run_gather", s.run_gather);
    add(at + "slowdown", s.slowdown);
  }
  for (std::size_t r = 0; r < c.stages.size(); ++r) {
    const StageCost& s = c.stages[r];
    const std::string at = "stages[" + std::to_string(r) + "].";
    for (const auto& [name, w] : {std::pair<const char*, const WorkTime*>{"forward", &s.forward},
                                  {"input_grad", &s.input_grad},
                                  {"weight_grad", &s.weight_grad}})
      add(at + name, w->total());
    add(at + "sharded_forward_comm", s.sharded_forward_comm);
    add(at + "sharded_backward_comm", s.sharded_backward_comm);
    add(at + "grad_reduce", s.grad_reduce);
    add(at + "group_reduce", s.group_reduce);
    add(at + "tables_reduce", s.tables_reduce);
    add(at + "group_gather", s.group_gather);
    add(at + "param_gather", s.param_gather);
    add(at + "embedding_sync", s.embedding_sync);
    add(at + "optimizer", s.optimizer);
    add(at + "optimizer_shard", s.optimizer_shard);
    add(at + "parameters", s.parameters);
    add(at + "executed_flops", s.executed_flops);
  }
  add_each("activation_bytes", c.activation_bytes_per_microbatch);
  add_each("transient", c.transient_activation_bytes);
  return out;
}

// "" when equal bit for bit, else the first fields that differ.
std::string difference(const OpCosts& want, const OpCosts& got) {
  const auto a = fields(want), b = fields(got);
  if (a.size() != b.size())
    return std::to_string(a.size()) + " fields against " + std::to_string(b.size());
  std::string out;
  int shown = 0;
  for (std::size_t i = 0; i < a.size() && shown < 4; ++i)
    if (std::memcmp(&a[i].second, &b[i].second, sizeof(double)) != 0) {
      out += a[i].first + ": want " + std::to_string(a[i].second) + " got " +
             std::to_string(b[i].second) + "; ";
      ++shown;
    }
  return out;
}

// How many plans of each kind a check priced.
struct Checked {
  int plans = 0, zero3_layered = 0, sparse = 0, vocab = 0;
};

// Every `stride`-th plan the request's search enumerates (the neighbours differ in one setting).
Checked check_every_zero_stage(const SearchRequest& request, const ExecutionOptions& exec,
                               std::size_t stride) {
  const SearchSpace space = search_space(request);
  SearchResult counts;
  Checked n;
  const std::vector<SearchJob> jobs = enumerate_plans(space, counts);
  for (std::size_t j = 0; j < jobs.size(); j += stride) {
    const SearchJob& job = jobs[j];
    spec::ParallelPlan plan = job.plan;
    spec::apply_defaults(plan);
    try {
      spec::validate(space.model, space.cluster, plan);
    } catch (const InputError&) {
      continue;  // op_costs prices valid plans only
    }
    const schedule::Placement placement = schedule::schedule_placement(plan.schedule);
    const std::vector<StageParameters> params = stage_parameters(space.model, plan, placement);
    const OpCosts want = op_costs(space.model, space.cluster, plan, placement, exec);
    for (int zero = 0; zero <= 3; ++zero) {
      if (zero == plan.zero_stage) continue;
      spec::ParallelPlan other = plan;
      other.zero_stage = zero;
      const PassCosts passes =
          pass_costs(space.model, space.cluster, other, placement, exec, params);
      const OpCosts got = op_costs(passes, space.model, space.cluster, plan, exec, params);
      const std::string diff = difference(want, got);
      EXPECT_EQ(diff, "") << plan_summary(plan, job.vocab_label)
                          << " priced from its passes at ZeRO " << zero;
      if (!diff.empty()) return n;
    }
    ++n.plans;
    n.zero3_layered += plan.zero_stage == 3 && spec::reduces_per_group(plan);
    n.sparse += plan.sparse_embedding_gradient;
    n.vocab += plan.vocab != schedule::VocabMode::None;
  }
  return n;
}

SearchRequest on_16_h100s(const char* model) {
  SearchRequest r;
  r.target.model = model;
  r.target.hardware = "h100-sxm";
  r.target.gpus = 16;
  r.target.global_batch = 64;
  return r;
}

TEST(PassCosts, AnyZeroStagesPassesPriceThePlanAsOpCostsDoes) {
  const SearchRequest dense = on_16_h100s("llama2-7b");
  ExecutionOptions engine;  // the embedded engine's ZeRO collectives, in series
  engine.overlap_sharded_comm = false;
  for (const auto& [exec, stride] :
       {std::pair{ExecutionOptions{}, std::size_t{5}}, std::pair{engine, std::size_t{7}}}) {
    const Checked n = check_every_zero_stage(dense, exec, stride);
    EXPECT_GT(n.plans, 100);
    EXPECT_GT(n.zero3_layered, 0);
    EXPECT_GT(n.sparse, 0);
    EXPECT_GT(n.vocab, 0);
  }
}

TEST(PassCosts, AnyZeroStagesPassesPriceAnMoePlanAsOpCostsDoes) {
  const Checked n = check_every_zero_stage(on_16_h100s("mixtral-8x7b"), ExecutionOptions{}, 11);
  EXPECT_GT(n.plans, 100);
  EXPECT_GT(n.zero3_layered, 0);
}

// A search prices a plan's offload variants in one copy of the plan's costs, each variant's
// offload undone before the next is applied: the same costs, bit for bit, as applying each to a
// fresh copy, in any order of the variants (checked over a search's plans, both offloads).
TEST(OffloadVariants, UndoneAndRedoneInOneCopyPriceAsAFreshCopy) {
  const SearchSpace space = search_space(on_16_h100s("llama2-7b"));
  SearchResult counts;
  const std::vector<SearchJob> jobs = enumerate_plans(space, counts);
  int checked = 0;
  for (std::size_t j = 0; j < jobs.size(); j += 13) {
    spec::ParallelPlan plan = without_offload(jobs[j].plan);
    spec::apply_defaults(plan);
    try {
      spec::validate(space.model, space.cluster, plan);
    } catch (const InputError&) {
      continue;
    }
    const schedule::Placement placement = schedule::schedule_placement(plan.schedule);
    const OpCosts base = op_costs(space.model, space.cluster, plan, placement);
    OpCosts reused = base;
    for (const auto& [activations, optimizer] :
         {std::pair{true, false}, std::pair{true, true}, std::pair{false, true},
          std::pair{true, false}, std::pair{false, true}}) {
      spec::ParallelPlan variant = plan;
      variant.offload_activations = activations;
      variant.offload_optimizer = optimizer;
      OpCosts fresh = base;
      apply_offload(fresh, variant, space.cluster.hardware);
      undo_offload(reused, base);
      apply_offload(reused, variant, space.cluster.hardware);
      ASSERT_EQ(difference(fresh, reused), "")
          << plan_summary(variant, jobs[j].vocab_label) << (activations ? " activations" : "")
          << (optimizer ? " optimizer" : "");
    }
    undo_offload(reused, base);
    ASSERT_EQ(difference(base, reused), "") << plan_summary(plan, jobs[j].vocab_label);
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

}  // namespace
}  // namespace pipetune::tuner
