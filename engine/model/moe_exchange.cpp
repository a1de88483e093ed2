// The experts' all-to-all in chunks (moe_exchange.hpp).
#include "engine/model/moe_exchange.hpp"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>

#include "engine/comm/two_phase_all_to_all.hpp"

namespace pipetune::model {

using tensor::Shape;

namespace {

std::size_t at(std::int64_t v) {
  return static_cast<std::size_t>(v);
}

}  // namespace

std::vector<SlotChunk> slot_chunks(std::int64_t cap, int chunks) {
  const std::int64_t k = std::max<std::int64_t>(1, std::min<std::int64_t>(chunks, cap));
  std::vector<SlotChunk> out;
  std::int64_t lo = 0;
  for (std::int64_t j = 0; j < k; ++j) {
    const std::int64_t n = cap / k + (j < cap % k ? 1 : 0);
    out.push_back({lo, n});
    lo += n;
  }
  return out;
}

void chunk_rows_from_whole(const Buffer& whole, Buffer& chunk, std::int64_t blocks,
                           std::int64_t cap, SlotChunk c, std::int64_t width) {
  sized(chunk, Shape{blocks * c.n, width});
  for (std::int64_t i = 0; i < blocks; ++i)
    copy_values({whole.data() + at((i * cap + c.lo) * width), Shape{c.n * width}},
                {chunk.data() + at(i * c.n * width), Shape{c.n * width}});
}

void chunk_rows_to_whole(const Buffer& chunk, Buffer& whole, std::int64_t blocks, std::int64_t cap,
                         SlotChunk c, std::int64_t width) {
  sized(whole, Shape{blocks * cap, width});  // kept as it is when already so
  for (std::int64_t i = 0; i < blocks; ++i)
    copy_values({chunk.data() + at(i * c.n * width), Shape{c.n * width}},
                {whole.data() + at((i * cap + c.lo) * width), Shape{c.n * width}});
}

void select_local_experts(const Buffer& all, Buffer& selected, std::int64_t ep, std::int64_t local,
                          std::int64_t lo, std::int64_t hi, std::int64_t cap, std::int64_t width) {
  const std::int64_t block = (hi - lo) * cap * width;  // one EP rank's selected experts
  sized(selected, Shape{ep * (hi - lo), cap, width});
  for (std::int64_t i = 0; i < ep; ++i)
    copy_values({all.data() + at((i * local + lo) * cap * width), Shape{block}},
                {selected.data() + at(i * block), Shape{block}});
}

void expand_local_experts(const Buffer& selected, Buffer& all, std::int64_t ep, std::int64_t local,
                          std::int64_t lo, std::int64_t hi, std::int64_t cap, std::int64_t width) {
  const std::int64_t block = (hi - lo) * cap * width;
  zeros(all, Shape{ep * local, cap, width});
  for (std::int64_t i = 0; i < ep; ++i)
    copy_values({selected.data() + at(i * block), Shape{block}},
                {all.data() + at((i * local + lo) * cap * width), Shape{block}});
}

void select_slot_share(const Buffer& all, Buffer& share_rows, std::int64_t experts,
                       std::int64_t cap, std::int64_t lo, std::int64_t share, std::int64_t width) {
  const std::int64_t n = std::clamp<std::int64_t>(cap - lo, 0, share);  // slots that exist
  if (n < share)
    zeros(share_rows, Shape{experts, share, width});
  else
    sized(share_rows, Shape{experts, share, width});
  for (std::int64_t e = 0; e < experts && n > 0; ++e)
    copy_values({all.data() + at((e * cap + lo) * width), Shape{n * width}},
                {share_rows.data() + at(e * share * width), Shape{n * width}});
}

void expand_slot_share(const Buffer& share_rows, Buffer& all, std::int64_t experts,
                       std::int64_t cap, std::int64_t lo, std::int64_t share, std::int64_t width) {
  const std::int64_t n = std::clamp<std::int64_t>(cap - lo, 0, share);
  zeros(all, Shape{experts, cap, width});
  for (std::int64_t e = 0; e < experts && n > 0; ++e)
    copy_values({share_rows.data() + at(e * share * width), Shape{n * width}},
                {all.data() + at((e * cap + lo) * width), Shape{n * width}});
}

void exchange_with_experts(const ParallelContext& ctx, std::int64_t experts,
                           std::int64_t local_experts, std::int64_t width, std::int64_t cap,
                           int chunks, const Buffer& by_expert, const ExpertChunkCompute& compute,
                           Buffer& result) {
  const std::int64_t ep = ctx.ep_size, El = local_experts, C = width;
  const std::vector<SlotChunk> parts = slot_chunks(cap, chunks);
  const std::size_t k = parts.size();
  comm::CollectiveStream* stream = ep > 1 ? ctx.stream : nullptr;
  // Per chunk: what is sent and received each way (kept until its all-to-all is done).
  std::vector<Buffer> sent(k), received(k), returned(k), back(k);
  std::vector<std::optional<comm::CollectiveStream::Ticket>> dispatched(k), combined(k);
  // An all-to-all of (ep, El, n, C) blocks: on the stream, or in place; flat or in two phases.
  Buffer staged, arrived;  // the two-phase one's scratch, in place
  const auto all_to_all = [&](const Buffer& in, Buffer& out) {
    const auto n = static_cast<std::int64_t>(in.size());
    sized(out, Shape{n});
    std::optional<comm::CollectiveStream::Ticket> ticket;
    if (stream != nullptr) {
      ticket = ctx.ep_two_phase()
                   ? stream->all_to_all_two_phase(ctx.ep_node_group, ctx.ep_cross_group, in, out)
                   : stream->all_to_all(ctx.ep_group, in, out);
    } else if (ctx.ep_two_phase()) {
      profiler::ScopedSpan span(ctx.recorder, profiler::SpanKind::AllToAll, profiler::Stream::Comm,
                                -1, -1, -1, ctx.all_to_all_name);
      sized(staged, Shape{n});
      sized(arrived, Shape{n});
      comm::two_phase_all_to_all(*ctx.comm, ctx.ep_node_group, ctx.ep_cross_group, in, out, staged,
                                 arrived, [](std::span<const float> from, std::span<float> to) {
                                   copy_values(
                                       {from.data(), Shape{static_cast<std::int64_t>(from.size())}},
                                       {to.data(), Shape{static_cast<std::int64_t>(to.size())}});
                                 });
    } else {
      ctx.ep_all_to_all(in, out);
    }
    return ticket;
  };
  const auto finish = [&](const std::optional<comm::CollectiveStream::Ticket>& ticket) {
    if (!ticket) return;
    const comm::CollectiveStream::Ran ran = stream->wait(*ticket);
    if (ctx.recorder != nullptr)
      ctx.recorder->add_timed(profiler::SpanKind::AllToAll, profiler::Stream::Comm, -1, -1,
                              ctx.all_to_all_name, ran.start_ns, ran.end_ns);
  };
  const auto dispatch = [&](std::size_t j) {
    // (E, cap, C) slots [lo, lo + n) -> (E, n, C): the rows of each expert as of each EP rank.
    chunk_rows_from_whole(by_expert, sent[j], experts, cap, parts[j], C);
    if (ep > 1) dispatched[j] = all_to_all(sent[j], received[j]);
  };
  // An error here would leave all-to-alls in flight over this frame's buffers: end them first.
  try {
    dispatch(0);
    std::vector<Buffer> in(at(El)), out(at(El));
    for (std::size_t j = 0; j < k; ++j) {
      const SlotChunk c = parts[j];
      finish(dispatched[j]);
      if (j + 1 < k) dispatch(j + 1);  // in flight while this chunk computes
      // (ep, El, n, C) from the EP ranks -> each local expert's (ep * n, C) rows.
      const Buffer& from = ep > 1 ? received[j] : sent[j];
      for (std::int64_t le = 0; le < El; ++le) {
        Buffer& rows = in[at(le)];
        sized(rows, Shape{ep * c.n, C});
        for (std::int64_t i = 0; i < ep; ++i)
          copy_values({from.data() + at(((i * El + le) * c.n) * C), Shape{c.n * C}},
                      {rows.data() + at(i * c.n * C), Shape{c.n * C}});
      }
      compute(c, in, out);
      // Each local expert's rows back to the ranks whose tokens they are: (ep, El, n, C).
      sized(returned[j], Shape{ep, El, c.n, C});
      for (std::int64_t le = 0; le < El; ++le)
        for (std::int64_t i = 0; i < ep; ++i)
          copy_values({out[at(le)].data() + at(i * c.n * C), Shape{c.n * C}},
                      {returned[j].data() + at(((i * El + le) * c.n) * C), Shape{c.n * C}});
      if (ep > 1) combined[j] = all_to_all(returned[j], back[j]);
    }
    for (std::size_t j = 0; j < k; ++j) {
      finish(combined[j]);
      chunk_rows_to_whole(ep > 1 ? back[j] : returned[j], result, experts, cap, parts[j], C);
    }
  } catch (...) {
    if (stream != nullptr) stream->abandon(std::current_exception());
    throw;
  }
}

}  // namespace pipetune::model
