// The optimizer ops' checks (AdamW's buffers and step, flat segments, gradient clipping), then
// dispatch to the backend's do_* implementation.
#include <algorithm>
#include <cmath>
#include <span>
#include <string>

#include "engine/errors.hpp"
#include "engine/tensor/backend.hpp"
#include "engine/tensor/backend_checks.hpp"
#include "engine/tensor/check.hpp"

namespace pipetune::tensor {

using namespace backend_checks;

float clip_coefficient(double global_norm, float max_norm) {
  if (!(max_norm > 0.0f)) {
    throw InputError("clip_grad_norm: max_norm must be positive, got " + std::to_string(max_norm));
  }
  const double c = static_cast<double>(max_norm) / (global_norm + 1e-6);
  return static_cast<float>(std::min(1.0, c));
}

AdamWBiasCorrections adamw_bias_corrections(const AdamWConfig& config, std::int64_t step) {
  const double t = static_cast<double>(step);
  return {static_cast<float>(1.0 - std::pow(static_cast<double>(config.beta1), t)),
          static_cast<float>(1.0 - std::pow(static_cast<double>(config.beta2), t))};
}

namespace {

// AdamW's four buffers of one length, and a step counted from 1.
void check_adamw(const char* op, ConstTensorView params, ConstTensorView grads, ConstTensorView m,
                 ConstTensorView v, std::int64_t step) {
  need(op, "params", params);
  length_n(op, "grads", grads, params.numel());
  length_n(op, "m", m, params.numel());
  length_n(op, "v", v, params.numel());
  PIPETUNE_TENSOR_CHECK(step >= 1, op, "step must count from 1, got " + std::to_string(step));
}

// Segments are non-empty, sorted, disjoint and within [0, n).
template <typename Segment>
void check_segments(const char* op, std::span<const Segment> segments, std::int64_t n) {
  std::int64_t last_end = 0;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    PIPETUNE_TENSOR_CHECK(s.begin >= last_end && s.begin < s.end && s.end <= n, op,
                          "segment " + std::to_string(i) + " [" + std::to_string(s.begin) + ", " +
                              std::to_string(s.end) +
                              ") is empty, out of order, overlaps the one " +
                              "before or leaves the " + std::to_string(n) + " elements");
    last_end = s.end;
  }
}

}  // namespace

void Backend::adamw_step(TensorView params, ConstTensorView grads, TensorView m, TensorView v,
                         const AdamWConfig& config, std::int64_t step) {
  check_adamw("adamw_step", params, grads, m, v, step);
  do_adamw_step(params, grads, m, v, config, step);
}

void Backend::adamw_step_segments(TensorView params, ConstTensorView grads, TensorView m,
                                  TensorView v, std::span<const AdamWSegment> segments,
                                  const AdamWConfig& config, std::int64_t step, float grad_scale) {
  const char* op = "adamw_step_segments";
  check_adamw(op, params, grads, m, v, step);
  PIPETUNE_TENSOR_CHECK(std::isfinite(grad_scale) && grad_scale >= 0.0f, op,
                        "grad_scale must be finite and >= 0, got " + std::to_string(grad_scale));
  check_segments(op, segments, params.numel());
  if (segments.empty()) return;
  do_adamw_step_segments(params, grads, m, v, segments, config, step, grad_scale);
}

double Backend::grad_sum_squares(ConstTensorView g) {
  need("grad_sum_squares", "g", g);
  return do_grad_sum_squares(g);
}

double Backend::grad_sum_squares_segments(ConstTensorView g,
                                          std::span<const FlatSegment> segments) {
  const char* op = "grad_sum_squares_segments";
  need(op, "g", g);
  check_segments(op, segments, g.numel());
  if (segments.empty()) return 0.0;
  return do_grad_sum_squares_segments(g, segments);
}

float Backend::clip_grad_norm(TensorView g, double global_norm, float max_norm) {
  need("clip_grad_norm", "g", g);
  const float c = clip_coefficient(global_norm, max_norm);
  if (c < 1.0f) do_scale(g, c);
  return c;
}

}  // namespace pipetune::tensor
