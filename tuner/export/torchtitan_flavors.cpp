// torchtitan's registered model flavors pipetune can name, with the shapes their arguments give
// (pytorch/torchtitan torchtitan/models/llama3/__init__.py@238fa99:29-100 llama3_args; at
// b5bcd76 the same shapes are llama3_configs, __init__.py@b5bcd76:114-366, with the FFN width of
// torchtitan/models/common/feed_forward.py@b5bcd76:18-31 compute_ffn_hidden_dim).
#include <algorithm>

#include "tuner/export/torchtitan_rules.hpp"

namespace pipetune::tuner {

namespace {

// TransformerModelArgs' defaults (torchtitan/models/llama3/model/args.py@238fa99:29-35).
constexpr std::int64_t kLlama3Vocab = 128256;
constexpr std::int64_t kLlama3MultipleOf = 256;
// debug_model.toml's tokenizer (the test assets); the others' come from
// scripts/download_hf_assets.py into ./assets/hf/<repo>.
constexpr const char* kDebugAssets = "./tests/assets/tokenizer";

// FeedForward's hidden width for hidden_dim = 4 * dim: two thirds of it, times
// ffn_dim_multiplier when one is given, rounded up to a multiple of multiple_of
// (torchtitan/models/llama3/model/model.py@238fa99:330-336, 378).
std::int64_t llama3_ffn_hidden(std::int64_t dim, std::int64_t multiple_of, double multiplier) {
  std::int64_t hidden = 2 * (4 * dim) / 3;
  if (multiplier > 0) hidden = static_cast<std::int64_t>(multiplier * static_cast<double>(hidden));
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

// One llama3_args entry: n_kv_heads 0 means None (as many as n_heads), multiplier 0 None.
TorchtitanFlavor llama3(const char* flavor, std::int64_t dim, std::int64_t n_layers,
                        std::int64_t n_heads, std::int64_t n_kv_heads, std::int64_t vocab,
                        double ffn_dim_multiplier, std::int64_t multiple_of,
                        const char* hf_assets_path) {
  TorchtitanModelShape s;
  s.dim = dim;
  s.n_layers = n_layers;
  s.n_heads = n_heads;
  s.n_kv_heads = n_kv_heads > 0 ? n_kv_heads : n_heads;
  s.vocab_size = vocab;
  s.ffn_hidden = llama3_ffn_hidden(dim, multiple_of, ffn_dim_multiplier);
  return {"llama3", flavor, s, hf_assets_path, ""};
}

// A b5bcd76 flavor: its 238fa99 shape, and the config function of torchtitan's own run of it.
TorchtitanFlavor with_base(TorchtitanFlavor f, const char* base_config) {
  f.base_config = base_config;
  return f;
}

}  // namespace

const std::vector<TorchtitanFlavor>& torchtitan_flavors() {
  // llama3_args@238fa99 (lines): the _flex and _varlen variants share their base's shape and
  // differ only in the attention kernel.
  static const std::vector<TorchtitanFlavor> flavors = {
      llama3("debugmodel", 256, 6, 16, 0, 2048, 0, kLlama3MultipleOf, kDebugAssets),  // l.30-32
      llama3("debugmodel_flex_attn", 256, 6, 16, 0, 2048, 0, kLlama3MultipleOf,
             kDebugAssets),  // l.33-41
      llama3("debugmodel_varlen_attn", 256, 6, 16, 0, 2048, 0, kLlama3MultipleOf,
             kDebugAssets),  // l.42-50
      llama3("8B", 4096, 32, 32, 8, kLlama3Vocab, 1.3, 1024,
             "./assets/hf/Llama-3.1-8B"),  // l.51-59
      llama3("8B_flex", 4096, 32, 32, 8, kLlama3Vocab, 1.3, 1024,
             "./assets/hf/Llama-3.1-8B"),  // l.60-70
      llama3("8B_varlen", 4096, 32, 32, 8, kLlama3Vocab, 1.3, 1024,
             "./assets/hf/Llama-3.1-8B"),  // l.71-81
      llama3("70B", 8192, 80, 64, 8, kLlama3Vocab, 1.3, 4096,
             "./assets/hf/Llama-3.1-70B"),  // l.82-90
      llama3("405B", 16384, 126, 128, 8, kLlama3Vocab, 1.2, 4096,
             "./assets/hf/Llama-3.1-405B"),  // l.91-99
  };
  return flavors;
}

const std::vector<TorchtitanFlavor>& torchtitan_config_flavors() {
  // llama3_configs@b5bcd76 (lines of __init__.py) and config_registry.py's runs (lines): the
  // attention kernel is model_registry's argument now, not a flavor.
  static const std::vector<TorchtitanFlavor> flavors = {
      with_base(llama3("debugmodel", 256, 6, 16, 0, 2048, 0, kLlama3MultipleOf, kDebugAssets),
                "llama3_debugmodel"),  // l.114-145; registry l.38
      with_base(llama3("8B", 4096, 32, 32, 8, kLlama3Vocab, 1.3, 1024, "./assets/hf/Llama-3.1-8B"),
                "llama3_8b"),  // l.236-275; registry l.194
      with_base(
          llama3("70B", 8192, 80, 64, 8, kLlama3Vocab, 1.3, 4096, "./assets/hf/Llama-3.1-70B"),
          "llama3_70b"),  // l.277-316; registry l.267
      with_base(
          llama3("405B", 16384, 126, 128, 8, kLlama3Vocab, 1.2, 4096, "./assets/hf/Llama-3.1-405B"),
          "llama3_405b"),  // l.318-357; registry l.305
  };
  return flavors;
}

TorchtitanModelShape torchtitan_shape(const spec::ModelSpec& m) {
  TorchtitanModelShape s;
  s.dim = m.hidden;
  s.n_layers = m.layers;
  s.n_heads = m.heads;
  s.n_kv_heads = m.kv_heads > 0 ? m.kv_heads : m.heads;
  s.vocab_size = m.vocab;
  s.ffn_hidden = m.ffn_hidden;
  s.experts = m.experts;
  s.swiglu = m.activation == spec::Activation::Swiglu;
  s.tied_embeddings = m.tied_embeddings;
  return s;
}

std::optional<TorchtitanFlavor> torchtitan_flavor_for(
    const spec::ModelSpec& model, const std::vector<TorchtitanFlavor>& flavors) {
  const TorchtitanModelShape shape = torchtitan_shape(model);
  // The first of equal shapes: the base flavor, with torchtitan's default attention (sdpa).
  const auto it = std::find_if(flavors.begin(), flavors.end(),
                               [&](const TorchtitanFlavor& f) { return f.shape == shape; });
  if (it == flavors.end()) return std::nullopt;
  return *it;
}

}  // namespace pipetune::tuner
