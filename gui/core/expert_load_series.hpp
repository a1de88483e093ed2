// What the Inspect page's expert-load chart draws of a run's MoE routing statistics
// (profiler/analysis/expert_load.hpp): per step, the mean and the largest over the MoE layers of
// the busiest expert's tokens over the mean expert's (1 = even), and a caption.
#pragma once

#include <QPointF>
#include <QString>
#include <QVector>

#include "profiler/analysis/expert_load.hpp"

namespace pipetune::gui {

struct ExpertLoadSeries {
  QVector<QPointF> mean;  // (step from 1, imbalance)
  QVector<QPointF> most;
  // "8 MoE layers x 4 experts, 20 steps; busiest expert / mean: last step 1.11 (mean), 1.26
  // (max); dropped 0 of 1310720 choices"
  QString caption;
  bool empty() const { return mean.isEmpty(); }
};

ExpertLoadSeries expert_load_series(const profiler::analysis::ExpertLoad& load);

}  // namespace pipetune::gui
