// The small GELU model of the engine's runtime tests (hidden 32, 4 heads, FFN 64, vocabulary
// 61): a training step takes milliseconds, and its shapes are small enough to state what a layer
// keeps in closed form.
#pragma once

#include <string>

#include "engine/spec/load.hpp"
#include "engine/spec/model_spec.hpp"

namespace pipetune::testing {

inline spec::ModelSpec small_gelu_model(const std::string& name, int layers = 4, int seq_len = 16) {
  spec::ModelSpec m = spec::parse_model("layers = " + std::to_string(layers) + R"(
hidden = 32
heads = 4
ffn_hidden = 64
vocab = 61
seq_len = )" + std::to_string(seq_len) + R"(
activation = "gelu"
)",
                                        name);
  m.name = name;
  return m;
}

}  // namespace pipetune::testing
