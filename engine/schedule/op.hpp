// The op IR of a pipeline schedule: typed ops tagged with micro-batch and chunk.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pipetune::schedule {

// F: forward; B: input-gradient backward; W: weight-gradient backward (deferred, zero-bubble
// split); BW: fused backward; S/T: vocabulary output-layer passes (forward statistics and
// gradient); IF/IB: vocabulary input-embedding forward and backward.
// R: the data-parallel gradient reduction of one layer group (the op's chunk) on its rank,
// issued once the group's weight gradients are complete (layered gradient reduction). It runs on
// the rank's communication stream beside the compute that follows; microbatch is 0.
enum class OpKind : std::uint8_t { F, B, W, BW, S, T, IF, IB, R };
inline constexpr int kOpKindCount = 9;
inline constexpr std::array<OpKind, kOpKindCount> kAllOpKinds = {OpKind::F,  OpKind::B,  OpKind::W,
                                                                 OpKind::BW, OpKind::S,  OpKind::T,
                                                                 OpKind::IF, OpKind::IB, OpKind::R};
// The passes (F..IB): compute ops, numbered as profiler::SpanKind numbers its first eight kinds.
inline constexpr int kPassKindCount = 8;

std::string_view op_kind_name(OpKind kind);
std::optional<OpKind> parse_op_kind(std::string_view name);

// Vocabulary ops run on every pipeline rank (each holds a vocabulary shard).
inline constexpr bool is_vocab_op(OpKind k) {
  return k == OpKind::S || k == OpKind::T || k == OpKind::IF || k == OpKind::IB;
}
inline constexpr bool is_reduction(OpKind k) {
  return k == OpKind::R;
}
inline constexpr bool is_backward_input(OpKind k) {
  return k == OpKind::B || k == OpKind::BW;
}

struct Op {
  OpKind kind = OpKind::F;
  std::int16_t chunk = 0;       // local chunk index on the rank (0 for vocabulary ops)
  std::int32_t microbatch = 0;  // 0 .. m-1
  // The second op of an overlapped pair: it runs together with the op before it on its rank
  // (DualPipeV's "F & B" step: a forward and a backward of other micro-batches, each one's
  // communication hidden behind the other's compute). The pair starts once both inputs are
  // there; the validator allows only a forward with a B or BW that does not need it.
  bool overlaps_previous = false;

  friend bool operator==(const Op&, const Op&) = default;
};

// "F3.1" = forward of micro-batch 3 on chunk 1; vocabulary ops omit the chunk ("S3"), and a
// gradient reduction omits the micro-batch ("R.1").
std::string op_label(const Op& op);
// An overlapped pair, "F3.0&B1.1".
std::string pair_label(const Op& first, const Op& second);

}  // namespace pipetune::schedule
