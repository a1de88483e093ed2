// Per-micro-batch state of RankRuntime (private to its implementation files).
#pragma once

#include <vector>

#include "engine/model/buffers.hpp"
#include "engine/runtime/rank_runtime.hpp"

namespace pipetune::runtime {

struct RankRuntime::ChunkState {
  std::vector<model::BlockActivations> blocks;
  model::Buffer out;                      // (N, C) last block output
  model::Buffer lnf, lnf_mean, lnf_rstd;  // last group: (N, C), (N), (N)
  model::Buffer logits;                   // last group, plain: (N, V/tp)
  model::Buffer gmax, gsum;               // last group, plain: (N) softmax statistics
  model::Buffer dlnf;                     // last group: (N, C), kept for W
  model::Buffer dlogits;                  // last group, plain: (N, V/tp), kept for W
  model::Buffer demb;                     // group 0, plain: (N, C), kept for W
  bool backward_done = false;

  template <class Fn>
  void for_each_buffer(Fn&& fn) {
    for (auto& a : blocks) a.for_each_buffer(fn);
    for (model::Buffer* v :
         {&out, &lnf, &lnf_mean, &lnf_rstd, &logits, &gmax, &gsum, &dlnf, &dlogits, &demb})
      fn(*v);
  }

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
  model::Buffer hidden;  // (N, C) final hidden state, from S to T
  model::Buffer logits;  // (N, V/shards)
  bool stats_ready = false;
  model::Buffer gmax, gsum, target;  // (N) combined over the vocabulary group
  model::Buffer peer_max;            // (members, N) each member's maximum (Vocab2)
  int stats_uses_left = 0;
  bool output_done = false;  // T ran

  std::size_t bytes() const {
    return model::bytes_of(hidden) + model::bytes_of(logits) + model::bytes_of(gmax) +
           model::bytes_of(gsum) + model::bytes_of(target) + model::bytes_of(peer_max);
  }
};

}  // namespace pipetune::runtime
