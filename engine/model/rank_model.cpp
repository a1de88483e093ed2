#include "engine/model/rank_model.hpp"

#include "engine/errors.hpp"

namespace pipetune::model {

using tensor::Shape;

VocabShard vocab_shard(std::int64_t vocab, int count, int index) {
  if (count < 1 || index < 0 || index >= count)
    throw InputError("vocab_shard: shard " + std::to_string(index) + " of " +
                     std::to_string(count));
  if (vocab < count)
    throw InputError("vocab = " + std::to_string(vocab) + " is smaller than the " +
                     std::to_string(count) + " vocabulary shards");
  return {vocab * index / count, vocab * (index + 1) / count};
}

RankModel::RankModel(const ModelConfig& config, const RankPlacement& placement)
    : config_(config), placement_(placement) {
  const std::int64_t C = config.hidden, V = config.vocab;
  const int tp = placement.tp_size, tr = placement.tp_rank;
  bool first = false, last = false;
  for (const LayerGroupPlacement& g : placement.chunks) {
    first = first || g.group == 0;
    last = last || g.group == placement.groups - 1;
  }
  const bool vp = placement.vocab_parallel;
  // Shards of the padded table (rows V .. Vp - 1 are padding, all in the last shards).
  const std::int64_t Vp = config.vocab_rows(placement.vocab_shards);
  vocab_ = vocab_shard(Vp, placement.vocab_shards, placement.vocab_index);
  vocab_rows_ = Vp;
  const std::int64_t Vs = vocab_.rows();
  const ShardLayout vocab_rows{Vp, C, {{vocab_.lo, vocab_.hi}}, 0, C};
  const auto table = [&](const char* name) {
    ParamEntry e{name, Shape{Vs, C}, vocab_rows, false, true, Init::Normal, config.init_std};
    if (Vp > V) e.zero_rows_from = V;
    return e;
  };

  // Parameters are registered in model order (embedding, blocks, final norm, head) so the flat
  // buffers read like the model.
  if (vp || first) {
    wte_ = dense.add(table("wte"));
  }
  if (placement.holds_position_embedding)
    wpe_ = dense.add({"wpe", Shape{config.seq_len, C}, ShardLayout::whole(config.seq_len, C), true,
                      true, Init::Normal, config.init_std / 2});
  for (const LayerGroupPlacement& g : placement.chunks) {
    auto& list = blocks_.emplace_back();
    list.reserve(static_cast<std::size_t>(g.layer_count));
    for (std::int64_t l = g.first_layer; l < g.first_layer + g.layer_count; ++l)
      list.emplace_back(config, l, tp, tr, placement.ep_size, placement.ep_rank, dense, expert);
  }
  if (last) {
    const auto norm = [&](const char* name, Init init) {
      ParamEntry e{name, Shape{C}, ShardLayout::whole(C), true, false, init, 0.0f};
      e.sequence_parallel = true;  // applied to the rank's rows of the sequence
      return dense.add(std::move(e));
    };
    lnf_w_ = norm("lnf.w", Init::Ones);
    lnf_b_ = norm("lnf.b", Init::Zeros);
  }
  if (vp || last) head_ = dense.add(table("head.w"));
}

bool RankModel::chunk_is_first(int chunk) const {
  return placement_.chunks[static_cast<std::size_t>(chunk)].group == 0;
}

bool RankModel::chunk_is_last(int chunk) const {
  return placement_.chunks[static_cast<std::size_t>(chunk)].group == placement_.groups - 1;
}

}  // namespace pipetune::model
