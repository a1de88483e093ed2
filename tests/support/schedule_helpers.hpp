// Shared by the schedule generator and simulator tests: building generator parameters, naming a
// case in failure messages, and a hand-built schedule with an overlapped pair.
#pragma once

#include <string>

#include "engine/schedule/generators.hpp"

namespace pipetune::schedule::testing {

inline GeneratorParams params(const std::string& name, int p, int m,
                              VocabMode vocab = VocabMode::None) {
  GeneratorParams g;
  g.name = name;
  g.stages = p;
  g.microbatches = m;
  g.vocab = vocab;
  return g;
}

inline std::string where(int p, int m) {
  return "p=" + std::to_string(p) + " m=" + std::to_string(m);
}

inline std::string where(const GeneratorParams& g) {
  return g.name + " vocab=" + std::string(vocab_mode_name(g.vocab)) + " " +
         where(g.stages, g.microbatches) + " v=" + std::to_string(g.chunks) +
         " G=" + std::to_string(g.group_size);
}

// Two linear stages, three micro-batches, 1F1B with rank 0's third forward overlapping the first
// backward: rank 0 F0 F1 [F2 & BW0] BW1 BW2, rank 1 F0 BW0 F1 BW1 F2 BW2.
inline Schedule one_overlapped_pair() {
  Schedule s;
  s.name = "hand";
  s.stages = 2;
  s.microbatches = 3;
  s.ranks = {{{OpKind::F, 0, 0},
              {OpKind::F, 0, 1},
              {OpKind::F, 0, 2},
              {OpKind::BW, 0, 0, true},
              {OpKind::BW, 0, 1},
              {OpKind::BW, 0, 2}},
             {{OpKind::F, 0, 0},
              {OpKind::BW, 0, 0},
              {OpKind::F, 0, 1},
              {OpKind::BW, 0, 1},
              {OpKind::F, 0, 2},
              {OpKind::BW, 0, 2}}};
  return s;
}

}  // namespace pipetune::schedule::testing
