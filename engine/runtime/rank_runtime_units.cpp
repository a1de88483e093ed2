// ZeRO-2 and 3 on a rank (ParallelPlan::zero_stage): the units a layer or vocabulary table
// opens around its passes (full values gathered, full gradients reduce-scattered), charged to
// the rank's memory ledger; and under sequence parallelism the TP sum of the gradients of the
// parameters applied to the rank's rows only.
#include <array>
#include <string_view>
#include <vector>

#include "engine/model/buffers.hpp"
#include "engine/runtime/rank_runtime.hpp"

namespace pipetune::runtime {

using tensor::Shape;
using tensor::TensorView;

namespace {

model::UnitBufferBytes unit_buffer_bytes(const model::RankModel& m) {
  model::UnitBufferBytes b = m.dense.unit_buffer_bytes();
  b += m.expert.unit_buffer_bytes();
  return b;
}

// Charges (or gives back) what the unit buffers grew (or shrank) by from `before` to `after`.
void account_unit_buffers(profiler::RankRecorder* recorder, const model::UnitBufferBytes& before,
                          const model::UnitBufferBytes& after) {
  if (recorder == nullptr) return;
  profiler::MemoryLedger& ledger = recorder->memory();
  const auto change = [&](profiler::MemoryCategory category, std::int64_t delta) {
    if (delta > 0) ledger.allocate(category, delta);
    if (delta < 0) ledger.release(category, -delta);
  };
  change(profiler::MemoryCategory::Parameters, after.values - before.values);
  change(profiler::MemoryCategory::Gradients, after.gradients - before.gradients);
  change(profiler::MemoryCategory::VocabularyLayers,
         after.vocabulary_values + after.vocabulary_gradients - before.vocabulary_values -
             before.vocabulary_gradients);
}

// visit(unit index) for each unit of `tables` (empty names skipped) and of `layer` (-1: none)
// that `set` holds, tables first.
template <class Visit>
void each_unit(const model::ParameterSet& set, const std::array<std::string_view, 2>& tables,
               std::int64_t layer, Visit&& visit) {
  for (std::string_view name : tables) {
    if (name.empty()) continue;
    if (const int u = set.find_unit(name); u >= 0) visit(u);
  }
  if (layer >= 0)
    if (const int u = set.find_unit(model::layer_unit_name(layer)); u >= 0) visit(u);
}

}  // namespace

RankRuntime::OpenedUnits RankRuntime::open_units(const Units& uses, const Units& computes) {
  OpenedUnits o;
  model::RankModel& m = *model_;
  const model::UnitBufferBytes before = unit_buffer_bytes(m);
  for (model::ParameterSet* set : {&m.dense, &m.expert}) {
    if (!set->parameters_sharded()) continue;
    std::vector<int> gathered;
    each_unit(*set, uses.tables, uses.layer, [&](int u) {
      if (set->parameter_unit_open(u)) return;
      set->open_parameter_unit(u);
      gathered.push_back(u);
      o.parameters.emplace_back(set, u);
    });
    if (!gathered.empty()) {
      profiler::ScopedSpan span(recorder_, profiler::SpanKind::AllGather, profiler::Stream::Comm,
                                -1, -1, -1, parameter_gather_name_);
      sharding_.gather_parameters(*set, gathered);
    }
  }
  for (model::ParameterSet* set : {&m.dense, &m.expert}) {
    if (!set->gradients_sharded()) continue;
    // A layer's unit held for its group's R op (group_holds.hpp) is reduced there, not after
    // the op.
    each_unit(*set, computes.tables, holds_gradients_ ? -1 : computes.layer, [&](int u) {
      set->open_gradient_unit(u);
      o.gradients = true;
    });
    if (holds_gradients_)
      each_unit(*set, {}, computes.layer, [&](int u) { set->open_gradient_unit(u); });
  }
  account_unit_buffers(recorder_, before, unit_buffer_bytes(m));
  return o;
}

void RankRuntime::close_units(const OpenedUnits& o) {
  const model::UnitBufferBytes before = unit_buffer_bytes(*model_);
  if (o.gradients) {
    profiler::ScopedSpan span(recorder_, profiler::SpanKind::ReduceScatter, profiler::Stream::Comm,
                              -1, -1, -1, gradient_scatter_name_);
    sharding_.reduce_gradients();
  }
  for (const auto& [set, u] : o.parameters) set->close_parameter_unit(u);
  account_unit_buffers(recorder_, before, unit_buffer_bytes(*model_));
}

void RankRuntime::release_reduced_units() {
  if (!sharding_.release_reduced) return;
  const model::UnitBufferBytes before = unit_buffer_bytes(*model_);
  sharding_.release_reduced();
  account_unit_buffers(recorder_, before, unit_buffer_bytes(*model_));
}

void RankRuntime::hold_parameters(int chunk) {
  model::RankModel& m = *model_;
  const model::UnitBufferBytes before = unit_buffer_bytes(m);
  const std::size_t blocks = m.blocks(chunk).size();
  for (model::ParameterSet* set : {&m.dense, &m.expert}) {
    if (!set->parameters_sharded()) continue;
    std::vector<int> gathered;
    for (std::size_t i = 0; i < blocks; ++i) {
      const int u = set->find_unit(model::layer_unit_name(layer_of(chunk, i)));
      if (u < 0 || set->parameter_unit_open(u)) continue;
      set->open_parameter_unit(u);
      gathered.push_back(u);
      held_parameters_.emplace_back(set, u);
    }
    if (!gathered.empty()) {
      profiler::ScopedSpan span(recorder_, profiler::SpanKind::AllGather, profiler::Stream::Comm,
                                -1, -1, -1, parameter_gather_name_);
      sharding_.gather_parameters(*set, gathered);
    }
  }
  account_unit_buffers(recorder_, before, unit_buffer_bytes(m));
}

void RankRuntime::release_held_parameters() {
  if (held_parameters_.empty()) return;
  const model::UnitBufferBytes before = unit_buffer_bytes(*model_);
  for (const auto& [set, u] : held_parameters_) set->close_parameter_unit(u);
  held_parameters_.clear();
  account_unit_buffers(recorder_, before, unit_buffer_bytes(*model_));
}

void RankRuntime::reduce_sequence_parallel_gradients() {
  if (!ctx_.sequence_parallel || sequence_parallel_grads_.empty()) return;
  model::ParameterSet& params = model_->dense;
  // Under ZeRO-2 the rank's shards of them: the TP ranks hold the same units laid out alike and
  // the same shard of each (they share their DP index), so the sum is element by element too.
  const bool sharded = params.gradients_sharded();
  const auto gradient = [&](int i) {
    if (!sharded) return params.grad(i);
    const model::OwnedPart part = params.owned_part(i);
    return TensorView{params.owned_grads().data() + part.owned_offset, Shape{part.count}};
  };
  std::int64_t elements = 0;
  for (int i : sequence_parallel_grads_) elements += gradient(i).numel();
  if (elements == 0) return;
  model::Buffer packed;
  // Every such gradient, back to back.
  TensorView all = sized(packed, Shape{elements});
  // copy(gradient, its slot in the packed buffer) for each of them.
  const auto each = [&](auto&& copy) {
    std::int64_t at = 0;
    for (int i : sequence_parallel_grads_) {
      TensorView g = gradient(i);
      if (g.numel() == 0) continue;
      copy(g, TensorView{all.data + at, Shape{g.numel()}});
      at += g.numel();
    }
  };
  each([](TensorView g, TensorView slot) { model::copy_values(g, slot); });
  ctx_.tp_all_reduce(all);
  each([](TensorView g, TensorView slot) { model::copy_values(slot, g); });
}

}  // namespace pipetune::runtime
