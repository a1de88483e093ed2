// Per-micro-batch state of RankRuntime (private to its implementation files).
#pragma once

#include <vector>

#include "engine/model/buffers.hpp"
#include "engine/runtime/rank_runtime.hpp"

namespace pipetune::runtime {

struct RankRuntime::ChunkState {
  std::vector<model::BlockActivations> blocks;
  std::vector<float> out;                      // (N, C) last block output
  std::vector<float> lnf, lnf_mean, lnf_rstd;  // last group: (N, C), (N), (N)
  std::vector<float> logits;                   // last group, plain: (N, V/tp)
  std::vector<float> gmax, gsum;               // last group, plain: (N) softmax statistics
  std::vector<float> dlnf;                     // last group: (N, C), kept for W
  std::vector<float> dlogits;                  // last group, plain: (N, V/tp), kept for W
  std::vector<float> demb;                     // group 0, plain: (N, C), kept for W
  bool backward_done = false;

  std::size_t bytes() const {
    std::size_t b = 0;
    for (const auto& a : blocks) b += a.bytes();
    for (const auto* v :
         {&out, &lnf, &lnf_mean, &lnf_rstd, &logits, &gmax, &gsum, &dlnf, &dlogits, &demb})
      b += model::bytes_of(*v);
    return b;
  }
};

struct RankRuntime::VocabState {
  std::vector<float> hidden;  // (N, C) final hidden state, from S to T
  std::vector<float> logits;  // (N, V/shards)
  bool stats_ready = false;
  std::vector<float> gmax, gsum, target;  // (N) combined over the vocabulary group
  std::vector<float> peer_max;            // (members, N) each member's maximum (Vocab2)
  int stats_uses_left = 0;
  bool output_done = false;  // T ran

  std::size_t bytes() const {
    return model::bytes_of(hidden) + model::bytes_of(logits) + model::bytes_of(gmax) +
           model::bytes_of(gsum) + model::bytes_of(target) + model::bytes_of(peer_max);
  }
};

}  // namespace pipetune::runtime
