// The part of the model one rank holds: its layer groups (pipeline chunks) with their blocks
// (sharded over TP and, for experts, over EP), and its share of the vocabulary layers.
//
// Vocabulary layers:
//  - without vocabulary parallelism the input embedding sits with layer group 0 and the final
//    LayerNorm and output layer with the last group; their vocabulary rows are split over TP
//    (Megatron's vocab-parallel embedding and cross-entropy);
//  - with vocabulary parallelism (vocab-1/vocab-2) both tables are split over every rank of the
//    TP x PP slice (shard pp_rank * tp + tp_rank): S/T/IF/IB passes run on every rank.
// The tables have Vp = config.vocab_rows(n) rows for n shards: V itself without padding, when
// shards are balanced ranges [V*i/n, V*(i+1)/n) that differ by at most one row; else V rounded
// up to a multiple of vocab_divisible_by * n (Megatron-LM's padding), equal shards whose padding
// rows start at zero, and whose logits the runtime masks (kPaddedLogit) so no padding row takes
// part in the softmax or gets a gradient.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/parameters.hpp"
#include "engine/model/transformer_block.hpp"

namespace pipetune::model {

struct VocabShard {
  std::int64_t lo = 0;
  std::int64_t hi = 0;
  std::int64_t rows() const { return hi - lo; }
  // Local index of the first padding row of a vocabulary of `vocab` real rows; rows() when the
  // shard has none, 0 when it is all padding.
  std::int64_t first_padding(std::int64_t vocab) const {
    return hi <= vocab ? rows() : (lo >= vocab ? 0 : vocab - lo);
  }
};

// The logit written over a padding row's: exp(kPaddedLogit - max) is 0 for every real max, and
// it is finite, so a shard of padding alone still has a finite local max (no inf - inf).
inline constexpr float kPaddedLogit = -1e30f;

// Shard `index` of `count` balanced shards of `vocab` rows.
VocabShard vocab_shard(std::int64_t vocab, int count, int index);

struct LayerGroupPlacement {
  int group = 0;  // layer group index along the model
  std::int64_t first_layer = 0;
  std::int64_t layer_count = 0;
};

struct RankPlacement {
  int tp_size = 1, tp_rank = 0;
  int ep_size = 1, ep_rank = 0;
  int groups = 1;                           // layer groups in the whole model
  std::vector<LayerGroupPlacement> chunks;  // this rank's, by local chunk index
  bool vocab_parallel = false;              // S/T/IF/IB mode
  int vocab_shards = 1;                     // tp (plain) or tp * pp (vocabulary parallel)
  int vocab_index = 0;
  bool holds_position_embedding = false;  // wpe: with group 0 (replicated over TP)
};

class RankModel {
 public:
  RankModel(const ModelConfig& config, const RankPlacement& placement);
  RankModel(const RankModel&) = delete;
  RankModel& operator=(const RankModel&) = delete;

  const ModelConfig& config() const { return config_; }
  const RankPlacement& placement() const { return placement_; }

  // Blocks of local chunk c, in model order.
  std::vector<TransformerBlock>& blocks(int chunk) {
    return blocks_[static_cast<std::size_t>(chunk)];
  }
  bool chunk_is_first(int chunk) const;  // holds layer group 0
  bool chunk_is_last(int chunk) const;   // holds the last layer group

  bool has_embedding() const { return wte_ >= 0; }
  bool has_output() const { return head_ >= 0; }
  bool has_final_norm() const { return lnf_w_ >= 0; }
  VocabShard vocab() const { return vocab_; }
  // Rows of the whole (padded) vocabulary table this rank's shard belongs to.
  std::int64_t vocab_rows() const { return vocab_rows_; }
  int wte() const { return wte_; }
  int wpe() const { return wpe_; }
  int lnf_w() const { return lnf_w_; }
  int lnf_b() const { return lnf_b_; }
  int head() const { return head_; }

  ParameterSet dense;   // reduced over the DP group
  ParameterSet expert;  // reduced over the expert-DP group

 private:
  ModelConfig config_;
  RankPlacement placement_;
  std::vector<std::vector<TransformerBlock>> blocks_;
  VocabShard vocab_;
  std::int64_t vocab_rows_ = 0;
  int wte_ = -1, wpe_ = -1, lnf_w_ = -1, lnf_b_ = -1, head_ = -1;
};

}  // namespace pipetune::model
