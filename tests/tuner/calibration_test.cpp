// tuner::calibrate recovers known efficiency curves: measurements made by the cost model itself
// with a chosen set of efficiencies (the op durations it predicts for several plans) are fitted
// from the default start, and the fit must find that set again and a near-perfect fit quality.
// Bad inputs are refused with the reason.
#include "tuner/calibration/calibration.hpp"

#include <gtest/gtest.h>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/spec/load.hpp"
#include "tuner/cost/op_costs.hpp"

namespace pipetune::tuner {
namespace {

spec::HardwareEfficiency truth() {
  spec::HardwareEfficiency e;
  e.gemm = 0.71;
  e.gemm_half_flops = 4e9;
  e.attention = 0.37;
  e.memory = 0.66;
  e.intra_node_bus = 0.81;
  return e;
}

Measurement measured(const std::string& model, int tp, int pp, int mbs, int seq) {
  Measurement m;
  m.name = model + " tp" + std::to_string(tp) + " pp" + std::to_string(pp);
  m.model = spec::load_model(model);
  m.model.seq_len = seq;
  spec::apply_defaults(m.model);
  spec::HardwareSpec hw = spec::load_hardware("h100-sxm");
  hw.efficiency = truth();
  m.cluster = spec::make_cluster(hw, tp * pp);
  m.plan.tp = tp;
  m.plan.pp = pp;
  m.plan.micro_batch_size = mbs;
  m.plan.sequence_parallel = tp > 1;
  spec::apply_defaults(m.plan);
  const OpCosts costs =
      op_costs(m.model, m.cluster, m.plan, schedule::schedule_placement(m.plan.schedule),
               m.execution.value_or(ExecutionOptions{}));
  for (int r = 0; r < pp; ++r) {
    schedule::StageCosts s;
    for (schedule::OpKind k : {schedule::OpKind::F, schedule::OpKind::B, schedule::OpKind::W})
      s[k] = costs.table.cost(r, k);
    m.op_durations.push_back(s);
  }
  m.cluster.hardware.efficiency = spec::HardwareEfficiency{};  // what is fitted must not leak
  return m;
}

std::vector<Measurement> measurements() {
  // Small and large GEMMs (the half-efficiency point), long and short sequences (attention
  // against GEMMs), TP 1 and 8 (the NVLink bus share of an op).
  return {measured("gpt3-1.7b", 1, 2, 1, 512),  measured("gpt3-1.7b", 1, 1, 4, 4096),
          measured("llama2-7b", 8, 1, 1, 2048), measured("llama2-7b", 2, 2, 2, 1024),
          measured("gpt3-18b", 8, 2, 1, 2048),  measured("tiny", 1, 1, 1, 32)};
}

TEST(Calibration, RecoversTheEfficienciesThatMadeTheMeasurements) {
  CalibrationOptions options;
  options.fit = {EfficiencyParameter::Gemm, EfficiencyParameter::GemmHalfFlops,
                 EfficiencyParameter::Attention, EfficiencyParameter::Memory,
                 EfficiencyParameter::IntraNodeBus};
  const CalibrationResult r = calibrate(measurements(), spec::HardwareEfficiency{}, options);
  EXPECT_TRUE(r.converged);
  EXPECT_GT(r.before.mape, 0.05) << "the default start must be off to test anything";
  EXPECT_LT(r.after.mape, 1e-4);
  EXPECT_GT(r.after.r_squared, 0.999999);
  const spec::HardwareEfficiency want = truth();
  EXPECT_NEAR(r.efficiency.gemm, want.gemm, 1e-3 * want.gemm);
  EXPECT_NEAR(r.efficiency.gemm_half_flops, want.gemm_half_flops, 1e-2 * want.gemm_half_flops);
  EXPECT_NEAR(r.efficiency.attention, want.attention, 1e-3 * want.attention);
  EXPECT_NEAR(r.efficiency.memory, want.memory, 1e-2 * want.memory);
  EXPECT_NEAR(r.efficiency.intra_node_bus, want.intra_node_bus, 1e-2 * want.intra_node_bus);
  // Not fitted: kept at the start.
  EXPECT_EQ(r.efficiency.inter_node_bus, spec::HardwareEfficiency{}.inter_node_bus);
  EXPECT_EQ(r.points.size(), static_cast<std::size_t>(r.after.points));
}

TEST(Calibration, FractionsStayWithinTheirRange) {
  // Times far below anything the hardware can do drive the fractions to their bound, never past.
  std::vector<Measurement> ms = measurements();
  for (Measurement& m : ms)
    for (auto& s : m.op_durations)
      for (double& t : s.op) t *= 0.01;
  const CalibrationResult r = calibrate(ms, spec::HardwareEfficiency{});
  for (EfficiencyParameter p : kAllEfficiencyParameters) {
    spec::HardwareEfficiency e = r.efficiency;
    const double v = efficiency_field(e, p);
    EXPECT_GT(v, 0.0) << efficiency_parameter_name(p);
    if (p != EfficiencyParameter::GemmHalfFlops) {
      EXPECT_LE(v, 1.0) << efficiency_parameter_name(p);
    }
  }
}

TEST(Calibration, BadInputsNameTheProblem) {
  EXPECT_THROW(calibrate({}, spec::HardwareEfficiency{}), InputError);
  spec::HardwareEfficiency bad;
  bad.gemm = 1.5;
  try {
    calibrate(measurements(), bad);
    ADD_FAILURE() << "a fraction above 1 must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("gemm"), std::string::npos) << e.what();
  }
  std::vector<Measurement> mixed = measurements();
  mixed[1].cluster.hardware.name = "a100-80gb";
  EXPECT_THROW(calibrate(mixed, spec::HardwareEfficiency{}), InputError);
}

}  // namespace
}  // namespace pipetune::tuner
