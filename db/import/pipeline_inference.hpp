// Pipeline stages of an imported profile inferred from its point-to-point traffic. A NCCL
// send/recv kernel runs on both peers at once and both sides end when the data has moved, so a
// point-to-point kernel (Send / Recv span on a Gpu lane) is paired with the other rank's kernel
// that ends nearest to it (each the other's nearest, overlapping); two ranks paired again and
// again exchange activations or gradients. When those pairs chain every rank into one line — a pure
// pipeline, one rank per stage — the line is the stage order; its first stage is the end that takes
// part in the earliest transfer (micro-batch 0's activations leave stage 0 first). Anything else
// (data or tensor parallel peers, rings, all-to-all among every rank, fewer than three ranks: two
// ranks exchanging data — a sequence-parallel all-to-all — form a "line" too) infers nothing; a
// pipeline of two stages needs its plan (--pp 2) or pipeline phase names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/import/imported_profile.hpp"
#include "profiler/trace.hpp"

namespace pipetune::db {

struct InferredPipeline {
  std::vector<std::int32_t> stage_ranks;  // stage s is rank stage_ranks[s] (as imported)
  std::string evidence;                   // "ranks 2-0-1-3 by 46 matched point-to-point kernels"
};

std::optional<InferredPipeline> infer_pipeline_from_p2p(const profiler::Trace& trace);

// Renumbers the profile's ranks so that rank s is stage s of `pipeline` (lanes, their names,
// spans' lanes, memory and counter samples, kernel records, the rank table; order of lanes and
// spans as the importers leave it), unless its ranks were given explicitly (MPI ranks, rank
// names: then the numbers stay and only the evidence is noted). Adds one line to the warnings
// either way.
void apply_inferred_pipeline(ImportedProfile& profile, const InferredPipeline& pipeline);

}  // namespace pipetune::db
