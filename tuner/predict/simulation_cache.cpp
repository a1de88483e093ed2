#include "tuner/predict/simulation_cache.hpp"

#include "engine/schedule/generators.hpp"

#include <cstring>

namespace pipetune::tuner {

namespace {

template <class T>
void append(std::string& out, const T& value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

// `sliced`: the attention and fixed parts, which only token slices read.
void append_table(std::string& out, const schedule::CostTable& t, bool sliced) {
  append(out, t.stages.size());
  for (const schedule::StageCosts& s : t.stages) {
    for (double c : s.op) append(out, c);
    for (double c : s.comm) append(out, c);
    if (sliced) {
      for (double c : s.attention) append(out, c);
      for (double c : s.fixed) append(out, c);
    }
    append(out, s.offload);
    append(out, s.run_gather);
    append(out, s.slowdown);
    append(out, s.failures.size());
    for (const schedule::StageCosts::Failure& f : s.failures) {
      append(out, f.at);
      append(out, f.restart_delay);
      append(out, f.new_replicas);
    }
    append(out, s.slow_replicas);
  }
  append(out, t.reroute_pool);
  append(out, t.held_reductions);
  append(out, t.p2p_latency);
  append(out, t.p2p_bytes);
  append(out, t.p2p_bandwidth);
  append(out, t.collective_time);
  append(out, t.pair_transfer.size());
  for (double c : t.pair_transfer) append(out, c);
  append(out, t.w_free_fraction);
  append(out, t.copies_block_compute);
}

// The schedule's name and sizes: the start of both keys.
std::string shape_key(const schedule::GeneratorParams& params) {
  std::string k = params.name;
  k.push_back('\0');
  append(k, params.stages);
  append(k, params.microbatches);
  append(k, params.chunks);
  append(k, params.group_size);
  append(k, static_cast<int>(params.vocab));
  return k;
}

}  // namespace

std::string SimulationCache::key(const schedule::GeneratorParams& params,
                                 const schedule::CostTable& costs,
                                 const std::vector<double>& activation_bytes) {
  std::string k = shape_key(params);
  append(k, params.memory_limit);
  append(k, params.skip_ratio.value_or(-1.0));
  append(k, params.layered_reduction);
  append(k, params.slices);
  append(k, params.slice_tokens.size());
  for (int t : params.slice_tokens) append(k, t);
  const bool sliced = schedule::supports_slices(params.name);
  append_table(k, params.costs, sliced);
  append_table(k, costs, sliced);
  append(k, activation_bytes.size());
  for (double b : activation_bytes) append(k, b);
  return k;
}

std::optional<sim::SimResult> SimulationCache::find(const std::string& key) const {
  std::lock_guard lock(mutex_);
  const auto it = results_.find(key);
  if (it == results_.end()) return std::nullopt;
  return it->second;
}

std::shared_ptr<const std::optional<schedule::Schedule>> SimulationCache::transformer_ops(
    const schedule::GeneratorParams& params) {
  std::string k = shape_key(params);  // the sizes transformer_ops_schedule reads, not the costs
  append(k, params.layered_reduction);
  {
    std::lock_guard lock(mutex_);
    if (const auto it = transformer_ops_.find(k); it != transformer_ops_.end()) return it->second;
  }
  // Outside the lock: two threads may both work a new shape out; the first kept wins.
  auto ops = std::make_shared<const std::optional<schedule::Schedule>>(
      schedule::transformer_ops_schedule(params));
  std::lock_guard lock(mutex_);
  if (transformer_ops_.size() >= capacity_) transformer_ops_.clear();
  return transformer_ops_.emplace(std::move(k), std::move(ops)).first->second;
}

void SimulationCache::insert(std::string key, const sim::SimResult& result) {
  std::lock_guard lock(mutex_);
  if (results_.size() >= capacity_) results_.clear();
  results_.emplace(std::move(key), result);
}

}  // namespace pipetune::tuner
