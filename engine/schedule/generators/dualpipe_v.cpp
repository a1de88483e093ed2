// dualpipe-v: DeepSeek's DualPipeV (DualPipe "cut in half"; dualpipe/dualpipev.py,
// schedules.md a.10). R = p ranks hold 2R stages in a V; each rank runs eight phases:
//   1. 2(R-r-1) x F0
//   2. (r+1) x [F0, F1]
//   3. (R-r-1) x [B1 (input gradient only), W, F1]
//   4. (m-2R+r+1) x [F0 & B1, F1 & B0]
//   5. (R-r-1) x [B1, F1 & B0]
//   6. (r+1) x [B1, B0], switching to split B/W half-way
//   7. (R-r-1) x [W, B0 (split)]
//   8. (r+1) x W
// "X & Y" is one overlapped step (a forward and a backward computed together so one's all-to-all
// and P2P hide behind the other's compute): X, then Y marked Op::overlaps_previous, a pair that
// starts once both inputs are there, as DualPipeV receives both before its overlapped step.
// Backwards are fused (BW) except where DualPipeV defers the weight gradient (phases 3, 6 and
// 7); deferred W run first in, first out. Needs m >= 2p.
#include <array>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/generators/v_building_block.hpp"
#include "engine/schedule/validator.hpp"

namespace pipetune::schedule {

namespace {

// Builds one rank's list, numbering micro-batches per chunk in issue order (DualPipeV keeps one
// FIFO of inputs and one of output gradients per chunk).
class RankBuilder {
 public:
  explicit RankBuilder(std::vector<Op>& ops) : ops_(ops) {}

  void forward(int chunk) { ops_.push_back({OpKind::F, chunk16(chunk), next_f_[at(chunk)]++}); }
  // split = true defers the weight gradient to a later W (zero-bubble split); overlapped = the
  // backward runs together with the forward just issued ("F & B").
  void backward(int chunk, bool split, bool overlapped = false) {
    const int mb = next_b_[at(chunk)]++;
    if (!split) {
      ops_.push_back({OpKind::BW, chunk16(chunk), mb, overlapped});
      return;
    }
    ops_.push_back({OpKind::B, chunk16(chunk), mb});
    pending_w_.push_back({chunk, mb});
  }
  void weight() {
    const auto [chunk, mb] = pending_w_.front();
    pending_w_.pop_front();
    ops_.push_back({OpKind::W, chunk16(chunk), mb});
  }
  bool done() const { return pending_w_.empty(); }

 private:
  static std::size_t at(int c) { return static_cast<std::size_t>(c); }
  static std::int16_t chunk16(int c) { return static_cast<std::int16_t>(c); }
  std::vector<Op>& ops_;
  std::array<int, 2> next_f_{0, 0}, next_b_{0, 0};
  std::deque<std::pair<int, int>> pending_w_;
};

void build_rank(std::vector<Op>& ops, int R, int r, int m) {
  RankBuilder b(ops);
  const int outer = R - r - 1;  // ranks nearer the turn of the V warm up less
  for (int i = 0; i < 2 * outer; ++i) b.forward(0);
  for (int i = 0; i < r + 1; ++i) {
    b.forward(0);
    b.forward(1);
  }
  for (int i = 0; i < outer; ++i) {
    b.backward(1, true);
    b.weight();
    b.forward(1);
  }
  for (int i = 0; i < m - 2 * R + r + 1; ++i) {
    // F0 & B1, except the turn of the V's first: DualPipeV runs it apart, as its F0 feeds the F1
    // that follows on the same rank.
    b.forward(0);
    b.backward(1, false, !(i == 0 && r == R - 1));
    b.forward(1);  // F1 & B0
    b.backward(0, false, true);
  }
  for (int i = 0; i < outer; ++i) {
    b.backward(1, false);
    b.forward(1);  // F1 & B0
    b.backward(0, false, true);
  }
  // Cool-down: the second half of the backwards defer W into the tail (odd ranks switch at the
  // chunk-1 backward of the middle step, even ranks at its chunk-0 backward).
  const int steps = r + 1;
  bool split = false;
  for (int i = 0; i < steps; ++i) {
    if (i == steps / 2 && r % 2 == 1) split = true;
    b.backward(1, split);
    if (i == steps / 2 && r % 2 == 0) split = true;
    b.backward(0, split);
  }
  for (int i = 0; i < outer; ++i) {
    b.weight();
    b.backward(0, true);
  }
  for (int i = 0; i < r + 1; ++i) b.weight();
  if (!b.done()) throw ScheduleError("dualpipe-v: internal error, weight gradients left over");
}

}  // namespace

Schedule generate_dualpipe_v(const GeneratorParams& params) {
  check_v_params(params, "dualpipe-v", /*vocab_ok=*/false);
  const int p = params.stages;
  const int m = params.microbatches;
  if (m < 2 * p)
    throw ScheduleError({"plan.microbatches", "plan.pp", "plan.schedule"},
                        "dualpipe-v: microbatches=" + std::to_string(m) +
                            " is fewer than 2*stages=" + std::to_string(2 * p));
  Schedule s = make_v_schedule(params, "dualpipe-v");
  for (int r = 0; r < p; ++r) build_rank(s.ranks[static_cast<std::size_t>(r)], p, r, m);
  validate_generated(s, params);
  return s;
}

}  // namespace pipetune::schedule
