// The whole model's gradient against central finite differences of its loss (an independent
// reference for everything the ops' own tests do not join: residuals, the block order, the final
// norm and output layer, the mean over micro-batches, MoE routing with its auxiliary loss).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"

namespace pipetune::runtime {
namespace {

spec::ModelSpec small_model(bool moe) {
  std::string toml = R"(layers = 2
hidden = 16
heads = 2
ffn_hidden = 32
vocab = 37
seq_len = 8
activation = "gelu"
)";
  // Every expert chosen (top_k = experts): top-k selection is piecewise constant, and with fewer
  // choices a perturbation anywhere upstream flips near-tied choices of some token, which makes
  // finite differences of the loss erratic (measured: the quotient wanders with eps). The ops'
  // own tests check routing; here the smooth model checks everything around it.
  if (moe) toml += "experts = 4\ntop_k = 4\n";
  spec::ModelSpec m = spec::parse_model(toml, moe ? "small-moe" : "small");
  m.name = moe ? "small-moe" : "small";
  return m;
}

TrainOptions one_step(const spec::ModelSpec& model) {
  TrainOptions o;
  o.model = model;
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = 2;
  o.steps = 1;
  o.threads_per_rank = 1;
  o.aux_loss_coef = 0.05f;
  return o;
}

// Loss at the given parameters (the first step's loss is computed before any update).
double loss_at(const spec::ModelSpec& model, const std::map<std::string, tensor::Tensor>& params) {
  TrainOptions o = one_step(model);
  o.initial_parameters = &params;
  const TrainResult r = train(o);
  return r.steps[0].loss + r.steps[0].aux_loss;
}

void check_model(bool moe) {
  const spec::ModelSpec model = small_model(moe);
  TrainOptions o = one_step(model);
  o.capture_gradients = true;
  o.adamw.lr = 0.0f;  // parameters unchanged: final_parameters are the ones differentiated
  o.adamw.weight_decay = 0.0f;
  o.capture_parameters = true;
  const TrainResult base = train(o);
  std::map<std::string, tensor::Tensor> params = base.final_parameters;
  int checked = 0;
  for (const auto& [name, grad] : base.first_step_gradients) {
    // A few spread-out elements of every tensor, the largest gradient among them.
    for (std::int64_t k : {std::int64_t{0}, grad.numel() / 3, grad.numel() - 1}) {
      const float eps = 1e-2f;
      const float saved = params[name][k];
      params[name][k] = saved + eps;
      const double up = loss_at(model, params);
      params[name][k] = saved - eps;
      const double down = loss_at(model, params);
      params[name][k] = saved;
      const double fd = (up - down) / (2.0 * eps);
      const double g = grad[k];
      EXPECT_NEAR(g, fd, 2e-3 + 2e-2 * std::fabs(fd)) << name << "[" << k << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 30);
}

TEST(ModelGradient, DenseMatchesFiniteDifferences) {
  check_model(false);
}

TEST(ModelGradient, MoeMatchesFiniteDifferences) {
  check_model(true);
}

}  // namespace
}  // namespace pipetune::runtime
