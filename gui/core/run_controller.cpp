#include "gui/core/run_controller.hpp"

#include <exception>
#include <nlohmann/json.hpp>
#include <vector>

#include "db/store/record_json.hpp"
#include "db/store/run_name.hpp"
#include "db/store/run_writer.hpp"
#include "engine/runtime/trainer.hpp"
#include "tuner/predict/planned_schedule.hpp"

namespace pipetune::gui {

namespace {

std::string summary_json(const runtime::TrainResult& r) {
  std::vector<double> losses;
  for (const auto& st : r.steps) losses.push_back(st.loss);
  return db::training_summary_json(r.iteration_seconds, runtime::steady_tokens_per_s(r), losses)
      .dump();
}

}  // namespace

QString run_outcome_name(RunOutcome outcome) {
  switch (outcome) {
    case RunOutcome::Complete:
      return "complete";
    case RunOutcome::Interrupted:
      return "interrupted";
    case RunOutcome::Failed:
      return "failed";
  }
  return "failed";
}

RunController::RunController(QObject* parent) : QObject(parent) {}

RunController::~RunController() {
  stop_ = true;
  join_worker();
}

void RunController::join_worker() {
  if (worker_.joinable()) worker_.join();
}

void RunController::stop() {
  stop_ = true;
}

bool RunController::start(const RunRequest& request) {
  error_.clear();
  if (running_) {
    error_ = "a run is still going: stop it first";
    return false;
  }
  join_worker();
  runtime::TrainOptions o;
  o.model = request.model;
  o.plan = request.plan;
  o.steps = request.steps;
  o.seed = request.seed;
  o.adamw.lr = request.learning_rate;
  o.threads_per_rank = request.threads_per_rank;
  try {
    runtime::check_train_options(o);
    if (request.cluster) {
      spec::apply_defaults(o.plan);
      o.schedule = tuner::planned_schedule(
                       o.model, tuner::cluster_for_plan(*request.cluster, o.plan), o.plan)
                       .schedule;
    }
  } catch (const std::exception& e) {
    error_ = QString::fromStdString(e.what());
    return false;
  }
  const std::string name =
      !request.name.empty() ? request.name : db::training_run_name(o.model, o.plan);
  // The store's rule for names, before the run starts (the CLI's train refuses the same).
  if (const std::string problem = db::run_name_problem(name); !problem.empty()) {
    error_ = QString::fromStdString("run name: " + problem);
    return false;
  }
  stop_ = false;
  running_ = true;
  run_id_ = -1;
  losses_.clear();
  tokens_per_s_ = 0.0;
  spans_received_ = 0;
  const std::string path = workspace_;
  worker_ = std::thread([this, o = std::move(o), name, path]() mutable {
    std::unique_ptr<db::RunWriter> writer;
    RunOutcome outcome = RunOutcome::Failed;
    QString message;
    try {
      writer = std::make_unique<db::RunWriter>(
          path, db::RunInfo{profiler::TraceKind::Measured, name,
                            db::training_plan_json(o.model, o.plan, o.steps, o.seed).dump(),
                            db::training_specs_json(o.model).dump()});
      const std::int64_t id = writer->run_id();
      inbox_.post([this, id] {
        run_id_ = id;
        emit started(id);
      });
      db::RunWriter* w = writer.get();
      o.trace_sink = [this, w](profiler::Trace part) {
        w->append(part);
        auto shared = std::make_shared<const profiler::Trace>(std::move(part));
        inbox_.post([this, shared] {
          spans_received_ += static_cast<std::int64_t>(shared->spans.size());
          emit trace_part(shared);
        });
      };
      o.on_step = [this](const runtime::StepResult& s) {
        inbox_.post([this, s] {
          losses_.push_back(QPointF(s.step, s.loss));
          tokens_per_s_ = s.tokens_per_s;
          emit step_done(s.step, s.loss, s.tokens_per_s);
        });
      };
      o.stop = &stop_;
      const runtime::TrainResult r = runtime::train(o);
      writer->set_summary_json(summary_json(r));
      outcome = r.stopped ? RunOutcome::Interrupted : RunOutcome::Complete;
      writer->finish(outcome == RunOutcome::Complete ? db::RunStatus::Complete
                                                     : db::RunStatus::Interrupted);
      if (r.stopped)
        message = QString("stopped after step %1").arg(r.steps.empty() ? 0 : r.steps.back().step);
    } catch (const std::exception& e) {
      outcome = RunOutcome::Failed;
      message = QString::fromStdString(e.what());
      if (writer) {
        try {
          writer->finish(db::RunStatus::Failed);
        } catch (...) {  // the training error is the one to show
        }
      }
    }
    writer.reset();
    inbox_.post([this, outcome, message] {
      join_worker();
      running_ = false;
      if (outcome == RunOutcome::Failed) error_ = message;
      emit finished(outcome, message);
    });
  });
  return true;
}

}  // namespace pipetune::gui
