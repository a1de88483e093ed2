// The Inspect page's expert-load chart: opening a training run with MoE routing statistics shows
// the chart with one point a step; opening a run without them (a simulation) hides it.
#include <gtest/gtest.h>

#include <QDir>
#include <QImage>
#include <cstdlib>

#include "db/store/run_writer.hpp"
#include "engine/schedule/costs.hpp"
#include "engine/schedule/generators.hpp"
#include "gui/app/expert_load_chart.hpp"
#include "gui/app/inspect_page.hpp"
#include "gui/support/gui_test_env.hpp"
#include "profiler/analysis/expert_load.hpp"
#include "tests/gui/core/event_wait.hpp"
#include "tests/gui/support/temp_dir.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::gui {
namespace {

profiler::Trace simulated_trace() {
  schedule::GeneratorParams g;
  g.name = "1f1b";
  g.stages = 2;
  g.microbatches = 4;
  return sim::simulate(schedule::generate(g), schedule::CostTable::uniform(2, 1e-3, 2e-3, 0.0))
      .trace;
}

TEST(InspectExpertLoad, ATrainingRunWithRoutingShowsItsExpertLoad) {
  if (test::gui_test_app() == nullptr) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  pipetune::testing::TempDir dir;
  const std::string path = dir.file("ws.db");
  profiler::Trace measured = simulated_trace();
  measured.kind = profiler::TraceKind::Measured;
  for (int step = 0; step < 4; ++step)
    for (int e = 0; e < 4; ++e)
      measured.counters.push_back({0,
                                   measured.intern(profiler::analysis::expert_tokens_counter(0, e)),
                                   1000 * (step + 1), e == 0 ? 5.0 : 1.0});
  db::store_trace(path, {profiler::TraceKind::Simulated, "sim", "{}", "{}"}, simulated_trace());
  db::store_trace(path, {profiler::TraceKind::Measured, "moe", "{}", "{}"}, measured);
  WorkspaceModel workspace;
  InspectPage page(&workspace);
  page.resize(1000, 700);
  page.show();
  page.open_workspace(QString::fromStdString(path));
  ASSERT_TRUE(test::process_events_until([&] { return workspace.rowCount() == 2; }));
  const int moe_row = workspace.run_at(0).name == "moe" ? 0 : 1;
  page.open_row(moe_row);
  ASSERT_TRUE(
      test::process_events_until([&] { return page.expert_load_chart()->isVisible(); }, 30000));
  const ExpertLoadSeries& s = page.expert_load_chart()->series();
  ASSERT_EQ(s.mean.size(), 4);
  EXPECT_DOUBLE_EQ(s.most.back().y(), 2.5);  // 5 of mean 2
  EXPECT_NE(s.caption.indexOf("1 MoE layers x 4 experts, 4 steps"), -1) << s.caption.toStdString();
  // Both lines are drawn: the max in red, the mean in blue (here the same values: the mean's
  // line lies on the max's, drawn last).
  const QImage shot = page.expert_load_chart()->grab().toImage();
  const QString artifacts = qEnvironmentVariableIsEmpty("PIPETUNE_GUI_ARTIFACTS")
                                ? QDir::currentPath() + "/gui_artifacts"
                                : qEnvironmentVariable("PIPETUNE_GUI_ARTIFACTS");
  QDir().mkpath(artifacts);
  EXPECT_TRUE(shot.save(artifacts + "/expert_load.png"));
  int blue = 0;
  for (int y = 0; y < shot.height(); ++y)
    for (int x = 0; x < shot.width(); ++x) {
      const QColor c = shot.pixelColor(x, y);
      if (std::abs(c.red() - 52) + std::abs(c.green() - 120) + std::abs(c.blue() - 200) < 60)
        ++blue;
    }
  EXPECT_GT(blue, 50) << "the mean's line";
  page.open_row(1 - moe_row);
  EXPECT_FALSE(page.expert_load_chart()->isVisible());
}

}  // namespace
}  // namespace pipetune::gui
