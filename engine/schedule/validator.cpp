#include "engine/schedule/validator.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/dependencies.hpp"
#include "engine/schedule/executor.hpp"

namespace pipetune::schedule {

namespace {

[[noreturn]] void fail(const Schedule& s, const std::string& what) {
  throw ScheduleError("schedule '" + s.name + "': " + what);
}

std::string where(int rank, const Op& op, std::size_t index) {
  return "rank " + std::to_string(rank) + " op " + std::to_string(index) + " (" + op_label(op) +
         ")";
}

struct TimelessHooks {
  double op(int, std::size_t, const Op&, const Requirement&, double) { return 0.0; }
  double barrier(const Event&, double) { return 0.0; }
  void wait(int, double) {}
};

// The schedule's sizes, its placement's chunks and an op list per rank.
void check_shape(const Schedule& s) {
  if (s.stages < 1) fail(s, "stages must be positive, got " + std::to_string(s.stages));
  if (s.microbatches < 1)
    fail(s, "micro-batches must be positive, got " + std::to_string(s.microbatches));
  if (s.chunks < 1) fail(s, "chunks must be positive, got " + std::to_string(s.chunks));
  if (s.placement == Placement::VShape && s.chunks != 2)
    fail(s,
         "a V-shaped placement needs exactly 2 chunks per rank, got " + std::to_string(s.chunks));
  if (static_cast<int>(s.ranks.size()) != s.stages)
    fail(s, "has op lists for " + std::to_string(s.ranks.size()) + " ranks, expected " +
                std::to_string(s.stages));
}

// How often each op appears: F, B, W and BW per (layer group, micro-batch), the vocabulary ops
// S, T, IF and IB per (rank, micro-batch).
struct OpCounts {
  std::vector<std::uint8_t> f, b, w, bw;
  std::vector<std::uint8_t> vocab[4];
  // Whether any op overlaps the one before it / is a gradient reduction: the checks of pairs
  // and reductions, a pass over every op each, find nothing to refuse without one.
  bool pairs = false, reductions = false;
};

std::size_t vocab_cell(const Schedule& s, int rank, int microbatch) {
  return static_cast<std::size_t>(rank) * static_cast<std::size_t>(s.microbatches) +
         static_cast<std::size_t>(microbatch);
}

// Counts every op, checking its micro-batch and chunk are in range, that vocabulary ops belong
// to the schedule, and that no op appears twice.
OpCounts count_ops(const Schedule& s) {
  const int m = s.microbatches;
  const auto cells = static_cast<std::size_t>(s.groups()) * static_cast<std::size_t>(m);
  OpCounts n;
  for (auto* v : {&n.f, &n.b, &n.w, &n.bw}) v->assign(cells, 0);
  const auto vcells = static_cast<std::size_t>(s.stages) * static_cast<std::size_t>(m);
  for (auto& v : n.vocab) v.assign(vcells, 0);

  // Noted in locals, not in `n` (returned through memory): a flag stored for every op would be
  // reloaded by the next one.
  bool pairs = false, reductions = false;
  // Each pass kind's counters, by the kind's number (F, B, W, BW, then S, T, IF, IB), and each
  // chunk's first cell on the rank at hand: an op's counter is found without a chain of tests.
  static_assert(static_cast<int>(OpKind::R) == kPassKindCount,
                "R is the one kind after the passes");
  std::uint8_t* const counters[kPassKindCount] = {
      n.f.data(),        n.b.data(),        n.w.data(),        n.bw.data(),
      n.vocab[0].data(), n.vocab[1].data(), n.vocab[2].data(), n.vocab[3].data()};
  std::vector<std::size_t> chunk_cell(static_cast<std::size_t>(s.chunks));
  for (int r = 0; r < s.stages; ++r) {
    const auto& ops = s.ranks[static_cast<std::size_t>(r)];
    for (int c = 0; c < s.chunks; ++c)
      chunk_cell[static_cast<std::size_t>(c)] =
          static_cast<std::size_t>(s.group_of(r, c)) * static_cast<std::size_t>(m);
    const std::size_t rank_cell = vocab_cell(s, r, 0);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      pairs |= op.overlaps_previous;
      const int kind = static_cast<int>(op.kind);
      if (kind >= kPassKindCount) {  // a gradient reduction: check_reductions
        reductions = true;
        continue;
      }
      if (op.microbatch < 0 || op.microbatch >= m)
        fail(s, where(r, op, i) + ": micro-batch out of range 0.." + std::to_string(m - 1));
      // One test, seldom true, for every op's chunk and the schedule's mode; the message after.
      const bool vocab_op = is_vocab_op(op.kind);
      if (vocab_op ? op.chunk != 0 || s.vocab == VocabMode::None
                   : op.chunk < 0 || op.chunk >= s.chunks) {
        if (!vocab_op)
          fail(s, where(r, op, i) + ": chunk out of range 0.." + std::to_string(s.chunks - 1));
        if (s.vocab == VocabMode::None)
          fail(s, where(r, op, i) + ": vocabulary op in a schedule without vocabulary parallelism");
        fail(s, where(r, op, i) + ": vocabulary ops carry chunk 0");
      }
      const std::size_t cell =
          (vocab_op ? rank_cell : chunk_cell[static_cast<std::size_t>(op.chunk)]) +
          static_cast<std::size_t>(op.microbatch);
      if (++counters[kind][cell] > 1)
        fail(s, where(r, op, i) + (vocab_op ? ": appears more than once on this rank"
                                            : ": appears more than once"));
    }
  }
  n.pairs = pairs;
  n.reductions = reductions;
  return n;
}

// Every (layer group, micro-batch) has its F, and a B with its W or one fused BW.
void check_every_pass_present(const Schedule& s, const OpCounts& n) {
  const int m = s.microbatches;
  for (int g = 0; g < s.groups(); ++g) {
    const int r = s.rank_of_group(g);
    const int c = s.chunk_of_group(g);
    for (int mb = 0; mb < m; ++mb) {
      const auto cell =
          static_cast<std::size_t>(g) * static_cast<std::size_t>(m) + static_cast<std::size_t>(mb);
      if (!s.visits(g, mb)) {  // partial pipelining: a group the micro-batch skips
        if (n.f[cell] || n.b[cell] || n.w[cell] || n.bw[cell])
          fail(s, "micro-batch " + std::to_string(mb) + " skips chunk " + std::to_string(c) +
                      " on rank " + std::to_string(r) + ", which still runs an op of it");
        continue;
      }
      const bool complete = n.f[cell] && n.b[cell] + n.bw[cell] == 1 && n.w[cell] == n.b[cell];
      if (complete) continue;
      // Messages are built only on failure: this loop runs for every (group, micro-batch).
      const std::string at = " of micro-batch " + std::to_string(mb) + " chunk " +
                             std::to_string(c) + " is missing on rank " + std::to_string(r);
      const std::string cell_name = "micro-batch " + std::to_string(mb) + " chunk " +
                                    std::to_string(c) + " on rank " + std::to_string(r);
      if (!n.f[cell]) fail(s, "F" + at);
      if (n.b[cell] + n.bw[cell] == 0) fail(s, "B or BW" + at);
      if (n.b[cell] && n.bw[cell]) fail(s, cell_name + " has both a B and a fused BW");
      if (n.b[cell] && !n.w[cell]) fail(s, "W" + at + " (its B was split)");
      fail(s, cell_name + " has a W after a fused BW");
    }
  }
}

// Vocabulary ops run on every rank, for every micro-batch.
void check_vocab_ops_present(const Schedule& s, const OpCounts& n) {
  static const char* names[4] = {"S", "T", "IF", "IB"};
  for (int k = 0; k < 4; ++k)
    for (int r = 0; r < s.stages; ++r)
      for (int mb = 0; mb < s.microbatches; ++mb)
        if (!n.vocab[k][vocab_cell(s, r, mb)])
          fail(s, std::string(names[k]) + " of micro-batch " + std::to_string(mb) +
                      " is missing on rank " + std::to_string(r) +
                      " (vocabulary ops run on every rank)");
}

// Barriers are collectives over the pipeline group: every rank must issue them in the same
// order, or a real run deadlocks inside the communicator.
void check_barrier_order(const Schedule& s) {
  // Each barrier as (kind, micro-batch) in one integer, its fields read one by one: copying the
  // whole event reads back, wider, what production_of stored in pieces.
  const auto key = [](const Event& e) {
    return static_cast<std::uint64_t>(e.kind) << 32 | static_cast<std::uint32_t>(e.microbatch);
  };
  const auto barrier = [](std::uint64_t k) {
    return Event{static_cast<EventKind>(k >> 32), -1, static_cast<std::int32_t>(k & 0xffffffffu)};
  };
  std::vector<std::uint64_t> reference;
  for (int r = 0; r < s.stages; ++r) {
    std::size_t i = 0;
    for (const Op& op : s.ranks[static_cast<std::size_t>(r)]) {
      const Production prod = production_of(s, r, op);
      if (!prod.present || !prod.joins_barrier) continue;
      const std::uint64_t k = key(prod.event);
      if (r == 0) {
        reference.push_back(k);
      } else if (i < reference.size() && k != reference[i]) {
        fail(s, "barrier order differs between ranks (a real run would deadlock): rank 0 issues " +
                    event_label(barrier(reference[i])) + " as barrier " + std::to_string(i) +
                    ", rank " + std::to_string(r) + " issues " + event_label(barrier(k)));
      }
      ++i;
    }
  }
}

// Overlapped pairs (Op::overlaps_previous): a forward with a B or BW, neither needing the other's
// product (they start together), and no op in two pairs.
void check_pairs(const Schedule& s) {
  for (int r = 0; r < s.stages; ++r) {
    const auto& ops = s.ranks[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& second = ops[i];
      if (!second.overlaps_previous) continue;
      if (i == 0) fail(s, where(r, second, i) + ": overlaps the op before it, but is first");
      const Op& first = ops[i - 1];
      const auto pair = [&] {  // the message's subject, made only for an error
        return "rank " + std::to_string(r) + " ops " + std::to_string(i - 1) + "-" +
               std::to_string(i) + " (" + pair_label(first, second) + ")";
      };
      if (first.overlaps_previous)
        fail(s, pair() + ": an op overlaps with at most one other (pairs, not runs of three)");
      const bool forward_backward = (first.kind == OpKind::F && is_backward_input(second.kind)) ||
                                    (second.kind == OpKind::F && is_backward_input(first.kind));
      if (!forward_backward)
        fail(s, pair() + ": an overlapped pair is a forward (F) with a backward (B or BW)");
      const Production made = production_of(s, r, first);
      const Requirement needs = requirement_of(s, r, second);
      if (made.present && needs.present && made.event == needs.event)
        fail(s, pair() + ": the second op needs the first one's " + event_label(made.event) +
                    ", so they cannot run together");
    }
  }
}

// Token slices (Schedule::slices): sizes, and the causal order on each rank. A slice's forward
// reads the keys and values its micro-batch's earlier slices left at each layer, so it comes after
// theirs; its backward adds to those slices' key and value gradients, so it comes before theirs.
void check_slices(const Schedule& s) {
  if (s.slices < 1) fail(s, "token slices must be positive, got " + std::to_string(s.slices));
  if (s.slices == 1 && s.slice_tokens.empty()) return;
  if (s.microbatches % s.slices != 0)
    fail(s, std::to_string(s.microbatches) + " units are not whole micro-batches of " +
                std::to_string(s.slices) + " token slices");
  if (!s.slice_tokens.empty()) {
    if (static_cast<int>(s.slice_tokens.size()) != s.slices)
      fail(s, "has " + std::to_string(s.slice_tokens.size()) + " slice lengths for " +
                  std::to_string(s.slices) + " token slices");
    for (int t : s.slice_tokens)
      if (t < 1) fail(s, "a token slice must hold at least one token, got " + std::to_string(t));
  }
  if (s.vocab != VocabMode::None)
    fail(s,
         "token slices and vocabulary parallelism do not combine (a vocabulary barrier joins "
         "whole micro-batches)");
  const int k = s.slices;
  for (int r = 0; r < s.stages; ++r) {
    const auto& ops = s.ranks[static_cast<std::size_t>(r)];
    // Per (chunk, unit): whether its forward / backward has run on this rank yet.
    const auto cells =
        static_cast<std::size_t>(s.chunks) * static_cast<std::size_t>(s.microbatches);
    std::vector<char> forward(cells, 0), backward(cells, 0);
    const auto cell = [&](int chunk, int unit) {
      return static_cast<std::size_t>(chunk) * static_cast<std::size_t>(s.microbatches) +
             static_cast<std::size_t>(unit);
    };
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.overlaps_previous)
        fail(s, where(r, op, i) + ": token slices and overlapped pairs do not combine");
      const int j = s.slice_of(op.microbatch);
      if (op.kind == OpKind::F) {
        if (j > 0 && !forward[cell(op.chunk, op.microbatch - 1)])
          fail(s, where(r, op, i) + ": the forward of token slice " + std::to_string(j) +
                      " runs before its micro-batch's slice " + std::to_string(j - 1) +
                      " (its attention needs the earlier slices' keys and values)");
        forward[cell(op.chunk, op.microbatch)] = 1;
      } else if (is_backward_input(op.kind)) {
        if (j + 1 < k && !backward[cell(op.chunk, op.microbatch + 1)])
          fail(s, where(r, op, i) + ": the backward of token slice " + std::to_string(j) +
                      " runs before its micro-batch's slice " + std::to_string(j + 1) +
                      " (the later slices' attention adds to its key and value gradients)");
        backward[cell(op.chunk, op.microbatch)] = 1;
      }
    }
  }
}

