// ModelSpec: the shape of a decoder-only transformer (dense or MoE) and its parameter counts.
//
// Parameter counting convention (matches the published Llama / Mixtral counts exactly):
//  - attention: Q and O are hidden x hidden, K and V are hidden x (kv_heads * head_dim) (GQA);
//  - MLP: 2 matrices hidden x ffn_hidden for gelu, 3 for swiglu (gate, up, down); an MoE layer
//    has `experts` such MLPs plus a hidden x experts router;
//  - one norm weight vector (hidden) before attention, one before the MLP, one final norm;
//  - no linear biases and no learned position embeddings (both under 0.5% for the presets;
//    GPT-style models counted this way land within 0.3% of the Megatron SC21 formula).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pipetune::spec {

// MLP activation. Swiglu stands for every gated GLU (SwiGLU, GeGLU): three weight matrices.
enum class Activation { Gelu, Swiglu };

std::string_view activation_name(Activation a);
Activation parse_activation(std::string_view name);  // throws SpecError listing valid names

struct ModelSpec {
  std::string name;
  std::string description;
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;    // 0 = heads (no GQA); filled in by apply_defaults
  std::int64_t ffn_hidden = 0;  // 0 = default_ffn_hidden(); filled in by apply_defaults
  std::int64_t vocab = 0;
  std::int64_t seq_len = 0;
  std::int64_t experts = 1;    // 1 = dense
  std::int64_t top_k = 1;      // experts each token is routed to
  std::int64_t moe_every = 1;  // layer i is an MoE layer when experts > 1 and i % moe_every == 0
  Activation activation = Activation::Gelu;
  bool tied_embeddings = false;  // the output layer reuses the input embedding matrix
  // Megatron-LM's make_vocab_size_divisible_by: the vocabulary tables get padding rows up to a
  // multiple of this times the number of vocabulary shards, so the LM head's GEMMs have aligned
  // widths (GPT-2's 50257 becomes 50304). Padding rows start at zero and never take part in the
  // softmax. 1 = no padding rows (shards of a vocabulary they do not divide differ by one row).
  std::int64_t vocab_divisible_by = 1;

  bool operator==(const ModelSpec&) const = default;
};

// 4*hidden for gelu; for swiglu Llama's rule 2/3 * 4*hidden rounded up to a multiple of 256
// (gives Llama-2-7B's 11008 and 13B's 13824), which keeps the MLP's parameters near 8*hidden^2.
std::int64_t default_ffn_hidden(std::int64_t hidden, Activation activation);

// Fills the fields whose 0 means "default": kv_heads and ffn_hidden.
void apply_defaults(ModelSpec& model);

std::int64_t head_dim(const ModelSpec& model);  // hidden / heads
std::int64_t kv_dim(const ModelSpec& model);    // kv_heads * head_dim: width of K and of V
bool is_moe(const ModelSpec& model);
bool is_moe_layer(const ModelSpec& model, std::int64_t layer);  // layer is 0-based
std::int64_t moe_layer_count(const ModelSpec& model);
// MoE layers among layers 0..n-1 (is_moe_layer's), in closed form.
std::int64_t moe_layers_before(const ModelSpec& model, std::int64_t n);

// Parameter counts (see the convention at the top of this file).
std::int64_t attention_parameters(const ModelSpec& model);  // Q, K, V, O of one layer
std::int64_t mlp_parameters(const ModelSpec& model);        // one dense MLP (or one expert)
std::int64_t router_parameters(const ModelSpec& model);     // per MoE layer; 0 when dense
std::int64_t layer_parameters(const ModelSpec& model, std::int64_t layer);  // incl. its 2 norms
std::int64_t transformer_parameters(const ModelSpec& model);                // all layers
// Rows of the vocabulary tables split into `shards` (tp, or tp * pp with vocabulary
// parallelism): vocab rounded up to a multiple of vocab_divisible_by * shards, or vocab itself
// when vocab_divisible_by is 1. Parameter counts below stay the published, unpadded ones.
std::int64_t padded_vocab(std::int64_t vocab, std::int64_t divisible_by, std::int64_t shards);
std::int64_t padded_vocab(const ModelSpec& model, std::int64_t shards);
std::int64_t embedding_parameters(const ModelSpec& model);  // vocab * hidden
// The final norm plus the LM head (vocab * hidden), which is absent when embeddings are tied.
std::int64_t output_parameters(const ModelSpec& model);
std::int64_t total_parameters(const ModelSpec& model);
// Parameters one token passes through: MoE layers count top_k experts instead of all.
std::int64_t active_parameters(const ModelSpec& model);

}  // namespace pipetune::spec
