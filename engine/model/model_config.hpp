// The model the engine trains: a GPT-2-style decoder (llm.c's architecture) built from a
// ModelSpec. Pre-LayerNorm blocks (LayerNorm -> causal multi-head attention -> residual,
// LayerNorm -> GELU MLP or MoE layer -> residual), learned token and position embeddings, a final
// LayerNorm and an untied output layer. Linear layers carry biases, as in GPT-2.
//
// The spec describes the Llama family too; the engine refuses what it does not implement
// (SwiGLU, grouped-query attention, tied embeddings) with an InputError naming the key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::model {

struct ModelConfig {
  std::string name;
  std::int64_t layers = 0;
  std::int64_t hidden = 0;  // C
  std::int64_t heads = 0;   // NH
  std::int64_t ffn = 0;     // F: MLP width (and each expert's)
  std::int64_t vocab = 0;   // V: token ids and softmax classes
  // Vocabulary tables have vocab_rows(shards) rows (spec::ModelSpec::vocab_divisible_by); the
  // rows from V on are padding: zero at initialisation, their logits masked out of the softmax.
  std::int64_t vocab_divisible_by = 1;
  std::int64_t seq_len = 0;  // maximum T (rows of the position embedding)
  std::int64_t experts = 1;
  std::int64_t top_k = 1;
  std::int64_t moe_every = 1;
  // Expert capacity = ceil(capacity_factor * tokens * top_k / experts); <= 0 means no token is
  // ever dropped (capacity = tokens), which makes routing independent of how tokens are batched.
  double capacity_factor = 0.0;
  float aux_loss_coef = 0.01f;  // weight of the load-balancing loss added to the training loss
  float init_std = 0.02f;       // GPT-2 initialisation
  // Activation recomputation (the plan's recompute): full keeps each block's input alone from F
  // to B, and B runs the block's forward again first; selective drops the stored attention
  // probabilities (the (T, T) matrix; the flash kernel keeps none) and B recomputes them. The
  // gradients are those of the run without: the recomputed forward is the same ops on the same
  // inputs.
  spec::Recompute recompute = spec::Recompute::None;
  // Chunked all-to-all (ParallelPlan::moe_chunks): each MoE layer's dispatch and combine in this
  // many chunks of the experts' slots, overlapped with the experts' GEMMs on a collective stream.
  int moe_chunks = 1;
  // Where each MoE layer's experts sit inside the TP group (ParallelPlan::expert_layouts).
  std::vector<spec::ExpertLayout> expert_layouts;

  bool is_moe() const { return experts > 1; }
  bool is_moe_layer(std::int64_t layer) const { return experts > 1 && layer % moe_every == 0; }
  spec::ExpertLayout expert_layout(std::int64_t layer) const {
    return spec::expert_layout_of(expert_layouts, layer / moe_every);
  }
  std::int64_t head_dim() const { return hidden / heads; }
  std::int64_t vocab_rows(int shards) const {
    return spec::padded_vocab(vocab, vocab_divisible_by, shards);
  }
};

// Throws InputError for specs the engine cannot train (names the key and value).
ModelConfig engine_model_config(const spec::ModelSpec& spec);

}  // namespace pipetune::model