// Partial pipelining (Schedule::paths): one path per micro-batch, each a list of distinct layer
// groups that starts with the first (the embedding) and ends with the last (the loss).
void check_paths(const Schedule& s) {
  if (s.paths.empty()) return;
  if (s.paths.size() != static_cast<std::size_t>(s.microbatches))
    fail(s, "has " + std::to_string(s.paths.size()) + " paths for " +
                std::to_string(s.microbatches) + " micro-batches");
  if (s.vocab != VocabMode::None)
    fail(s,
         "skipped stages and vocabulary parallelism do not combine (a vocabulary barrier "
         "joins every pipeline rank)");
  if (s.slices > 1) fail(s, "skipped stages and token slices do not combine");
  const int last = s.groups() - 1;
  for (int mb = 0; mb < s.microbatches; ++mb) {
    const std::vector<int>& path = s.path(mb);
    const std::string who = "micro-batch " + std::to_string(mb) + "'s path";
    std::vector<char> seen(static_cast<std::size_t>(s.groups()), 0);
    for (int g : path) {
      if (g < 0 || g > last)
        fail(s,
             who + " names layer group " + std::to_string(g) + " of " + std::to_string(s.groups()));
      if (seen[static_cast<std::size_t>(g)]++)
        fail(s, who + " visits layer group " + std::to_string(g) + " twice");
    }
    if (path.empty() || path.front() != 0)
      fail(s, who +
                  " does not start with layer group 0 (the first, with the embedding): a path "
                  "keeps both ends");
    if (path.back() != last)
      fail(s, who + " does not end with layer group " + std::to_string(last) +
                  " (the last, with the loss): a path keeps both ends");
  }
}

