#include "engine/schedule/schedule.hpp"

#include "engine/errors.hpp"

namespace pipetune::schedule {

std::string_view placement_name(Placement p) {
  return p == Placement::Linear ? "linear" : "v-shape";
}

std::string_view vocab_mode_name(VocabMode v) {
  switch (v) {
    case VocabMode::None:
      return "none";
    case VocabMode::Vocab1:
      return "vocab-1";
    case VocabMode::Vocab2:
      return "vocab-2";
    case VocabMode::Interlaced:
      return "interlaced";
  }
  return "?";
}

VocabMode parse_vocab_mode(std::string_view name) {
  for (VocabMode v :
       {VocabMode::None, VocabMode::Vocab1, VocabMode::Vocab2, VocabMode::Interlaced}) {
    if (vocab_mode_name(v) == name) return v;
  }
  throw InputError({"plan.vocab"}, "unknown vocabulary mode '" + std::string(name) +
                                       "' (valid: none, vocab-1, vocab-2, interlaced)");
}

std::size_t Schedule::op_count() const {
  std::size_t n = 0;
  for (const auto& r : ranks) n += r.size();
  return n;
}

}  // namespace pipetune::schedule
