// Simulations shared between the evaluators of a search (one per scoring thread): plans that
// differ only in what the schedule does not see (the ZeRO stage, for example) have the same
// generator parameters and op costs, hence the same schedule and simulation, so each is run once.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/schedule/generators.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::tuner {

class SimulationCache {
 public:
  explicit SimulationCache(std::size_t capacity = 4096) : capacity_(capacity) {}

  // The exact inputs of a generate + simulate: generator parameters (costs included), the cost
  // table simulated with, and the activation bytes per micro-batch.
  static std::string key(const schedule::GeneratorParams& params, const schedule::CostTable& costs,
                         const std::vector<double>& activation_bytes);

  std::optional<sim::SimResult> find(const std::string& key) const;
  // Thread-safe; a full cache starts over (a search revisits recent shapes).
  void insert(std::string key, const sim::SimResult& result);

  // schedule::transformer_ops_schedule(params), worked out once for all evaluators: it depends on
  // the sizes only (interleaved 1F1B's takes a planning run to find). Thread-safe; throws as
  // transformer_ops_schedule does.
  std::shared_ptr<const std::optional<schedule::Schedule>> transformer_ops(
      const schedule::GeneratorParams& params);

 private:
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, sim::SimResult> results_;
  std::unordered_map<std::string, std::shared_ptr<const std::optional<schedule::Schedule>>>
      transformer_ops_;
};

}  // namespace pipetune::tuner