// Layered gradient reduction (OpKind::R): none, or one per layer group, each on the group's rank
// after every op that adds to its weight gradients (W or BW), outside overlapped pairs.
void check_reductions(const Schedule& s) {
  const auto cells = static_cast<std::size_t>(s.stages) * static_cast<std::size_t>(s.chunks);
  std::vector<char> reduced(cells, 0);  // per (rank, chunk)
  const auto cell = [&](int rank, int chunk) -> char& {
    return reduced[static_cast<std::size_t>(rank) * static_cast<std::size_t>(s.chunks) +
                   static_cast<std::size_t>(chunk)];
  };
  std::size_t count = 0;
  for (int r = 0; r < s.stages; ++r) {
    const auto& ops = s.ranks[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (!is_reduction(op.kind)) {
        const bool adds_weight_gradient = op.kind == OpKind::W || op.kind == OpKind::BW;
        if (adds_weight_gradient && op.chunk >= 0 && op.chunk < s.chunks && cell(r, op.chunk))
          fail(s, where(r, op, i) + ": adds to the weight gradients of chunk " +
                      std::to_string(op.chunk) + " after their reduction (R." +
                      std::to_string(op.chunk) + ") on this rank");
        continue;
      }
      if (op.overlaps_previous || (i + 1 < ops.size() && ops[i + 1].overlaps_previous))
        fail(s, where(r, op, i) + ": a gradient reduction is not part of a pair");
      if (op.microbatch != 0)
        fail(s, where(r, op, i) + ": a gradient reduction carries micro-batch 0");
      if (op.chunk < 0 || op.chunk >= s.chunks)
        fail(s, where(r, op, i) + ": chunk out of range 0.." + std::to_string(s.chunks - 1));
      char& done = cell(r, op.chunk);
      if (done) fail(s, where(r, op, i) + ": appears more than once");
      done = 1;
      ++count;
    }
  }
  if (count == 0 || count == cells) return;
  for (int r = 0; r < s.stages; ++r)
    for (int c = 0; c < s.chunks; ++c)
      if (!cell(r, c))
        fail(s, "the gradient reduction of chunk " + std::to_string(c) + " is missing on rank " +
                    std::to_string(r) +
                    " (a schedule reduces every layer group's gradients, or none)");
}

}  // namespace

void validate_structure(const Schedule& s) {
  check_shape(s);
  check_paths(s);
  const OpCounts counts = count_ops(s);
  check_every_pass_present(s, counts);
  if (counts.pairs) check_pairs(s);
  check_slices(s);
  if (counts.reductions) check_reductions(s);
  if (s.vocab != VocabMode::None) {
    check_vocab_ops_present(s, counts);
    check_barrier_order(s);
  }
}

void validate(const Schedule& s) {
  validate_structure(s);
  TimelessHooks hooks;
  execute(s, hooks);
}

}  // namespace pipetune::schedule
