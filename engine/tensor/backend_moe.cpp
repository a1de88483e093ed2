// The MoE ops' shape and routing checks, then dispatch to the backend's do_* implementation.
#include <string>

#include "engine/tensor/backend.hpp"
#include "engine/tensor/backend_checks.hpp"
#include "engine/tensor/check.hpp"

namespace pipetune::tensor {

using namespace backend_checks;

namespace {

void check_routing(const char* op, const MoeRouting& r) {
  const auto nk = static_cast<std::size_t>(r.tokens * r.top_k);
  PIPETUNE_TENSOR_CHECK(
      r.expert.size() == nk && r.slot.size() == nk &&
          r.slot_token.size() == static_cast<std::size_t>(r.experts * r.capacity) &&
          r.assigned.size() == static_cast<std::size_t>(r.experts),
      op, "routing is inconsistent (not from moe_router_forward?)");
}

void check_expert_buffer(const char* op, const char* name, ConstTensorView buf, const MoeRouting& r,
                         std::int64_t channels) {
  rank_is(op, name, buf, 3);
  PIPETUNE_TENSOR_CHECK(
      buf.shape[0] == r.experts && buf.shape[1] == r.capacity && buf.shape[2] == channels, op,
      sh(name, buf) + " must be (experts=" + std::to_string(r.experts) +
          ", capacity=" + std::to_string(r.capacity) + ", C=" + std::to_string(channels) + ")");
}

void check_probs(const char* op, ConstTensorView probs, const MoeRouting& r) {
  rank_is(op, "probs", probs, 2);
  PIPETUNE_TENSOR_CHECK(probs.shape[0] == r.tokens && probs.shape[1] == r.experts, op,
                        sh("probs", probs) + " must be (N=" + std::to_string(r.tokens) +
                            ", E=" + std::to_string(r.experts) + ")");
}

}  // namespace

void Backend::moe_router_forward(ConstTensorView logits, std::int64_t top_k, std::int64_t capacity,
                                 TensorView probs, MoeRouting& routing) {
  const char* op = "moe_router_forward";
  rank_is(op, "logits", logits, 2);
  same_shape(op, "logits", logits, "probs", probs);
  PIPETUNE_TENSOR_CHECK(top_k >= 1 && top_k <= logits.shape[1] && capacity >= 1, op,
                        "top_k " + std::to_string(top_k) + " / capacity " +
                            std::to_string(capacity) + " invalid for " + sh("logits", logits));
  do_moe_router_forward(logits, top_k, capacity, probs, routing);
}

void Backend::moe_router_backward(ConstTensorView probs, ConstTensorView dprobs,
                                  TensorView dlogits) {
  rank_is("moe_router_backward", "probs", probs, 2);
  same_shape("moe_router_backward", "probs", probs, "dprobs", dprobs);
  same_shape("moe_router_backward", "probs", probs, "dlogits", dlogits);
  do_moe_router_backward(probs, dprobs, dlogits);
}

float Backend::moe_aux_loss(ConstTensorView probs, const MoeRouting& routing) {
  check_routing("moe_aux_loss", routing);
  check_probs("moe_aux_loss", probs, routing);
  return do_moe_aux_loss(probs, routing);
}

void Backend::moe_aux_loss_backward(const MoeRouting& routing, float grad_scale,
                                    TensorView dprobs) {
  check_routing("moe_aux_loss_backward", routing);
  check_probs("moe_aux_loss_backward", dprobs, routing);
  do_moe_aux_loss_backward(routing, grad_scale, dprobs);
}

void Backend::moe_dispatch(ConstTensorView x, const MoeRouting& routing, TensorView expert_in) {
  const char* op = "moe_dispatch";
  check_routing(op, routing);
  rank_is(op, "x", x, 2);
  PIPETUNE_TENSOR_CHECK(x.shape[0] == routing.tokens, op,
                        sh("x", x) + " rows != routed tokens " + std::to_string(routing.tokens));
  check_expert_buffer(op, "expert_in", expert_in, routing, x.shape[1]);
  do_moe_dispatch(x, routing, expert_in);
}

void Backend::moe_dispatch_backward(ConstTensorView dexpert_in, const MoeRouting& routing,
                                    TensorView dx) {
  const char* op = "moe_dispatch_backward";
  check_routing(op, routing);
  rank_is(op, "dx", dx, 2);
  PIPETUNE_TENSOR_CHECK(dx.shape[0] == routing.tokens, op,
                        sh("dx", dx) + " rows != routed tokens " + std::to_string(routing.tokens));
  check_expert_buffer(op, "dexpert_in", dexpert_in, routing, dx.shape[1]);
  do_moe_dispatch_backward(dexpert_in, routing, dx);
}

void Backend::moe_combine(ConstTensorView expert_out, ConstTensorView probs,
                          const MoeRouting& routing, TensorView y) {
  const char* op = "moe_combine";
  check_routing(op, routing);
  check_probs(op, probs, routing);
  rank_is(op, "y", y, 2);
  PIPETUNE_TENSOR_CHECK(y.shape[0] == routing.tokens, op,
                        sh("y", y) + " rows != routed tokens " + std::to_string(routing.tokens));
  check_expert_buffer(op, "expert_out", expert_out, routing, y.shape[1]);
  do_moe_combine(expert_out, probs, routing, y);
}

void Backend::moe_combine_backward(ConstTensorView dy, ConstTensorView expert_out,
                                   ConstTensorView probs, const MoeRouting& routing,
                                   TensorView dexpert_out, TensorView dprobs) {
  const char* op = "moe_combine_backward";
  check_routing(op, routing);
  check_probs(op, probs, routing);
  same_shape(op, "probs", probs, "dprobs", dprobs);
  rank_is(op, "dy", dy, 2);
  PIPETUNE_TENSOR_CHECK(dy.shape[0] == routing.tokens, op,
                        sh("dy", dy) + " rows != routed tokens " + std::to_string(routing.tokens));
  check_expert_buffer(op, "expert_out", expert_out, routing, dy.shape[1]);
  same_shape(op, "expert_out", expert_out, "dexpert_out", dexpert_out);
  do_moe_combine_backward(dy, expert_out, probs, routing, dexpert_out, dprobs);
}

}  // namespace pipetune::tensor
