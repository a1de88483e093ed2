#include "engine/spec/model_spec.hpp"

#include <algorithm>

#include "engine/errors.hpp"

namespace pipetune::spec {

std::string_view activation_name(Activation a) {
  switch (a) {
    case Activation::Gelu:
      return "gelu";
    case Activation::Swiglu:
      return "swiglu";
  }
  return "?";
}

Activation parse_activation(std::string_view name) {
  for (Activation a : {Activation::Gelu, Activation::Swiglu}) {
    if (activation_name(a) == name) return a;
  }
  throw SpecError("unknown activation '" + std::string(name) + "' (valid: gelu, swiglu)");
}

std::int64_t default_ffn_hidden(std::int64_t hidden, Activation activation) {
  if (activation == Activation::Gelu) return 4 * hidden;
  const std::int64_t multiple = 256;
  const std::int64_t two_thirds = 8 * hidden / 3;  // int(2 * 4h / 3), as Llama's code does
  return (two_thirds + multiple - 1) / multiple * multiple;
}

void apply_defaults(ModelSpec& model) {
  if (model.kv_heads == 0) model.kv_heads = model.heads;
  if (model.ffn_hidden == 0) model.ffn_hidden = default_ffn_hidden(model.hidden, model.activation);
}

std::int64_t head_dim(const ModelSpec& model) {
  return model.heads > 0 ? model.hidden / model.heads : 0;
}

std::int64_t kv_dim(const ModelSpec& model) {
  const std::int64_t kv = model.kv_heads > 0 ? model.kv_heads : model.heads;
  return kv * head_dim(model);
}

bool is_moe(const ModelSpec& model) {
  return model.experts > 1;
}

bool is_moe_layer(const ModelSpec& model, std::int64_t layer) {
  return is_moe(model) && model.moe_every > 0 && layer % model.moe_every == 0;
}

std::int64_t moe_layers_before(const ModelSpec& model, std::int64_t n) {
  if (!is_moe(model) || model.moe_every <= 0 || n <= 0) return 0;
  return (n + model.moe_every - 1) / model.moe_every;  // layers 0, k, 2k, ... below n
}

std::int64_t moe_layer_count(const ModelSpec& model) {
  return moe_layers_before(model, model.layers);
}

std::int64_t attention_parameters(const ModelSpec& model) {
  const std::int64_t h = model.hidden;
  return 2 * h * h + 2 * h * kv_dim(model);
}

std::int64_t mlp_parameters(const ModelSpec& model) {
  const std::int64_t matrices = model.activation == Activation::Swiglu ? 3 : 2;
  const std::int64_t ffn =
      model.ffn_hidden > 0 ? model.ffn_hidden : default_ffn_hidden(model.hidden, model.activation);
  return matrices * model.hidden * ffn;
}

std::int64_t router_parameters(const ModelSpec& model) {
  return is_moe(model) ? model.hidden * model.experts : 0;
}

std::int64_t layer_parameters(const ModelSpec& model, std::int64_t layer) {
  const std::int64_t norms = 2 * model.hidden;
  const std::int64_t mlp = is_moe_layer(model, layer)
                               ? model.experts * mlp_parameters(model) + router_parameters(model)
                               : mlp_parameters(model);
  return attention_parameters(model) + mlp + norms;
}

std::int64_t transformer_parameters(const ModelSpec& model) {
  const std::int64_t moe = moe_layer_count(model);
  const std::int64_t dense = model.layers - moe;
  std::int64_t sum = 0;
  if (dense > 0) sum += dense * layer_parameters(model, is_moe(model) ? 1 : 0);
  if (moe > 0) sum += moe * layer_parameters(model, 0);
  return sum;
}

std::int64_t padded_vocab(std::int64_t vocab, std::int64_t divisible_by, std::int64_t shards) {
  if (divisible_by <= 1) return vocab;
  const std::int64_t multiple = divisible_by * std::max<std::int64_t>(shards, 1);
  return (vocab + multiple - 1) / multiple * multiple;
}

std::int64_t padded_vocab(const ModelSpec& model, std::int64_t shards) {
  return padded_vocab(model.vocab, model.vocab_divisible_by, shards);
}

std::int64_t embedding_parameters(const ModelSpec& model) {
  return model.vocab * model.hidden;
}

std::int64_t output_parameters(const ModelSpec& model) {
  const std::int64_t final_norm = model.hidden;
  return final_norm + (model.tied_embeddings ? 0 : model.vocab * model.hidden);
}

std::int64_t total_parameters(const ModelSpec& model) {
  return embedding_parameters(model) + transformer_parameters(model) + output_parameters(model);
}

std::int64_t active_parameters(const ModelSpec& model) {
  const std::int64_t inactive_experts = is_moe(model) ? model.experts - model.top_k : 0;
  return total_parameters(model) -
         moe_layer_count(model) * inactive_experts * mlp_parameters(model);
}

}  // namespace pipetune::spec
