#include "gui/core/tune_controller.hpp"

#include "db/store/search_records.hpp"
#include "tuner/search/tuning_target.hpp"

#include <algorithm>
#include <exception>
#include <nlohmann/json.hpp>

#include "db/store/record_json.hpp"
#include "db/store/workspace.hpp"
#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/run_spec.hpp"
#include "gui/core/plan_trace.hpp"
#include "tuner/export/small_scale.hpp"
#include "tuner/search/evaluator_scorer.hpp"
#include "tuner/search/search_request.hpp"

namespace pipetune::gui {

namespace {

tuner::TuningTarget tuning_target(const TuneRequest& r) {
  return {r.model_preset, r.hardware_preset, r.gpus, r.nodes_of, r.global_batch,
          r.seq,          r.cluster_preset};
}

// Stored as `pipetune tune` stores a search (db/store/search_records.hpp), so the CLI reads it.
std::int64_t store_search(const std::string& path, const TuneRequest& request,
                          const tuner::SearchResult& r) {
  return db::store_search(path, tuning_target(request), r);
}

// The request checked as `pipetune tune` checks it (InputError naming the field).
tuner::SearchSpace tune_space(const TuneRequest& r) {
  tuner::SearchSpace space = tuner::search_space({.target = tuning_target(r),
                                                  .schedules = r.schedules,
                                                  .vocab_modes = {},  // every mode
                                                  .max_candidates = r.max_candidates,
                                                  .moe_chunks = r.moe_chunks,
                                                  .whole_experts = r.whole_experts,
                                                  .dedup_experts = r.dedup_experts,
                                                  .two_phase_all_to_all = r.two_phase_all_to_all,
                                                  .sparse_embedding = r.sparse_embedding,
                                                  .keep = r.keep,
                                                  .threads = r.threads});
  // One core is left to the GUI thread unless the request says otherwise.
  if (space.threads == 0)
    space.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 1);
  return space;
}

}  // namespace

TuneTarget resolve_tune_target(const TuneRequest& r) {
  const tuner::SearchSpace space = tune_space(r);
  return {space.model, space.cluster, space.global_batch};
}

TuneController::TuneController(QObject* parent) : QObject(parent) {}

TuneController::~TuneController() {
  cancel_ = true;
  join_workers();
}

void TuneController::join_workers() {
  if (search_worker_.joinable()) search_worker_.join();
  if (preview_worker_.joinable()) preview_worker_.join();
}

void TuneController::cancel() {
  cancel_ = true;
}

bool TuneController::start(const TuneRequest& request) {
  error_.clear();
  if (running_) {
    error_ = "a search is still going: cancel it first";
    return false;
  }
  tuner::SearchSpace space;
  tuner::EvaluateOptions options;
  try {
    space = tune_space(request);
    options = tuner::search_options(space.cluster, request.failures);
    if (const std::string problem = spec::moe_imbalance_problem(request.moe_imbalance);
        !problem.empty())
      throw InputError("the MoE imbalance " + problem);
    if (request.moe_imbalance > 1.0)
      tuner::set_moe_imbalance(options, space.cluster.hardware,
                               tuner::MoeImbalance::everywhere(request.moe_imbalance));
    if (const std::string problem = spec::embedding_rows_problem(request.embedding_rows);
        !problem.empty())
      throw InputError("the embedding rows " + problem);
    if (request.embedding_rows != 1.0) {
      tuner::set_embedding_rows_factor(options, space.cluster.hardware, request.embedding_rows);
      space.embedding_rows_factor = request.embedding_rows;
    }
  } catch (const std::exception& e) {
    error_ = QString::fromStdString(e.what());
    return false;
  }
  const TuneTarget target{space.model, space.cluster, space.global_batch};
  if (search_worker_.joinable()) search_worker_.join();
  ++generation_;
  pending_preview_.reset();
  request_ = request;
  target_ = target;
  results_.clear();
  search_id_ = -1;
  cancel_ = false;
  done_ = 0;
  total_ = 0;
  running_ = true;
  const std::string path = workspace_;
  search_worker_ = std::thread([this, space, target, request, path, options] {
    auto result = std::make_shared<tuner::SearchResult>();
    QString message;
    bool error = false;
    std::int64_t id = -1;
    try {
      *result = tuner::search_plans(
          space, tuner::evaluator_scorers(target.model, target.cluster, options),
          [this](std::int64_t done, std::int64_t total) {
            done_ = done;
            total_ = total;
            if (progress_pending_.exchange(true)) return;
            inbox_.post([this] {
              progress_pending_ = false;
              emit progress(done_.load(), total_.load());
            });
          },
          &cancel_);
      if (result->cancelled) {
        message = QString("cancelled after %1 of %2 plans; nothing stored")
                      .arg(done_.load())
                      .arg(total_.load());
      } else if (result->ranked.empty()) {
        message = QString::fromStdString(
            tuner::no_feasible_plan_explanation(*result, target.model, target.cluster));
      } else {
        id = store_search(path, request, *result);
        message = QString("%1 feasible plans of %2 (%3 simulated); stored as search %4")
                      .arg(result->ranked.size())
                      .arg(result->candidates_enumerated)
                      .arg(result->candidates_evaluated)
                      .arg(id);
      }
    } catch (const std::exception& e) {
      error = true;
      message = QString::fromStdString(e.what());
    }
    inbox_.post([this, result, message, error, id] {
      if (search_worker_.joinable()) search_worker_.join();
      running_ = false;
      search_id_ = id;
      results_.set_result(*result);
      if (error) {
        error_ = message;
        emit failed(message);
      } else {
        emit finished(result->cancelled, message);
      }
    });
  });
  return true;
}

