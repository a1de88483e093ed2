// Shared by the schedule generator and simulator tests: building generator parameters, naming a
// case in failure messages, and simulating a generated schedule with the costs it was planned on.
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

}  // namespace pipetune::schedule::testing
