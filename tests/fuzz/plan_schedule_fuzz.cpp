// Fuzz target: plan validation, schedule generation, the validator and the simulator, as
// `simulate`, `predict` and `train` use them. The first bytes choose a small plan (schedule from
// schedule_names(), stages 1..16, micro-batches 1..64, chunks 0..4, group size, vocabulary mode,
// layer split, memory limit, per-stage op costs); the plan goes through spec::validate ->
// plan_schedule -> simulate. The bytes after the plan edit the generated schedule (swap, drop,
// duplicate or retag ops), which the validator must refuse cleanly or pass, and a schedule it
// passes must simulate. An InputError anywhere is a clean refusal; a crash, UB or hang is not.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/schedule/generators.hpp"
#include "engine/schedule/validator.hpp"
#include "engine/spec/plan_schedule.hpp"
#include "engine/spec/validate.hpp"
#include "profiler/text_gantt.hpp"
#include "tests/fuzz/fuzz_support.hpp"
#include "tuner/sim/simulator.hpp"

namespace {

using namespace pipetune;

// The input read a byte at a time; 0 once it runs out.
class Bytes {
 public:
  Bytes(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint8_t next() { return pos_ < size_ ? data_[pos_++] : 0; }
  int in(int lo, int hi) { return lo + next() % (hi - lo + 1); }  // [lo, hi]
  // A cost: 0, a small multiple of 1/8, or a wide one (1e-6 .. 1e3).
  double cost() {
    const std::uint8_t b = next();
    if (b < 16) return 0.0;
    if (b < 200) return b / 8.0;
    return std::ldexp(1.0, (b - 220));
  }
  bool empty() const { return pos_ >= size_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

schedule::CostTable costs_from(Bytes& in, int stages) {
  schedule::CostTable t;
  const bool per_stage = in.next() & 1;
  schedule::StageCosts base;
  for (schedule::OpKind k : schedule::kAllOpKinds) base[k] = in.cost();
  base[schedule::OpKind::F] = std::max(base[schedule::OpKind::F], 0.125);
  for (int r = 0; r < stages; ++r) {
    schedule::StageCosts c = base;
    if (per_stage)
      for (schedule::OpKind k : schedule::kAllOpKinds) c[k] += in.cost();
    t.stages.push_back(c);
  }
  t.p2p_latency = in.cost();
  t.collective_time = in.cost();
  t.w_free_fraction = in.next() / 255.0;
  return t;
}

// Byte-driven edits of a valid schedule: the validator sees near-valid op lists.
void edit(schedule::Schedule& s, Bytes& in) {
  for (int n = 0; n < 4 && !in.empty(); ++n) {
    const std::uint8_t what = in.next();
    auto& ops = s.ranks[in.next() % s.ranks.size()];
    if (ops.empty()) continue;
    const std::size_t i = in.next() % ops.size(), j = in.next() % ops.size();
    switch (what % 6) {
      case 0:
        std::swap(ops[i], ops[j]);
        break;
      case 1:
        ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      case 2: {
        const schedule::Op copy = ops[i];
        ops.push_back(copy);
        break;
      }
      case 3:
        ops[i].microbatch = static_cast<std::int32_t>(in.next()) - 2;
        break;
      case 4:
        ops[i].chunk = static_cast<std::int16_t>(in.next() % 5 - 1);
        break;
      default:
        ops[i].kind = schedule::kAllOpKinds[in.next() % schedule::kOpKindCount];
        break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 4096) return 0;
  Bytes in(data, size);
  const auto& names = schedule::schedule_names();
  spec::ParallelPlan plan;
  plan.schedule = std::string(names[in.next() % names.size()]);
  plan.pp = in.in(1, 16);
  plan.microbatches = in.in(1, 64);
  plan.chunks = in.in(0, 4);
  plan.group_size = in.in(0, 8);
  plan.vocab = static_cast<schedule::VocabMode>(in.in(0, 3));
  const int layers_extra = in.in(0, 8);
  const std::uint8_t split = in.next();
  const double memory_limit = (in.next() & 0x80) ? 0.0 : in.next() / 16.0;
  fuzz::refusals_are_clean([&] {
    spec::apply_defaults(plan);
    spec::ModelSpec model;  // a small dense model: the plan's layer groups plus a few
    model.layers = plan.pp * std::max(plan.chunks, 1) + layers_extra;
    model.hidden = 64;
    model.heads = 4;
    model.kv_heads = 4;
    model.ffn_hidden = 256;
    model.vocab = 512;
    model.seq_len = 32;
    if (split & 1) {  // an uneven layer split that still sums to the layers
      plan.layer_split = spec::even_layer_split(model.layers, plan.layer_groups());
      if (plan.layer_split.size() > 1 && plan.layer_split.front() > 0) {
        --plan.layer_split.front();
        ++plan.layer_split[(split >> 1) % plan.layer_split.size()];
      }
    }
    spec::validate(plan);
    spec::validate(model, plan);
    const schedule::CostTable costs = costs_from(in, plan.pp);
    schedule::Schedule s = spec::plan_schedule(plan, costs, memory_limit);
    spec::check_schedule_matches(s, plan);
    const schedule::GeneratorParams params = spec::generator_params(plan, costs, memory_limit);
    for (int r = 0; r < plan.pp; ++r) schedule::least_peak_in_flight(params, r);
    sim::SimOptions options;
    options.activation_bytes_per_microbatch.assign(static_cast<std::size_t>(plan.pp), 1024.0);
    const sim::SimResult r = sim::simulate(s, costs, options);
    profiler::TextGanttOptions g;
    g.width = 40;
    g.time_unit = "cost units";
    profiler::render_text_gantt(r.trace, g);
    if (in.empty()) return;
    edit(s, in);
    schedule::validate(s);  // passes only when the edits kept a valid schedule
    sim::simulate(s, costs, options);
  });
  return 0;
}
