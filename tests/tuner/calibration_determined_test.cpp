// What calibration data determine: the parameters fitted are those the data's
// independent points pin down (the Jacobian's rank, so a repeated row adds nothing), the others
// keep their start or are refused by name, and a measurement or parameter given twice is refused.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/spec/load.hpp"
#include "tuner/calibration/calibration.hpp"
#include "tuner/cost/op_costs.hpp"

namespace pipetune::tuner {
namespace {

// Op durations of one plan as the cost model predicts them with the preset's efficiencies
// scaled, so that the default start is off.
Measurement measured(const std::string& name, const std::string& model, int tp, int pp, int seq) {
  Measurement m;
  m.name = name;
  m.model = spec::load_model(model);
  m.model.seq_len = seq;
  spec::apply_defaults(m.model);
  spec::HardwareSpec hw = spec::load_hardware("h100-sxm");
  hw.efficiency.gemm *= 0.8;
  hw.efficiency.attention *= 1.3;
  m.cluster = spec::make_cluster(hw, tp * pp);
  m.plan.tp = tp;
  m.plan.pp = pp;
  m.plan.sequence_parallel = tp > 1;
  spec::apply_defaults(m.plan);
  const OpCosts costs = op_costs(m.model, m.cluster, m.plan,
                                 schedule::schedule_placement(m.plan.schedule), ExecutionOptions{});
  for (int r = 0; r < pp; ++r) {
    schedule::StageCosts s;
    s[schedule::OpKind::F] = costs.table.cost(r, schedule::OpKind::F);
    s[schedule::OpKind::BW] =
        costs.table.cost(r, schedule::OpKind::B) + costs.table.cost(r, schedule::OpKind::W);
    m.op_durations.push_back(s);
  }
  m.cluster.hardware.efficiency = spec::HardwareEfficiency{};
  return m;
}

bool contains(const std::vector<EfficiencyParameter>& ps, EfficiencyParameter p) {
  return std::find(ps.begin(), ps.end(), p) != ps.end();
}

TEST(CalibrationDetermined, FewPointsFitWhatTheyDetermineAndKeepTheRest) {
  // One single-node run of 2 stages: 4 op durations (F and BW on each) for 6 parameters.
  const std::vector<Measurement> one = {measured("a", "llama2-7b", 1, 2, 2048)};
  const CalibrationResult r = calibrate(one, spec::HardwareEfficiency{});
  EXPECT_EQ(r.after.points, 4);
  EXPECT_LE(r.independent_points, 4);
  EXPECT_GE(r.independent_points, 1);
  EXPECT_EQ(r.fitted.size(), static_cast<std::size_t>(r.independent_points));
  EXPECT_EQ(r.fitted.size() + r.fixed.size(), 6u);
  EXPECT_TRUE(contains(r.fitted, EfficiencyParameter::Gemm));
  EXPECT_TRUE(contains(r.fixed, EfficiencyParameter::InterNodeBus));
  spec::HardwareEfficiency start, fitted = r.efficiency;
  for (EfficiencyParameter p : r.fixed)
    EXPECT_EQ(efficiency_field(fitted, p), efficiency_field(start, p))
        << efficiency_parameter_name(p);
  EXPECT_LE(r.after.rms_log, r.before.rms_log);

  // The same run again under another name repeats its rows: nothing more is determined.
  std::vector<Measurement> twice = one;
  twice.push_back(one.front());
  twice.back().name = "b";
  EXPECT_EQ(calibrate(twice, spec::HardwareEfficiency{}).independent_points, r.independent_points);

  // Asked to fit every parameter or nothing: refused, naming the points and the parameters.
  CalibrationOptions strict;
  strict.undetermined = UndeterminedParameters::Refuse;
  try {
    (void)calibrate(one, spec::HardwareEfficiency{}, strict);
    ADD_FAILURE() << "undetermined parameters must be refused";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the 4 data points determine " + std::to_string(r.independent_points) +
                     " of the 6 parameters asked for"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("inter_node_bus"), std::string::npos) << m;
  }
  strict.fit = {EfficiencyParameter::Gemm};
  EXPECT_NO_THROW((void)calibrate(one, spec::HardwareEfficiency{}, strict));
}

TEST(CalibrationDetermined, VariedPlansDetermineMore) {
  // Short and long sequences (attention against GEMMs), small and large models (the per-GEMM
  // ramp-up), TP 1 and 8 (the NVLink share).
  const std::vector<Measurement> varied = {
      measured("a", "gpt3-1.7b", 1, 2, 512), measured("b", "gpt3-1.7b", 1, 1, 4096),
      measured("c", "llama2-7b", 8, 1, 2048), measured("d", "tiny", 1, 1, 32)};
  const CalibrationResult r = calibrate(varied, spec::HardwareEfficiency{});
  for (EfficiencyParameter p : {EfficiencyParameter::Gemm, EfficiencyParameter::GemmHalfFlops,
                                EfficiencyParameter::Attention, EfficiencyParameter::IntraNodeBus})
    EXPECT_TRUE(contains(r.fitted, p)) << efficiency_parameter_name(p);
  EXPECT_TRUE(contains(r.fixed, EfficiencyParameter::InterNodeBus));
}

TEST(CalibrationDetermined, AMeasurementOrParameterGivenTwiceIsRefusedButNamesMayRepeat) {
  // Published rows carry their model's name: two rows of one model on different plans are two
  // measurements, and both are fitted.
  const std::vector<Measurement> same_name = {measured("Llama 3 8B", "tiny", 1, 2, 32),
                                              measured("Llama 3 8B", "tiny", 1, 1, 64)};
  const CalibrationResult both = calibrate(same_name, spec::HardwareEfficiency{});
  // Each measurement gives its F and BW per pipeline rank: 2 ranks x 2 + 1 rank x 2.
  EXPECT_EQ(both.points.size(), 6u) << "both measurements' data points are fitted";
  const std::vector<Measurement> twice = {same_name.front(), same_name.back(), same_name.front()};
  try {
    (void)calibrate(twice, spec::HardwareEfficiency{});
    ADD_FAILURE() << "a measurement given twice must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'Llama 3 8B' is given twice"), std::string::npos)
        << e.what();
  }
  CalibrationOptions o;
  o.fit = {EfficiencyParameter::Attention, EfficiencyParameter::Gemm,
           EfficiencyParameter::Attention};
  try {
    (void)calibrate({same_name.front()}, spec::HardwareEfficiency{}, o);
    ADD_FAILURE() << "a parameter asked for twice must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("attention is asked for twice"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pipetune::tuner
