// Schedule: for each pipeline rank an ordered list of ops. The same object is executed by the
// engine and simulated by the tuner, so a prediction and a measurement compare span for span.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/schedule/op.hpp"

namespace pipetune::schedule {

// Where layer groups sit. Groups are numbered 0..G-1 along the model (G = p*v).
//  Linear: chunk c of rank r is group c*p + r (1F1B, interleaved, ZB-H1/H2).
//  VShape: v = 2, chunk 0 of rank r is group r, chunk 1 is group 2p-1-r (ZB-V, V-Half, V-Min,
//          DualPipeV); the loss sits on rank 0.
enum class Placement { Linear, VShape };

// Vocabulary parallelism: the output layer and input embedding are sharded over all pipeline
// ranks and run as S/T/IF/IB ops on every rank, joined by barriers (all-reduces).
//  Vocab1: two barriers per micro-batch (C1 after S, C2 after T); B of the last group needs C2.
//  Vocab2: one barrier (C1 carries the precomputed input gradient); B of the last group needs C1.
//  Interlaced: like Vocab1, but the passes run synchronously (the rank waits for each barrier).
enum class VocabMode { None, Vocab1, Vocab2, Interlaced };

struct PlannedTime;     // planned_time.hpp
struct ExecutionOrder;  // execution_order.hpp

std::string_view placement_name(Placement p);
std::string_view vocab_mode_name(VocabMode v);
VocabMode parse_vocab_mode(std::string_view name);  // throws InputError listing valid names

struct Schedule {
  std::string name;      // generator name, e.g. "1f1b"
  int stages = 1;        // p: pipeline ranks
  int microbatches = 1;  // m
  int chunks = 1;        // v: layer groups per rank
  Placement placement = Placement::Linear;
  VocabMode vocab = VocabMode::None;
  std::vector<std::vector<Op>> ranks;  // ranks[r] = ops of pipeline rank r in execution order
  // Token slices (TeraPipe): each micro-batch of data is cut along the sequence into `slices`
  // pieces that go down the pipeline one after another. The ops' micro-batch index then counts
  // pieces: unit u is slice u % slices of data micro-batch u / slices, and `microbatches` is
  // m * slices. A slice's attention needs the keys and values of the same micro-batch's earlier
  // slices at the same layer, so a rank runs a micro-batch's forwards in slice order and its
  // backwards in reverse (the validator checks both).
  int slices = 1;
  // Tokens of each slice (their sum is the sequence length); empty = equal slices.
  std::vector<int> slice_tokens;
  // Partial pipelining (SkipPipe): paths[mb] = the layer groups micro-batch mb runs, in the
  // order it runs them. Its forward goes along the path and its backward back; the layers of a
  // group it skips are left out. The first group (the embedding) starts every path and the last
  // (the loss) ends it; the groups between may come in any order (SkipPipe's reordered paths).
  // Empty = every micro-batch visits every group in order.
  std::vector<std::vector<int>> paths;
  // The iteration a cost-aware generator planned these lists to take, and under what costs
  // (planned_time.hpp); null where none did. Kept for the lists it was planned for only.
  std::shared_ptr<const PlannedTime> planned_time;
  // An order its ops were seen to run in (execution_order.hpp), where one was recorded; kept for
  // the lists it was recorded for only.
  std::shared_ptr<const ExecutionOrder> execution_order;

  int groups() const { return stages * chunks; }
  int data_microbatches() const { return microbatches / slices; }
  int slice_of(int unit) const { return unit % slices; }
  bool partial() const { return !paths.empty(); }
  // Partial pipelining: whether micro-batch mb runs layer group g, and the groups it runs before
  // and after g (-1 past either end). Without paths: g - 1 and g + 1.
  bool visits(int group, int mb) const { return path_position(group, mb) >= 0; }
  int previous_group(int group, int mb) const {
    if (paths.empty()) return group - 1;
    const int at = path_position(group, mb);
    return at > 0 ? path(mb)[static_cast<std::size_t>(at - 1)] : -1;
  }
  int next_group(int group, int mb) const {
    if (paths.empty()) return group + 1 < groups() ? group + 1 : -1;
    const int at = path_position(group, mb);
    const std::vector<int>& p = path(mb);
    return at >= 0 && at + 1 < static_cast<int>(p.size()) ? p[static_cast<std::size_t>(at + 1)]
                                                          : -1;
  }
  // Where group g sits on micro-batch mb's path (-1: skipped); g itself without paths.
  int path_position(int group, int mb) const {
    if (paths.empty()) return group;
    const std::vector<int>& p = path(mb);
    for (std::size_t i = 0; i < p.size(); ++i)
      if (p[i] == group) return static_cast<int>(i);
    return -1;
  }
  const std::vector<int>& path(int mb) const { return paths[static_cast<std::size_t>(mb)]; }
  // Inline: the executor asks these for every op.
  int group_of(int rank, int chunk) const {
    if (placement == Placement::VShape) return chunk == 0 ? rank : 2 * stages - 1 - rank;
    return chunk * stages + rank;
  }
  int rank_of_group(int group) const {
    if (placement == Placement::VShape) return group < stages ? group : 2 * stages - 1 - group;
    // Without a division where it can: every op's dependency asks, and with one chunk a group
    // is its rank.
    return group < stages ? group : group % stages;
  }
  int chunk_of_group(int group) const {
    if (placement == Placement::VShape) return group < stages ? 0 : 1;
    return group / stages;
  }
  std::size_t op_count() const;
};

// Layered gradient reduction: whether the schedule reduces each layer group's gradients as an op
// (OpKind::R) once the group's backward is complete, rather than all of them after the pipeline.
bool reduces_per_group(const Schedule& s);
// Adds R(chunk) to every rank right after the last op that adds to that chunk's weight gradients
// (its last W or BW), so each group's reduction overlaps the backward passes still to come.
void add_gradient_reductions(Schedule& s);

// Where a token slice sits in its sequence, as fractions of the sequence length: its own length
// and the context before it (the earlier slices' tokens).
struct SliceShape {
  double length = 1.0;
  double context = 0.0;
};
// Each slice's shape, of `slices` slices: of the lengths `slice_tokens` gives (relative), else
// equal.
std::vector<SliceShape> slice_shapes(int slices, const std::vector<int>& slice_tokens);
// The shape of unit `unit`'s slice; {1, 0} without token slices.
SliceShape slice_shape(const Schedule& s, int unit);
// The tokens of each slice for a sequence of `seq` tokens: slice_tokens when given (InputError
// unless they sum to seq), else `slices` near-equal parts, the longer ones first (a slice's
// attention grows with its context, so the extra tokens go where the context is short).
// InputError when seq is shorter than the number of slices.
std::vector<std::int64_t> slice_token_counts(const Schedule& s, std::int64_t seq);

}  // namespace pipetune::schedule
