#include "gui/core/results_table_model.hpp"

#include <algorithm>
#include <numeric>

#include "profiler/units.hpp"
#include "tuner/search/tuning_target.hpp"

namespace pipetune::gui {

QString plan_label(const spec::ParallelPlan& p, const std::string& vocab_label) {
  return QString::fromStdString(tuner::plan_summary(p, vocab_label));
}

QString human_seconds(double s) {
  return QString::fromStdString(profiler::format_seconds(s));
}

QString human_bytes(double b) {
  return QString::fromStdString(profiler::format_bytes(b));
}

ResultsTableModel::ResultsTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void ResultsTableModel::set_result(const tuner::SearchResult& r) {
  beginResetModel();
  ranked_ = r.ranked;
  order_.resize(ranked_.size());
  std::iota(order_.begin(), order_.end(), 0);
  pruned_ = r.pruned;
  enumerated_ = r.candidates_enumerated;
  evaluated_ = r.candidates_evaluated;
  // The front's plans are copies of ranked ones: find each by its plan and score.
  pareto_.clear();
  for (const auto& f : r.pareto) {
    const QString label = plan_label(f.plan, f.vocab_label);
    for (std::size_t i = 0; i < ranked_.size(); ++i) {
      const auto& c = ranked_[i];
      if (c.score.tokens_per_s == f.score.tokens_per_s &&
          c.score.peak_memory_bytes == f.score.peak_memory_bytes &&
          plan_label(c.plan, c.vocab_label) == label) {
        pareto_.push_back(static_cast<int>(i));
        break;
      }
    }
  }
  std::sort(pareto_.begin(), pareto_.end(), [&](int a, int b) {
    return ranked_[a].score.peak_memory_bytes < ranked_[b].score.peak_memory_bytes;
  });
  endResetModel();
}

void ResultsTableModel::clear() {
  set_result(tuner::SearchResult{});
}

int ResultsTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(order_.size());
}
int ResultsTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

const tuner::ScoredPlan& ResultsTableModel::plan_at(int row) const {
  return ranked_[static_cast<std::size_t>(order_.at(static_cast<std::size_t>(row)))];
}

int ResultsTableModel::row_of(int result_index) const {
  for (std::size_t r = 0; r < order_.size(); ++r)
    if (order_[r] == result_index) return static_cast<int>(r);
  return -1;
}

QVariant ResultsTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const tuner::ScoredPlan& c = plan_at(index.row());
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case Plan:
        return plan_label(c.plan, c.vocab_label);
      case IterationTime:
        return human_seconds(c.score.iteration_time);
      case TokensPerS:
        return QString::number(c.score.tokens_per_s, 'f', 0);
      case Mfu:
        return QString::number(100.0 * c.score.mfu, 'f', 1) + "%";
      case PeakMemory:
        return human_bytes(c.score.peak_memory_bytes);
      default:
        return {};
    }
  }
  if (role == Qt::UserRole) {  // the raw value a column sorts by
    switch (index.column()) {
      case Plan:
        return plan_label(c.plan, c.vocab_label);
      case IterationTime:
        return c.score.iteration_time;
      case TokensPerS:
        return c.score.tokens_per_s;
      case Mfu:
        return c.score.mfu;
      case PeakMemory:
        return c.score.peak_memory_bytes;
      default:
        return {};
    }
  }
  if (role == Qt::ToolTipRole && index.column() == Plan) return plan_label(c.plan, c.vocab_label);
  if (role == Qt::TextAlignmentRole && index.column() != Plan)
    return QVariant(Qt::AlignRight | Qt::AlignVCenter);
  return {};
}

QVariant ResultsTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole) return {};
  if (orientation == Qt::Vertical) return section + 1;
  switch (section) {
    case Plan:
      return "plan";
    case IterationTime:
      return "iteration time";
    case TokensPerS:
      return "tokens/s";
    case Mfu:
      return "MFU";
    case PeakMemory:
      return "peak memory";
    default:
      return {};
  }
}

void ResultsTableModel::sort(int column, Qt::SortOrder order) {
  if (column < 0 || column >= ColumnCount) return;
  emit layoutAboutToBeChanged();
  auto value = [&](int i) -> double {
    const auto& s = ranked_[static_cast<std::size_t>(i)].score;
    switch (column) {
      case IterationTime:
        return s.iteration_time;
      case TokensPerS:
        return s.tokens_per_s;
      case Mfu:
        return s.mfu;
      default:
        return s.peak_memory_bytes;
    }
  };
  std::vector<QString> labels;
  if (column == Plan) {
    labels.resize(ranked_.size());
    for (std::size_t i = 0; i < ranked_.size(); ++i)
      labels[i] = plan_label(ranked_[i].plan, ranked_[i].vocab_label);
  }
  const QModelIndexList before = persistentIndexList();
  const std::vector<int> old_order = order_;
  std::stable_sort(order_.begin(), order_.end(), [&](int a, int b) {
    if (column == Plan) {
      const auto& la = labels[static_cast<std::size_t>(a)];
      const auto& lb = labels[static_cast<std::size_t>(b)];
      return order == Qt::AscendingOrder ? la < lb : lb < la;
    }
    return order == Qt::AscendingOrder ? value(a) < value(b) : value(b) < value(a);
  });
  std::vector<int> new_row_of(ranked_.size());
  for (std::size_t r = 0; r < order_.size(); ++r) new_row_of[order_[r]] = static_cast<int>(r);
  QModelIndexList after;
  for (const QModelIndex& i : before) {
    const int result = old_order[static_cast<std::size_t>(i.row())];
    after << index(new_row_of[static_cast<std::size_t>(result)], i.column());
  }
  changePersistentIndexList(before, after);
  emit layoutChanged();
}

std::vector<ResultPoint> ResultsTableModel::points() const {
  std::vector<ResultPoint> out;
  out.reserve(ranked_.size());
  for (std::size_t i = 0; i < ranked_.size(); ++i)
    out.push_back(
        {ranked_[i].score.peak_memory_bytes, ranked_[i].score.tokens_per_s, static_cast<int>(i)});
  return out;
}

std::vector<ResultPoint> ResultsTableModel::pareto_points() const {
  std::vector<ResultPoint> out;
  for (int i : pareto_)
    out.push_back({ranked_[static_cast<std::size_t>(i)].score.peak_memory_bytes,
                   ranked_[static_cast<std::size_t>(i)].score.tokens_per_s, i});
  return out;
}

QStringList ResultsTableModel::pruned_lines() const {
  std::vector<std::pair<std::string, std::int64_t>> v(pruned_.begin(), pruned_.end());
  std::stable_sort(v.begin(), v.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  QStringList out;
  for (const auto& [reason, count] : v)
    out << QString::fromStdString(reason) + ": " + QString::number(count);
  return out;
}

}  // namespace pipetune::gui
