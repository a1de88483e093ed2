// Schedule: for each pipeline rank an ordered list of ops. The same object is executed by the
// engine and simulated by the tuner, so a prediction and a measurement compare span for span.
#pragma once

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

  int groups() const { return stages * chunks; }
  // Inline: the executor asks these for every op.
  int group_of(int rank, int chunk) const {
    if (placement == Placement::VShape) return chunk == 0 ? rank : 2 * stages - 1 - rank;
    return chunk * stages + rank;
  }
  int rank_of_group(int group) const {
    if (placement == Placement::VShape) return group < stages ? group : 2 * stages - 1 - group;
    return group % stages;
  }
  int chunk_of_group(int group) const {
    if (placement == Placement::VShape) return group < stages ? 0 : 1;
    return group / stages;
  }
  std::size_t op_count() const;
};

}  // namespace pipetune::schedule
