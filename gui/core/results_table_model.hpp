// ResultsTableModel: a tuner search's feasible plans as a sortable table (plan, iteration time,
// tokens/s, MFU, peak memory), the Pareto front of throughput against peak memory as points for
// the scatter plot, and the "why pruned" counts.
#pragma once

#include <QAbstractTableModel>
#include <QPointF>
#include <QString>
#include <QStringList>
#include <QVector>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tuner/search/search.hpp"

namespace pipetune::gui {

// "tp=8 pp=4 dp=32 mbs=1 1f1b vocab=none recompute=selective zero=1" (as `pipetune tune`).
QString plan_label(const spec::ParallelPlan& plan, const std::string& vocab_label);
QString human_seconds(double seconds);  // "12.3 ms"
QString human_bytes(double bytes);      // "38.2 GiB"

// One point of the scatter: x = peak memory (bytes), y = tokens/s; `index` into results().
struct ResultPoint {
  double peak_memory_bytes = 0.0;
  double tokens_per_s = 0.0;
  int index = 0;
};

class ResultsTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Plan, IterationTime, TokensPerS, Mfu, PeakMemory, ColumnCount };

  explicit ResultsTableModel(QObject* parent = nullptr);

  // Takes a search's outcome (ranked plans in the search's order: tokens/s descending).
  void set_result(const tuner::SearchResult& result);
  void clear();

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;
  // Stable sort by the column's value (numbers as numbers, the plan by its label).
  void sort(int column, Qt::SortOrder order = Qt::AscendingOrder) override;

  // The plan shown in a row (after sorting); row must be in range.
  const tuner::ScoredPlan& plan_at(int row) const;
  // Index into results() of a row, and the row showing results()[index] (-1 when none).
  int result_index(int row) const { return order_[static_cast<std::size_t>(row)]; }
  int row_of(int result_index) const;
  const std::vector<tuner::ScoredPlan>& results() const { return ranked_; }

  std::vector<ResultPoint> points() const;         // every feasible plan
  std::vector<ResultPoint> pareto_points() const;  // the front, by peak memory ascending
  // Reason -> plans pruned for it, most frequent first: "out of memory: 1204".
  QStringList pruned_lines() const;
  const std::map<std::string, std::int64_t>& pruned() const { return pruned_; }
  std::int64_t candidates_enumerated() const { return enumerated_; }
  std::int64_t candidates_evaluated() const { return evaluated_; }

 private:
  std::vector<tuner::ScoredPlan> ranked_;
  std::vector<int> order_;   // row -> index into ranked_
  std::vector<int> pareto_;  // indices into ranked_
  std::map<std::string, std::int64_t> pruned_;
  std::int64_t enumerated_ = 0, evaluated_ = 0;
};

}  // namespace pipetune::gui
