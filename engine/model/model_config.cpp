#include "engine/model/model_config.hpp"

#include "engine/errors.hpp"
#include "engine/spec/validate.hpp"

namespace pipetune::model {

ModelConfig engine_model_config(const spec::ModelSpec& spec) {
  spec::validate(spec);
  const std::string who = "model '" + spec.name + "': ";
  if (spec.activation != spec::Activation::Gelu)
    throw InputError(who + "activation = \"" + std::string(spec::activation_name(spec.activation)) +
                     "\" is not supported by the engine (it trains gelu MLPs)");
  if (spec.kv_heads != 0 && spec.kv_heads != spec.heads)
    throw InputError(who + "kv_heads = " + std::to_string(spec.kv_heads) +
                     " (grouped-query attention) " +
                     "is not supported by the engine (kv_heads must equal heads = " +
                     std::to_string(spec.heads) + ")");
  if (spec.tied_embeddings)
    throw InputError(who + "tied_embeddings = true is not supported by the engine");
  ModelConfig c;
  c.name = spec.name;
  c.layers = spec.layers;
  c.hidden = spec.hidden;
  c.heads = spec.heads;
  c.ffn = spec.ffn_hidden != 0 ? spec.ffn_hidden
                               : spec::default_ffn_hidden(spec.hidden, spec.activation);
  c.vocab = spec.vocab;
  c.vocab_divisible_by = spec.vocab_divisible_by;
  c.seq_len = spec.seq_len;
  c.experts = spec.experts;
  c.top_k = spec.top_k;
  c.moe_every = spec.moe_every;
  return c;
}

}  // namespace pipetune::model
