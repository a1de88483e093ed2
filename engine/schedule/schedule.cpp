#include "engine/schedule/schedule.hpp"

#include <algorithm>

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

std::vector<SliceShape> slice_shapes(int slices, const std::vector<int>& slice_tokens) {
  std::vector<SliceShape> out;
  if (slice_tokens.empty()) {
    for (int j = 0; j < slices; ++j) out.push_back({1.0 / slices, static_cast<double>(j) / slices});
    return out;
  }
  double total = 0.0;
  for (int t : slice_tokens) total += t;
  double before = 0.0;
  for (int t : slice_tokens) {
    out.push_back({t / total, before / total});
    before += t;
  }
  return out;
}

SliceShape slice_shape(const Schedule& s, int unit) {
  if (s.slices <= 1) return {};
  return slice_shapes(s.slices, s.slice_tokens)[static_cast<std::size_t>(s.slice_of(unit))];
}

std::vector<std::int64_t> slice_token_counts(const Schedule& s, std::int64_t seq) {
  const int k = std::max(1, s.slices);
  if (seq < k)
    throw InputError({"plan.slices"}, "schedule '" + s.name + "' cuts each sequence into " +
                                          std::to_string(k) + " token slices, but a sequence has " +
                                          std::to_string(seq) + " tokens");
  std::vector<std::int64_t> out;
  if (!s.slice_tokens.empty()) {
    std::int64_t sum = 0;
    for (int t : s.slice_tokens) {
      out.push_back(t);
      sum += t;
    }
    if (sum != seq)
      throw InputError({"plan.slice_tokens"}, "the token slices of schedule '" + s.name +
                                                  "' add up to " + std::to_string(sum) +
                                                  " tokens, but a sequence has " +
                                                  std::to_string(seq));
    return out;
  }
  for (int j = 0; j < k; ++j) out.push_back(seq / k + (j < seq % k ? 1 : 0));
  return out;
}

std::size_t Schedule::op_count() const {
  std::size_t n = 0;
  for (const auto& r : ranks) n += r.size();
  return n;
}

bool reduces_per_group(const Schedule& s) {
  for (const auto& ops : s.ranks)
    for (const Op& op : ops)
      if (is_reduction(op.kind)) return true;
  return false;
}

void add_gradient_reductions(Schedule& s) {
  for (auto& ops : s.ranks) {
    // Per chunk: the op its reduction follows, the last weight-gradient op (W or BW), or the
    // second op of the pair that one is in (never between the two). -1: a chunk no micro-batch
    // visits (partial pipelining) has no gradient to wait for, and reduces first.
    std::vector<std::ptrdiff_t> after(static_cast<std::size_t>(s.chunks), -1);
    for (std::size_t i = 0; i < ops.size(); ++i)
      if ((ops[i].kind == OpKind::W || ops[i].kind == OpKind::BW) && ops[i].chunk >= 0 &&
          ops[i].chunk < s.chunks) {
        const bool paired = i + 1 < ops.size() && ops[i + 1].overlaps_previous;
        after[static_cast<std::size_t>(ops[i].chunk)] = static_cast<std::ptrdiff_t>(i + paired);
      }
    const auto reductions_after = [&](std::ptrdiff_t i, std::vector<Op>& out) {
      for (int c = 0; c < s.chunks; ++c)
        if (after[static_cast<std::size_t>(c)] == i)
          out.push_back({OpKind::R, static_cast<std::int16_t>(c), 0});
    };
    std::vector<Op> out;
    out.reserve(ops.size() + after.size());
    reductions_after(-1, out);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      out.push_back(ops[i]);
      reductions_after(static_cast<std::ptrdiff_t>(i), out);
    }
    ops = std::move(out);
  }
}

}  // namespace pipetune::schedule