std::optional<tuner::PlanExplanation> TuneController::explain(int row) const {
  const std::vector<tuner::ScoredPlan>& ranked = results_.results();
  if (running_ || ranked.size() < 2 || row < 0 || row >= results_.rowCount()) return std::nullopt;
  const int index = results_.result_index(row);
  const tuner::ScoredPlan& other = ranked[index == 0 ? 1 : static_cast<std::size_t>(index)];
  return tuner::explain_plans(target_.model, target_.cluster, ranked.front().plan, other.plan);
}

QString TuneController::explanation_text(int row) const {
  const std::optional<tuner::PlanExplanation> e = explain(row);
  if (!e) return {};
  const std::vector<tuner::ScoredPlan>& ranked = results_.results();
  const int index = results_.result_index(row);
  const tuner::ScoredPlan& other = ranked[index == 0 ? 1 : static_cast<std::size_t>(index)];
  const QString title = QString("best: %1\nrunner-up (%2): %3\n")
                            .arg(plan_label(ranked.front().plan, ranked.front().vocab_label),
                                 index == 0 ? QString("rank 2")
                                            : QString("the selected plan, rank %1").arg(index + 1),
                                 plan_label(other.plan, other.vocab_label));
  return title + QString::fromStdString(tuner::explanation_text(*e));
}

tuner::ExportRequest TuneController::export_request(int row) const {
  const tuner::ScoredPlan& c = results_.plan_at(row);
  tuner::ExportRequest r;
  r.model = target_.model;
  r.cluster = target_.cluster;
  r.plan = c.plan;
  r.vocab_label = c.vocab_label;
  spec::apply_defaults(r.plan);
  r.description = "pipetune-gui: predicted " + human_seconds(c.score.iteration_time).toStdString() +
                  " per iteration, " + QString::number(c.score.tokens_per_s, 'f', 0).toStdString() +
                  " tokens/s, MFU " + QString::number(100.0 * c.score.mfu, 'f', 1).toStdString() +
                  "%, peak " + human_bytes(c.score.peak_memory_bytes).toStdString();
  return r;
}

RunRequest TuneController::small_scale_request(int row, int steps) const {
  const tuner::ScoredPlan& c = results_.plan_at(row);
  const tuner::SmallScaleRun small = tuner::shrink_to_engine(target_.model, c.plan);
  RunRequest r;
  r.model = small.model;
  r.plan = small.plan;
  r.cluster = target_.cluster;  // planned with the target hardware's op costs, as predicted
  r.steps = steps;
  r.name = "small scale of " + plan_label(c.plan, c.vocab_label).toStdString();
  return r;
}

bool TuneController::preview(int row) {
  if (running_ || row < 0 || row >= results_.rowCount()) return false;
  pending_preview_ = results_.plan_at(row);
  pending_preview_row_ = row;
  if (!previewing_) start_next_preview();
  return true;
}

void TuneController::start_next_preview() {
  if (!pending_preview_) return;
  // The previous worker has posted its result (that is how we got here): joining is immediate.
  if (preview_worker_.joinable()) preview_worker_.join();
  previewing_ = true;
  const tuner::ScoredPlan plan = *pending_preview_;
  const int row = pending_preview_row_;
  pending_preview_.reset();
  const TuneTarget target = target_;
  const std::uint64_t generation = generation_;
  preview_worker_ = std::thread([this, row, plan, target, generation] {
    std::shared_ptr<const profiler::Trace> trace;
    QString message;
    try {
      PlanTrace t = simulate_plan_trace(target.model, target.cluster, plan.plan);
      message = QString("%1 (simulated: pipeline %2, bubble %3%)")
                    .arg(plan_label(plan.plan, plan.vocab_label))
                    .arg(human_seconds(t.iteration_time))
                    .arg(100.0 * t.bubble_ratio, 0, 'f', 1);
      trace = std::make_shared<const profiler::Trace>(std::move(t.trace));
    } catch (const std::exception& e) {
      message = QString::fromStdString(e.what());
    }
    inbox_.post([this, row, trace, message, generation] {
      if (preview_worker_.joinable()) preview_worker_.join();
      previewing_ = false;
      if (generation == generation_) {
        if (trace)
          emit preview_ready(row, trace, message);
        else
          emit preview_failed(row, message);
      }
      start_next_preview();
    });
  });
}

}  // namespace pipetune::gui
