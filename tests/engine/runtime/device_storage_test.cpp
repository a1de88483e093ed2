// Ranks whose tensors live in device storage, emulated on the host (guarded_device.hpp: blocks
// mapped PROT_NONE outside the allocator's copies and the backend's ops). A training run whose
// host code touched device storage anywhere (initialisation, the optimizer, clipping, the
// mailbox, the vocabulary passes, checkpoints, captures) would crash here. Since the arithmetic
// is the CPU backend's, every loss and parameter equals the plain CPU run bit for bit, and the
// rank's device accounting matches its memory ledger category by category.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/runtime/peer_copy_communicator.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/validate.hpp"
#include "tests/engine/runtime/guarded_device.hpp"
#include "tests/engine/runtime/plan_matrix.hpp"

namespace pipetune::runtime {
namespace {

using testing::PlanCase;

TrainOptions options_for(const PlanCase& c) {
  TrainOptions o;
  o.model = spec::load_model(c.model);
  o.plan.micro_batch_size = 2;
  testing::apply_plan(c, o);
  o.steps = 2;
  o.capture_gradients = true;
  o.capture_parameters = true;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 60;
  return o;
}

RankDeviceFactory guarded_factory() {
  return [](comm::Communicator& comm, int threads) -> std::unique_ptr<RankDevice> {
    return std::make_unique<testing::GuardedRankDevice>(comm, threads);
  };
}

void expect_same_tensors(const std::map<std::string, tensor::Tensor>& got,
                         const std::map<std::string, tensor::Tensor>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << " " << name;
    ASSERT_EQ(it->second.values(), w.values()) << what << " " << name << " differs";
  }
}

// Losses, gradient norms, first-step gradients and final parameters all bit-identical.
void expect_same_training(const TrainResult& got, const TrainResult& want) {
  ASSERT_EQ(got.steps.size(), want.steps.size());
  for (std::size_t s = 0; s < want.steps.size(); ++s) {
    EXPECT_EQ(got.steps[s].loss, want.steps[s].loss) << "step " << s + 1;
    EXPECT_EQ(got.steps[s].grad_norm, want.steps[s].grad_norm) << "step " << s + 1;
  }
  expect_same_tensors(got.first_step_gradients, want.first_step_gradients, "gradients");
  expect_same_tensors(got.final_parameters, want.final_parameters, "parameters");
}

class DeviceStorage : public ::testing::TestWithParam<PlanCase> {};

// Each plan trains on the CPU once, then twice on guarded device storage: with the pipeline's
// transfers through the host, and as device-to-device copies between the ranks' storages
// (PeerCopyCommunicator, as in single-GPU mode). One test for both, so the CPU run they are
// compared with is made once.
TEST_P(DeviceStorage, TrainsBitIdenticalToTheCpuWithoutHostAccess) {
  const PlanCase& c = GetParam();
  const TrainResult want = train(options_for(c));
  {
    SCOPED_TRACE("transfers through the host");
    TrainOptions o = options_for(c);
    o.rank_device = guarded_factory();
    const TrainResult got = train(o);
    expect_same_training(got, want);
    for (std::size_t r = 0; r < got.ranks.size(); ++r) {
      EXPECT_EQ(got.ranks[r].parameter_bytes, want.ranks[r].parameter_bytes);
      EXPECT_EQ(got.ranks[r].optimizer_bytes, want.ranks[r].optimizer_bytes);
      EXPECT_EQ(got.ranks[r].peak_activation_bytes, want.ranks[r].peak_activation_bytes);
    }
  }
  // Device to device: the same bits, and no pipeline transfer through the host.
  SCOPED_TRACE("transfers device to device");
  TrainOptions o = options_for(c);
  PeerExchange exchange;
  o.rank_device = [&](comm::Communicator& comm, int threads) -> std::unique_ptr<RankDevice> {
    return std::make_unique<testing::GuardedRankDevice>(comm, threads, false, &exchange);
  };
  const TrainResult got = train(o);
  expect_same_training(got, want);
  if (c.pp > 1) {
    // Each micro-batch crosses every stage boundary forward and back, every step (more with V
    // schedules and vocabulary passes).
    const std::size_t at_least = static_cast<std::size_t>(2 * (c.pp - 1) * c.microbatches * 2);
    EXPECT_GE(exchange.parcels_posted(), at_least);
  }
  // Gradient all-reduces (dp), activation all-reduces (tp) and the vocabulary statistics run
  // device to device too (peer_copy_collectives.cpp), with the same bits.
  if (c.tp > 1 || c.dp > 1) {
    EXPECT_GT(exchange.shared_posted(), 0u);
  }
}

// The parallel-equivalence matrix, of its expert plans two: EP beside DP, and with PP and a
// zero-bubble schedule. The others run the same host code (dispatch, combine, the expert
// optimizer: dense ZeRO-1 and TP cover theirs), and under the guarded device each takes a minute
// or more of a 2-core CI machine; so does tp4_dp2_sp (8 ranks), whose host code the tp2
// sequence-parallel plans run. The recomputation plans have their own test below. Of the ZeRO-2
// and ZeRO-3 plans two each: padded units (dp3) and the vocabulary passes; the others add time,
// not host code.
//
// The plans are in two groups. "Plans": one of each pipeline schedule family and parallelism
// (dp, tp, pp with and without vocabulary passes, uneven and per-stage layouts), a few seconds
// each, labelled fast. "MorePlans": the rest, labelled slow (tests/CMakeLists.txt), which the
// whole suite (CI) runs: under the guarded device every storage access is an mprotect, and on a
// 2-core machine they took a third of the fast label's time.
bool representative(const PlanCase& c) {
  for (const char* name :
       {"pp2_1f1b", "pp2_gpipe", "pp2_interleaved", "pp2_zbv", "pp2_dualpipev", "pp4_vhalf",
        "pp2_1f1b_vocab1", "pp2_interleaved_vocab2", "pp3_uneven", "pp2_stage_tp1_2", "dp2", "tp2"})
    if (c.name == name) return true;
  return false;
}

std::vector<PlanCase> device_storage_plans(bool representative_ones) {
  std::vector<PlanCase> out;
  for (PlanCase& c : testing::parallel_equivalence_plans())
    if ((c.model != "tiny-moe" || c.name == "moe_ep2_dp2" || c.name == "moe_pp2_ep2_dp2_zbh1") &&
        c.name != "tp4_dp2_sp" && c.recompute == spec::Recompute::None &&
        (c.zero < 2 || c.name == "dp3_zero2" || c.name == "pp2_dp2_zero2_vocab1" ||
         c.name == "dp3_zero3" || c.name == "pp2_dp2_zero3_vocab1") &&
        representative(c) == representative_ones)
      out.push_back(std::move(c));
  return out;
}

INSTANTIATE_TEST_SUITE_P(Plans, DeviceStorage, ::testing::ValuesIn(device_storage_plans(true)),
                         [](const auto& info) { return info.param.name; });
// A name misspelt above would drop its plan from the fast label unnoticed.
TEST(DeviceStoragePlans, EveryRepresentativePlanIsInTheMatrix) {
  EXPECT_EQ(device_storage_plans(true).size(), 12u);
}

INSTANTIATE_TEST_SUITE_P(MorePlans, DeviceStorage, ::testing::ValuesIn(device_storage_plans(false)),
                         [](const auto& info) { return info.param.name; });

// Activation recomputation on device storage: what B recomputes (the whole block, or the
// attention probabilities) and what the forward releases are device blocks too, with the same
// bits as on the CPU.
TEST(DeviceStorageRecompute, RecomputedBlocksTrainBitIdenticalWithoutHostAccess) {
  const PlanCase c{.name = "pp2_zbh1", .pp = 2, .schedule = "zb-h1"};
  for (spec::Recompute r : {spec::Recompute::Full, spec::Recompute::Selective}) {
    SCOPED_TRACE(std::string(spec::recompute_name(r)));
    TrainOptions o = options_for(c);
    o.plan.recompute = r;
    const TrainResult want = train(o);
    o.rank_device = guarded_factory();
    const TrainResult got = train(o);
    expect_same_training(got, want);
  }
}

// DualPipeV's overlapped pairs on a device that runs them at once (GuardedRankDevice::accept_pairs:
// the calls a GPU rank's second stream gets, in order, with the buffer cache holding freed blocks
// from the second op to the pair's end). Every pair of the schedule is run that way: rank r of p
// has 2m - 3p + r + 1 of them a step (DualPipeV's phases 4 and 5: 2(m - 2p + r + 1) + (p - r - 1),
// engine/schedule/generators/dualpipe_v.cpp), one fewer at the turn of the V (r = p - 1, whose
// first F0 feeds its own F1 and runs apart), with the plain CPU run's bits. Under ZeRO-2 the
// pairs stay on one stream (a closed unit's buffer serves the next unit, whichever stream asks).
TEST(DeviceStoragePairs, OverlappedPairsRunAtOnceWithTheCpuBits) {
  const std::vector<PlanCase> plans = {
      {.name = "pp2_dualpipev", .pp = 2, .schedule = "dualpipe-v"},
      {.name = "tp2_pp2_dualpipev", .tp = 2, .pp = 2, .schedule = "dualpipe-v", .microbatches = 5},
      {.name = "pp2_dp2_zero2_dualpipev", .pp = 2, .dp = 2, .schedule = "dualpipe-v", .zero = 2}};
  for (const PlanCase& c : plans) {
    SCOPED_TRACE(c.name);
    const TrainOptions base = options_for(c);
    const TrainResult want = train(base);
    TrainOptions o = base;
    PeerExchange exchange;
    o.rank_device = [&](comm::Communicator& comm, int threads) -> std::unique_ptr<RankDevice> {
      auto d = std::make_unique<testing::GuardedRankDevice>(comm, threads, false, &exchange);
      d->accept_pairs(true);
      return d;
    };
    const TrainResult got = train(o);
    expect_same_training(got, want);
    for (const RankSummary& r : got.ranks) {
      const std::int64_t per_step =
          2 * c.microbatches - 3 * c.pp + r.pp_rank + 1 - (r.pp_rank == c.pp - 1 ? 1 : 0);
      const std::int64_t expected = c.zero >= 2 ? 0 : per_step * base.steps;
      EXPECT_EQ(r.pairs_run_at_once, expected)
          << "rank " << r.rank << " (stage " << r.pp_rank << ")";
    }
  }
}

// The rank's device accounting, seen from inside the run: what its allocator holds for
// parameters, gradients and optimizer state equals what its memory ledger reports (the ledger
// splits the vocabulary layers out of parameters and gradients), and activations are device
// blocks.
TEST(DeviceStorageAccounting, AllocatorMatchesTheLedger) {
  PlanCase c{.name = "pp2", .pp = 2};
  std::mutex mutex;
  std::map<int, std::array<std::int64_t, 4>> seen;  // rank -> params, grads, optimizer, acts
  TrainOptions o = options_for(c);
  o.capture_gradients = o.capture_parameters = false;
  o.steps = 2;
  o.rank_device = testing::reporting_rank_devices([&](int rank, const tensor::DeviceAllocator& a) {
    EXPECT_EQ(a.total_bytes(), 0) << "rank " << rank << " leaked device blocks";
    std::lock_guard lock(mutex);
    seen[rank] = {a.peak_bytes(profiler::MemoryCategory::Parameters),
                  a.peak_bytes(profiler::MemoryCategory::Gradients),
                  a.peak_bytes(profiler::MemoryCategory::OptimizerState),
                  a.peak_bytes(profiler::MemoryCategory::Activations)};
  });
  const TrainResult r = train(o);
  ASSERT_EQ(seen.size(), 2u);
  for (const RankSummary& k : r.ranks) {
    const auto& s = seen.at(k.rank);
    EXPECT_EQ(s[0], k.parameter_bytes) << "rank " << k.rank;
    EXPECT_EQ(s[1], k.gradient_bytes) << "rank " << k.rank;
    EXPECT_EQ(s[2], k.optimizer_bytes) << "rank " << k.rank;
    // Activation blocks on the device cover at least what the ledger saw live at its peak.
    EXPECT_GE(s[3], k.peak_activation_bytes) << "rank " << k.rank;
    EXPECT_GT(k.peak_activation_bytes, 0);
  }
}

// Checkpoints go through explicit copies: written from device ranks, resumed into device ranks,
// the losses continue exactly as an uninterrupted CPU run.
TEST(DeviceStorageCheckpoint, ResumesExactly) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("pipetune_device_ckpt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  PlanCase c{.name = "pp2_zero1", .pp = 2, .dp = 2, .zero = 1};
  TrainOptions full = options_for(c);
  full.capture_gradients = full.capture_parameters = false;
  full.steps = 4;
  const TrainResult want = train(full);

  TrainOptions first = full;
  first.steps = 2;
  first.checkpoint_dir = dir.string();
  first.rank_device = guarded_factory();
  (void)train(first);
  TrainOptions second = full;
  second.resume_dir = dir.string();
  second.rank_device = guarded_factory();
  const TrainResult got = train(second);
  ASSERT_EQ(got.steps.size(), 2u);
  EXPECT_EQ(got.steps[0].loss, want.steps[2].loss);
  EXPECT_EQ(got.steps[1].loss, want.steps[3].loss);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pipetune::runtime

namespace pipetune::runtime {
namespace {

// A run whose state cannot fit in its device's memory is refused before anything is allocated,
// with the bytes it needs: 16 per parameter (fp32 weights, gradients and Adam's two moments)
// per data-parallel replica, every rank on the one device.
TEST(DeviceMemoryCheck, ARunLargerThanItsDeviceIsRefusedWithTheNumbers) {
  TrainOptions o = options_for({"dp2", "tiny", 1, 1, 2});
  spec::ModelSpec model = o.model;
  spec::apply_defaults(model);
  const auto needed = static_cast<std::int64_t>(16 * spec::total_parameters(model) * 2);
  o.device_memory = TrainOptions::DeviceMemory{"GPU 0 (test)", needed - 1};
  try {
    check_train_options(o);
    FAIL() << "a device of " << needed - 1 << " bytes was accepted for " << needed;
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("of device memory"), std::string::npos) << m;
    EXPECT_NE(m.find("more than GPU 0 (test) has"), std::string::npos) << m;
    EXPECT_NE(m.find("dp=2"), std::string::npos) << m;
  }
  o.device_memory->bytes = needed;  // exactly enough
  EXPECT_NO_THROW(check_train_options(o));
}

}  // namespace
}  // namespace pipetune::runtime
