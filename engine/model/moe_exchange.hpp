// The experts' all-to-all of an MoE layer in chunks (ParallelPlan::moe_chunks; Tutel's adaptive
// pipelining, FSMoE): the experts' slots are cut into chunks, and each chunk goes to the experts'
// ranks (dispatch), through the experts (compute) and back (combine) on its own. With the rank's
// collective stream (ParallelContext::stream) the all-to-alls run beside the compute: chunk
// j + 1's dispatch and chunk j's combine are in flight while the experts compute chunk j + 1 or
// j. Without one they run in place, one after another. Either way every row meets the same
// arithmetic as with one chunk, so the results are the one-chunk results.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/model/buffers.hpp"
#include "engine/model/parallel_context.hpp"

namespace pipetune::model {

// Slots [lo, lo + n) of the experts' buffers.
struct SlotChunk {
  std::int64_t lo = 0;
  std::int64_t n = 0;
};
// `chunks` near-equal runs of [0, cap), the longer first; fewer when cap is smaller.
std::vector<SlotChunk> slot_chunks(std::int64_t cap, int chunks);

// Rows of one chunk between a whole buffer of `blocks` blocks of `cap` slots, (blocks * cap,
// width) with row i * cap + slot, and the chunk's, (blocks * n, width) with row i * n + t: a
// local expert's rows (a block per EP rank) or the experts' slots (a block per expert). With one
// chunk the two layouts are the same. chunk_rows_to_whole sizes `whole` first.
void chunk_rows_from_whole(const Buffer& whole, Buffer& chunk, std::int64_t blocks,
                           std::int64_t cap, SlotChunk c, std::int64_t width);
void chunk_rows_to_whole(const Buffer& chunk, Buffer& whole, std::int64_t blocks, std::int64_t cap,
                         SlotChunk c, std::int64_t width);

// Whole experts (spec::ExpertLayout::Whole): the slots of local experts [lo, hi) of each of `ep`
// EP ranks, (ep * (hi - lo), cap, width), from all of them, (ep * local, cap, width); and back,
// with zeros in the other experts' slots (`all` sized here).
void select_local_experts(const Buffer& all, Buffer& selected, std::int64_t ep, std::int64_t local,
                          std::int64_t lo, std::int64_t hi, std::int64_t cap, std::int64_t width);
void expand_local_experts(const Buffer& selected, Buffer& all, std::int64_t ep, std::int64_t local,
                          std::int64_t lo, std::int64_t hi, std::int64_t cap, std::int64_t width);

// Deduplicated experts (spec::ExpertLayout::Dedup): a TP rank's share of every expert's slots,
// slots [lo, lo + share) of (experts, cap, width) as (experts, share, width), zero past cap (the
// last share may be short); and back into (experts, cap, width) with zeros in the other slots
// (`all` sized here).
void select_slot_share(const Buffer& all, Buffer& share_rows, std::int64_t experts,
                       std::int64_t cap, std::int64_t lo, std::int64_t share, std::int64_t width);
void expand_slot_share(const Buffer& share_rows, Buffer& all, std::int64_t experts,
                       std::int64_t cap, std::int64_t lo, std::int64_t share, std::int64_t width);

// What the experts do to one chunk: `in` holds each local expert's rows of it ((ep * n, width),
// as above), which compute may take; compute fills `out` likewise.
using ExpertChunkCompute =
    std::function<void(SlotChunk chunk, std::vector<Buffer>& in, std::vector<Buffer>& out)>;

// by_expert (experts, cap, width) on every EP rank -> each chunk through `compute` on the
// experts' ranks -> result (experts, cap, width), sized here.
void exchange_with_experts(const ParallelContext& ctx, std::int64_t experts,
                           std::int64_t local_experts, std::int64_t width, std::int64_t cap,
                           int chunks, const Buffer& by_expert, const ExpertChunkCompute& compute,
                           Buffer& result);

}  // namespace pipetune::model
