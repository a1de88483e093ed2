// The tuner's activation memory per layer under recomputation (layer_activation_bytes: Korthikanti
// et al. 2022, Table 2) against what the engine keeps when it trains the same plan on the CPU: with
// full recomputation a layer in flight keeps its input alone (2sbh in bf16, the engine's
// (B*T, C) floats), and selective recomputation drops exactly the stored softmax output the CPU
// engine's execution (cpu_engine_execution) counts. Measured as the difference between the
// engine's activation peaks at two depths (one rank per TP group, one micro-batch, one step: the
// peak is the end of the forward). With sequence parallelism the kept input is 1/tp of it.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "tuner/cost/analytic_costs.hpp"
#include "tuner/cost/execution.hpp"

namespace pipetune::tuner {
namespace {

spec::ModelSpec model_of(int layers) {
  spec::ModelSpec m = spec::parse_model("layers = " + std::to_string(layers) + R"(
hidden = 64
heads = 4
ffn_hidden = 128
vocab = 97
seq_len = 24
activation = "gelu"
)",
                                        "recompute-memory");
  m.name = "recompute-memory";
  return m;
}

spec::ParallelPlan plan_of(int tp, spec::Recompute recompute, bool sequence_parallel = false) {
  spec::ParallelPlan p;
  p.tp = tp;
  p.sequence_parallel = sequence_parallel;
  p.micro_batch_size = 3;
  p.microbatches = 1;
  p.recompute = recompute;
  return p;
}

// What one more layer adds to the peak of rank 0 (a TP rank of the only stage).
double engine_bytes_per_layer(int tp, spec::Recompute recompute, bool sequence_parallel = false) {
  const auto peak = [&](int layers) {
    runtime::TrainOptions o;
    o.model = model_of(layers);
    o.plan = plan_of(tp, recompute, sequence_parallel);
    o.steps = 1;
    o.threads_per_rank = 1;
    const runtime::TrainResult r = runtime::train(o);
    return static_cast<double>(r.ranks.at(0).peak_activation_bytes);
  };
  return (peak(5) - peak(3)) / 2.0;
}

double model_bytes_per_layer(int tp, spec::Recompute recompute, bool sequence_parallel = false) {
  const ExecutionOptions cpu = cpu_engine_execution();
  AnalyticAssumptions a;
  a.flash_attention = cpu.flash_attention;
  a.stores_attention_probabilities = cpu.stores_attention_probabilities;
  a.bytes_per_value = static_cast<int>(cpu.activation_bytes);
  spec::ModelSpec m = model_of(4);
  spec::apply_defaults(m);
  return layer_activation_bytes(m, plan_of(tp, recompute, sequence_parallel), a);
}

class RecomputeMemory : public ::testing::TestWithParam<int> {};

TEST_P(RecomputeMemory, FullRecomputationKeepsWhatTheModelSays) {
  const int tp = GetParam();
  EXPECT_EQ(engine_bytes_per_layer(tp, spec::Recompute::Full),
            model_bytes_per_layer(tp, spec::Recompute::Full));
}

TEST_P(RecomputeMemory, SelectiveRecomputationSavesWhatTheModelSays) {
  const int tp = GetParam();
  const double engine = engine_bytes_per_layer(tp, spec::Recompute::None) -
                        engine_bytes_per_layer(tp, spec::Recompute::Selective);
  const double model = model_bytes_per_layer(tp, spec::Recompute::None) -
                       model_bytes_per_layer(tp, spec::Recompute::Selective);
  EXPECT_GT(model, 0.0);
  EXPECT_EQ(engine, model);
}

// With sequence parallelism the kept input is this TP rank's rows: 2sbh/t.
INSTANTIATE_TEST_SUITE_P(Tp, RecomputeMemory, ::testing::Values(1, 2),
                         [](const auto& info) { return "tp" + std::to_string(info.param); });

TEST(RecomputeMemorySequenceParallel, FullRecomputationKeepsWhatTheModelSays) {
  // With sequence parallelism the kept input is this TP rank's rows: 2sbh/t.
  for (int tp : {2, 4}) {
    EXPECT_EQ(engine_bytes_per_layer(tp, spec::Recompute::Full, true),
              model_bytes_per_layer(tp, spec::Recompute::Full, true))
        << "tp " << tp;
  }
}

}  // namespace
}  // namespace pipetune::tuner
