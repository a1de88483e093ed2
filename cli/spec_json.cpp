#include "cli/spec_json.hpp"

#include "engine/errors.hpp"

namespace pipetune::cli {

nlohmann::json model_to_json(const spec::ModelSpec& m) {
  return {{"name", m.name},
          {"layers", m.layers},
          {"hidden", m.hidden},
          {"heads", m.heads},
          {"kv_heads", m.kv_heads},
          {"ffn_hidden", m.ffn_hidden},
          {"vocab", m.vocab},
          {"seq_len", m.seq_len},
          {"experts", m.experts},
          {"top_k", m.top_k},
          {"moe_every", m.moe_every},
          {"activation", std::string(spec::activation_name(m.activation))},
          {"tied_embeddings", m.tied_embeddings}};
}

spec::ModelSpec model_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw InputError("model JSON: not an object");
  auto integer = [&](const char* key) -> std::int64_t {
    if (!j.contains(key) || !j[key].is_number_integer())
      throw InputError(std::string("model JSON: '") + key + "' missing or not an integer");
    return j[key].get<std::int64_t>();
  };
  spec::ModelSpec m;
  m.name = j.value("name", "");
  m.layers = integer("layers");
  m.hidden = integer("hidden");
  m.heads = integer("heads");
  m.kv_heads = integer("kv_heads");
  m.ffn_hidden = integer("ffn_hidden");
  m.vocab = integer("vocab");
  m.seq_len = integer("seq_len");
  m.experts = integer("experts");
  m.top_k = integer("top_k");
  m.moe_every = integer("moe_every");
  if (!j.contains("activation") || !j["activation"].is_string())
    throw InputError("model JSON: 'activation' missing or not a string");
  m.activation = spec::parse_activation(j["activation"].get<std::string>());
  m.tied_embeddings = j.value("tied_embeddings", false);
  return m;
}

}  // namespace pipetune::cli
