// The result of MoE routing: which expert (and which slot in that expert's buffer) each token's
// top-k choices went to. Plain host data, produced by Backend::moe_router_forward and consumed by
// dispatch, combine and the auxiliary loss.
//
// Capacity rule (GShard order, deterministic): choices are placed rank by rank — every token's
// first choice in token order, then every token's second choice, ... — and a choice that finds
// its expert full is dropped (slot -1). Top-k ties go to the lower expert index.
#pragma once

#include <cstdint>
#include <vector>

namespace pipetune::tensor {

struct MoeRouting {
  std::int64_t tokens = 0;               // N
  std::int64_t experts = 0;              // E
  std::int64_t top_k = 0;                // k
  std::int64_t capacity = 0;             // slots per expert
  std::vector<std::int32_t> expert;      // (N, k) chosen expert, best first
  std::vector<std::int32_t> slot;        // (N, k) slot in that expert's buffer, -1 if dropped
  std::vector<std::int32_t> slot_token;  // (E, capacity) token in each slot, -1 if empty
  std::vector<std::int64_t> assigned;    // (E) choices routed to each expert, before dropping
  std::vector<std::int64_t> kept;        // (E) choices kept, after dropping

  std::int64_t dropped() const;
};

// Fills `routing` from the router's probabilities probs (tokens, experts), host memory, row-major:
// the top-k experts of each token by probability, then the capacity rule above. Every backend
// routes with this one function (the CUDA backend on probabilities copied back to the host), so
// the same probabilities give the same routing on every backend.
void route_top_k(const float* probs, std::int64_t tokens, std::int64_t experts, std::int64_t top_k,
                 std::int64_t capacity, MoeRouting& routing);

// Slots per expert: ceil(capacity_factor * tokens * top_k / experts), at least 1.
std::int64_t moe_capacity(std::int64_t tokens, std::int64_t experts, std::int64_t top_k,
                          double capacity_factor);

}  // namespace pipetune::tensor
