// TuneController: a search on a worker stored as `pipetune tune` stores it, Cancel, bad
// requests, the simulated timeline of a result, export and "run at small scale".
#include "gui/core/tune_controller.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <QFile>
#include <QFileInfo>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "db/store/record_json.hpp"
#include "db/store/workspace.hpp"
#include "engine/errors.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/run_spec.hpp"
#include "gui/core/plan_export.hpp"
#include "tests/gui/core/event_wait.hpp"
#include "tests/gui/support/gui_test_env.hpp"
#include "tests/gui/support/temp_dir.hpp"
#include "tuner/search/evaluator_scorer.hpp"
#include "tuner/search/tuning_target.hpp"

namespace pipetune::gui {
namespace {

namespace fs = std::filesystem;

using pipetune::testing::TempDir;

TuneRequest small_request() {
  TuneRequest r;
  r.model_preset = "llama3-8b";
  r.hardware_preset = "h100-sxm";
  r.gpus = 8;
  r.global_batch = 32;
  r.schedules = {"1f1b", "interleaved-1f1b"};
  return r;
}

struct Finished {
  bool done = false, cancelled = false;
  QString message;
};

Finished run_search(TuneController& c, const TuneRequest& r) {
  Finished f;
  QObject::connect(&c, &TuneController::finished, [&](bool cancelled, QString message) {
    f.done = true;
    f.cancelled = cancelled;
    f.message = message;
  });
  QObject::connect(&c, &TuneController::failed, [&](QString message) {
    f.done = true;
    f.message = "failed: " + message;
  });
  EXPECT_TRUE(c.start(r)) << c.error_message().toStdString();
  EXPECT_TRUE(test::process_events_until([&] { return f.done; }));
  return f;
}

// The request's search called directly, as `pipetune tune` runs it.
tuner::SearchResult direct_search(const TuneRequest& request) {
  const TuneTarget t = resolve_tune_target(request);
  tuner::SearchSpace space;
  space.model = t.model;
  space.cluster = t.cluster;
  space.global_batch = t.global_batch;
  space.schedules = request.schedules;
  space.keep = request.keep;
  space.stage_layouts = true;  // as the GUI's request searches by default
  return tuner::search_plans(
      space, tuner::evaluator_scorers(t.model, t.cluster,
                                      tuner::search_options(t.cluster, request.failures)));
}

// A cluster preset is a target of its own, stored with the search as `pipetune tune --cluster`
// stores it (so `pipetune export` resolves the same cluster).
TEST(TuneController, SearchesAClusterPresetAndStoresIt) {
  test::test_core_app();
  TempDir dir;
  TuneController c;
  c.set_workspace(dir.qfile("ws.db"));
  TuneRequest request = small_request();
  request.hardware_preset.clear();
  request.gpus = 0;
  request.cluster_preset = "h100-mixed-nic";
  request.schedules = {"1f1b"};
  const Finished f = run_search(c, request);
  ASSERT_FALSE(f.cancelled) << f.message.toStdString();
  ASSERT_GE(c.search_id(), 0) << f.message.toStdString();
  EXPECT_EQ(resolve_tune_target(request).cluster.devices, 32);
  db::Workspace ws(dir.file("ws.db"));
  const std::vector<db::TrialRecord> trials = ws.trials(c.search_id());
  ASSERT_FALSE(trials.empty());
  db::TrialTarget target;
  spec::ParallelPlan plan;
  std::string label;
  db::read_trial_json(nlohmann::json::parse(trials.front().plan_json), target, plan, label);
  EXPECT_EQ(target.cluster, "h100-mixed-nic");
  EXPECT_EQ(plan.world_size(), 32);
}

TEST(TuneController, SearchesOnAWorkerAndStoresTheSearch) {
  test::test_core_app();
  TempDir dir;
  TuneController c;
  c.set_workspace(dir.qfile("ws.db"));
  std::int64_t last_done = -1, last_total = -1;
  QObject::connect(&c, &TuneController::progress, [&](qint64 done, qint64 total) {
    EXPECT_GE(done, last_done) << "progress never goes back";
    last_done = done;
    last_total = total;
  });
  const TuneRequest request = small_request();
  const Finished f = run_search(c, request);
  ASSERT_FALSE(f.cancelled) << f.message.toStdString();
  ASSERT_GE(c.search_id(), 0) << f.message.toStdString();
  EXPECT_EQ(last_done, last_total) << "the last progress report is the end";

  // The same search called directly ranks the same plans.
  const tuner::SearchResult direct = direct_search(request);
  ResultsTableModel* m = c.results();
  ASSERT_EQ(static_cast<std::size_t>(m->rowCount()), direct.ranked.size());
  EXPECT_DOUBLE_EQ(m->plan_at(0).score.tokens_per_s, direct.ranked[0].score.tokens_per_s);
  EXPECT_EQ(m->candidates_enumerated(), direct.candidates_enumerated);

  // Stored as `pipetune tune` stores it: one trial per ranked plan, the target and plan as JSON.
  db::Workspace ws(dir.qfile("ws.db").toStdString());
  EXPECT_EQ(ws.latest_search_id(), c.search_id());
  const auto trials = ws.trials(c.search_id());
  ASSERT_EQ(trials.size(), direct.ranked.size());
  const auto j = nlohmann::json::parse(trials[0].plan_json);
  EXPECT_EQ(j.at("model"), "llama3-8b");
  EXPECT_EQ(j.at("hardware"), "h100-sxm");
  EXPECT_EQ(j.at("gpus"), 8);
  EXPECT_EQ(j.at("global_batch"), 32);
  EXPECT_EQ(j.at("plan").at("tp"), direct.ranked[0].plan.tp);
  EXPECT_EQ(j.at("plan").at("pp"), direct.ranked[0].plan.pp);
  EXPECT_EQ(j.at("plan").at("schedule"), direct.ranked[0].plan.schedule);
  EXPECT_DOUBLE_EQ(trials[0].tokens_per_s, direct.ranked[0].score.tokens_per_s);
}

TEST(TuneController, CancelEndsALongSearchAndStoresNothing) {
  test::test_core_app();
  TempDir dir;
  TuneController c;
  c.set_workspace(dir.qfile("ws.db"));
  TuneRequest r;  // a big search: tens of thousands of plans
  r.model_preset = "llama3-405b";
  r.hardware_preset = "h100-sxm";
  r.gpus = 1024;
  r.global_batch = 2048;
  r.keep = 0;  // exhaustive
  QObject::connect(&c, &TuneController::progress, [&](qint64 done, qint64) {
    if (done > 0) c.cancel();
  });
  const Finished f = run_search(c, r);
  EXPECT_TRUE(f.cancelled) << f.message.toStdString();
  EXPECT_EQ(c.search_id(), -1);
  EXPECT_FALSE(c.running());
  EXPECT_NE(f.message.indexOf("nothing stored"), -1) << f.message.toStdString();
  EXPECT_FALSE(fs::exists(dir.path / "ws.db")) << "a cancelled search writes nothing";
}

TEST(TuneController, BadRequestsAreRefusedWithTheRule) {
  test::test_core_app();
  TuneController c;
  TuneRequest r = small_request();
  r.gpus = 0;
  EXPECT_FALSE(c.start(r));
  EXPECT_EQ(c.error_message(), "gpus must be positive (got 0)");
  r = small_request();
  r.model_preset = "no-such-model";
  EXPECT_FALSE(c.start(r));
  EXPECT_NE(c.error_message().indexOf("llama3-8b"), -1)
      << "lists the valid names: " << c.error_message().toStdString();
  r = small_request();
  r.schedules = {"2f2b"};
  EXPECT_FALSE(c.start(r));
  EXPECT_NE(c.error_message().indexOf("2f2b"), -1) << c.error_message().toStdString();
  r = small_request();
  r.keep = -1;
  EXPECT_FALSE(c.start(r));
  EXPECT_EQ(c.error_message(), "keep must be >= 0 (got -1)");
  r = small_request();
  r.failures.rate_per_device_hour = -1.0;
  EXPECT_FALSE(c.start(r));
  EXPECT_EQ(c.error_message(), "the failure rate must be a finite number >= 0");
  r = small_request();
  r.moe_imbalance = 0.5;
  EXPECT_FALSE(c.start(r));
  EXPECT_NE(c.error_message().indexOf("the MoE imbalance must be a finite number >= 1"), -1)
      << c.error_message().toStdString();
  r = small_request();
  r.embedding_rows = 0.0;
  EXPECT_FALSE(c.start(r));
  EXPECT_NE(c.error_message().indexOf("the embedding rows must be a finite number above 0"), -1)
      << c.error_message().toStdString();
  EXPECT_FALSE(c.running());
}

// A routing imbalance ranks as `pipetune tune --moe-imbalance` does: each plan's prediction with
// the busiest expert-parallel rank's work grown by the factor.
TEST(TuneController, PricesAnMoeRoutingImbalance) {
  test::test_core_app();
  TempDir dir;
  TuneController c;
  c.set_workspace(dir.qfile("ws.db"));
  TuneRequest request = small_request();
  request.model_preset = "mixtral-8x7b";
  request.gpus = 16;
  request.schedules = {"1f1b"};
  request.moe_imbalance = 1.5;
  const Finished f = run_search(c, request);
  ASSERT_FALSE(f.cancelled) << f.message.toStdString();
  const TuneTarget t = resolve_tune_target(request);
  const tuner::ScoredPlan& best = c.results()->plan_at(0);
  tuner::EvaluateOptions skewed;
  skewed.execution = tuner::default_execution(t.cluster.hardware);
  skewed.execution->moe_imbalance.any_ep = 1.5;
  EXPECT_DOUBLE_EQ(best.score.iteration_time,
                   tuner::evaluate_plan(t.model, t.cluster, best.plan, skewed).iteration_time);
  if (best.plan.ep > 1) {
    EXPECT_GT(best.score.iteration_time,
              tuner::evaluate_plan(t.model, t.cluster, best.plan).iteration_time);
  }
}

// Measured embedding rows rank as `pipetune tune --embedding-rows` does: a sparse plan's
// prediction with its exchanged rows at the factor, cheaper than at the uniform estimate.
TEST(TuneController, PricesTheSparseEmbeddingRowsAtAFactor) {
  test::test_core_app();
  TempDir dir;
  TuneController c;
  c.set_workspace(dir.qfile("ws.db"));
  TuneRequest request = small_request();
  request.model_preset = "vp-4b-256k";  // its DP reduction across two nodes is not hidden
  request.gpus = 16;
  request.global_batch = 16;
  request.schedules = {"1f1b"};
  request.embedding_rows = 0.25;
  const Finished f = run_search(c, request);
  ASSERT_FALSE(f.cancelled) << f.message.toStdString();
  const TuneTarget t = resolve_tune_target(request);
  tuner::EvaluateOptions measured;
  measured.execution = tuner::default_execution(t.cluster.hardware);
  measured.execution->embedding_rows_factor = 0.25;
  int sparse = 0;
  for (int i = 0; i < c.results()->rowCount(); ++i) {
    const tuner::ScoredPlan& s = c.results()->plan_at(i);
    EXPECT_DOUBLE_EQ(s.score.iteration_time,
                     tuner::evaluate_plan(t.model, t.cluster, s.plan, measured).iteration_time)
        << tuner::plan_summary(s.plan, s.vocab_label);
    if (!s.plan.sparse_embedding_gradient) continue;
    ++sparse;
    EXPECT_LE(s.score.iteration_time,
              tuner::evaluate_plan(t.model, t.cluster, s.plan).iteration_time);
  }
  EXPECT_GT(sparse, 0);
}

// Under a failure rate the GUI ranks as `pipetune tune --failure-rate` does: by the expected
// figures, the same search called directly with the same options.
TEST(TuneController, RanksByExpectedThroughputUnderAFailureRate) {
  test::test_core_app();
  TempDir dir;
  TuneController c;
  c.set_workspace(dir.qfile("ws.db"));
  TuneRequest request = small_request();
  request.schedules = {"1f1b"};
  request.failures = {0.5, 600.0, false};
  const Finished f = run_search(c, request);
  ASSERT_FALSE(f.cancelled) << f.message.toStdString();
  const TuneTarget t = resolve_tune_target(request);
  const tuner::SearchResult direct = direct_search(request);
  const tuner::ScoredPlan& best = c.results()->plan_at(0);
  EXPECT_DOUBLE_EQ(best.score.tokens_per_s, direct.ranked[0].score.tokens_per_s);
  // Expected: longer than the failure-free prediction of the same plan.
  const tuner::PlanEvaluation plain = tuner::evaluate_plan(t.model, t.cluster, best.plan);
  EXPECT_DOUBLE_EQ(
      best.score.iteration_time,
      tuner::expected_iteration_time(plain.iteration_time, 8, best.plan.dp, request.failures));
  EXPECT_GT(best.score.iteration_time, plain.iteration_time);
}

// Searches `request` with a box checked and unchecked (`turn` sets it) and gives, for each, the
// result rows whose plan has what the box turns on, and the best plan's.
struct OnAndOff {
  int with = 0, without = 0;
  bool best_with = false;
};
OnAndOff search_on_and_off(TuneRequest request, const std::function<void(TuneRequest&, bool)>& turn,
                           const std::function<bool(const spec::ParallelPlan&)>& has) {
  TempDir dir;
  OnAndOff out;
  for (const bool on : {true, false}) {
    TuneController c;
    c.set_workspace(dir.qfile(on ? "with.db" : "without.db"));
    turn(request, on);
    const Finished f = run_search(c, request);
    EXPECT_FALSE(f.cancelled) << f.message.toStdString();
    int n = 0;
    for (int i = 0; i < c.results()->rowCount(); ++i) n += has(c.results()->plan_at(i).plan);
    (on ? out.with : out.without) = n;
    if (on && c.results()->rowCount() > 0) out.best_with = has(c.results()->plan_at(0).plan);
  }
  return out;
}

// Unchecking "A2A chunks" searches as `pipetune tune --no-moe-chunks`: no plan chunks its
// all-to-all; checked (the default), the best of Mixtral on 16 GPUs does.
TEST(TuneController, TheAllToAllChunksAreSearchedUnlessTurnedOff) {
  test::test_core_app();
  TuneRequest request = small_request();
  request.model_preset = "mixtral-8x7b";
  request.gpus = 16;
  request.schedules = {"1f1b"};
  const OnAndOff n = search_on_and_off(
      request, [](TuneRequest& r, bool on) { r.moe_chunks = on; },
      [](const spec::ParallelPlan& p) { return p.moe_chunks > 1; });
  EXPECT_TRUE(n.best_with);
  EXPECT_EQ(n.without, 0);
}

// Unchecking "2DH all-to-all" searches as `pipetune tune --no-two-phase-a2a`: no plan runs its
// all-to-all in two phases. Checked (the default), tiny-moe on 4 nodes of 2 GPUs ranks some that
// do.
TEST(TuneController, TheTwoPhaseAllToAllIsSearchedUnlessTurnedOff) {
  test::test_core_app();
  TuneRequest request = small_request();
  request.model_preset = "tiny-moe";
  request.gpus = 8;
  request.nodes_of = 2;
  request.schedules = {"1f1b"};
  const OnAndOff n = search_on_and_off(
      request, [](TuneRequest& r, bool on) { r.two_phase_all_to_all = on; },
      [](const spec::ParallelPlan& p) { return p.moe_a2a_node_ranks > 0; });
  EXPECT_GT(n.with, 0);
  EXPECT_EQ(n.without, 0);
}

// Unchecking "Sparse embedding" searches as `pipetune tune --no-sparse-embedding`: no plan
// exchanges the embedding gradient's rows. Checked (the default), the 256k-vocabulary model on
// two nodes of 8 GPUs ranks some that do.
TEST(TuneController, TheSparseEmbeddingGradientIsSearchedUnlessTurnedOff) {
  test::test_core_app();
  TuneRequest request = small_request();
  request.model_preset = "vp-4b-256k";
  request.gpus = 16;
  request.global_batch = 16;
  request.schedules = {"1f1b"};
  const OnAndOff n = search_on_and_off(
      request, [](TuneRequest& r, bool on) { r.sparse_embedding = on; },
      [](const spec::ParallelPlan& p) { return p.sparse_embedding_gradient; });
  EXPECT_GT(n.with, 0);
  EXPECT_EQ(n.without, 0);
}

// "Why the best?": the best plan against a row's, by the same evaluation the search ranked them
// with: the margin is the difference of the two rows' predicted iteration times.
TEST(TuneController, ExplainsTheBestAgainstTheSelectedPlan) {
  test::test_core_app();
  TempDir dir;
  TuneController c;
  c.set_workspace(dir.qfile("ws.db"));
  ASSERT_FALSE(run_search(c, small_request()).cancelled);
  ASSERT_GT(c.results()->rowCount(), 2);
  c.results()->sort(ResultsTableModel::PeakMemory, Qt::AscendingOrder);
  const std::vector<tuner::ScoredPlan>& ranked = c.results()->results();
  for (int row : {0, 1, 2}) {
    const int index = c.results()->result_index(row);
    const tuner::ScoredPlan& other = ranked[index == 0 ? 1 : static_cast<std::size_t>(index)];
    const std::optional<tuner::PlanExplanation> e = c.explain(row);
    ASSERT_TRUE(e) << "row " << row;
    const double scale = ranked.front().score.iteration_time;
    EXPECT_NEAR(e->first.iteration_time, ranked.front().score.iteration_time, 1e-9 * scale);
    EXPECT_NEAR(e->second.iteration_time, other.score.iteration_time, 1e-9 * scale);
    EXPECT_GE(e->margin(), -1e-9 * scale) << "the best plan is the faster";
    const QString text = c.explanation_text(row);
    EXPECT_NE(text.indexOf(plan_label(other.plan, other.vocab_label)), -1) << text.toStdString();
    EXPECT_NE(text.indexOf("binds"), -1) << text.toStdString();
  }
  EXPECT_FALSE(c.explain(c.results()->rowCount()));
}

TEST(TuneController, PreviewExportAndSmallScale) {
  test::test_core_app();
  TempDir dir;
  TuneController c;
  c.set_workspace(dir.qfile("ws.db"));
  ASSERT_FALSE(run_search(c, small_request()).cancelled);
  ASSERT_GT(c.results()->rowCount(), 0);
  c.results()->sort(ResultsTableModel::PeakMemory, Qt::AscendingOrder);
  const tuner::ScoredPlan chosen = c.results()->plan_at(0);

  // The simulated timeline: one compute lane per stage, each running every micro-batch's
  // forward once per chunk.
  std::shared_ptr<const profiler::Trace> trace;
  QString title;
  QObject::connect(&c, &TuneController::preview_ready,
                   [&](int, std::shared_ptr<const profiler::Trace> t, QString s) {
                     trace = std::move(t);
                     title = s;
                   });
  QString preview_error;
  QObject::connect(&c, &TuneController::preview_failed, [&](int, QString m) { preview_error = m; });
  ASSERT_TRUE(c.preview(0));
  ASSERT_TRUE(test::process_events_until([&] { return trace || !preview_error.isEmpty(); }));
  ASSERT_TRUE(trace) << preview_error.toStdString();
  spec::ParallelPlan plan = chosen.plan;
  spec::apply_defaults(plan);
  std::vector<int> forwards(static_cast<std::size_t>(plan.pp), 0);
  int compute_lanes = 0;
  for (const auto& lane : trace->lanes)
    if (lane.stream == profiler::Stream::Compute) ++compute_lanes;
  EXPECT_EQ(compute_lanes, plan.pp);
  for (const auto& s : trace->spans)
    if (s.kind == profiler::SpanKind::F)
      ++forwards.at(static_cast<std::size_t>(trace->lanes[s.lane].rank));
  for (int st = 0; st < plan.pp; ++st)
    EXPECT_EQ(forwards[static_cast<std::size_t>(st)], plan.microbatches * plan.chunks)
        << "stage " << st;
  EXPECT_NE(title.indexOf(plan_label(chosen.plan, chosen.vocab_label)), -1);

  // Run at small scale: the same pipeline on the engine, which accepts it.
  const RunRequest small = c.small_scale_request(0, 2);
  EXPECT_EQ(small.plan.pp, plan.pp);
  EXPECT_EQ(small.plan.microbatches, plan.microbatches);
  EXPECT_EQ(small.plan.schedule, plan.schedule);
  runtime::TrainOptions o;
  o.model = small.model;
  o.plan = small.plan;
  o.steps = small.steps;
  EXPECT_NO_THROW(runtime::check_train_options(o));

  // Export: the pipetune run file is that small-scale run (tuner/export/pipetune_export.cpp) and
  // reads back as it; files are never overwritten unasked.
  const QString path = dir.qfile("plan.toml");
  EXPECT_EQ(write_export(tuner::ExportFormat::Pipetune, c.export_request(0), path, false),
            ExportWrite::Written);
  const spec::RunSpec run = spec::load_run(path.toStdString());
  EXPECT_EQ(run.plan.tp, small.plan.tp);
  EXPECT_EQ(run.plan.pp, small.plan.pp);
  EXPECT_EQ(run.plan.dp, small.plan.dp);
  EXPECT_EQ(run.plan.microbatches, small.plan.microbatches);
  EXPECT_EQ(run.plan.schedule, small.plan.schedule);
  EXPECT_EQ(run.model.layers, small.model.layers);
  QFile f(path);
  ASSERT_TRUE(f.open(QIODevice::ReadOnly));
  const QByteArray before = f.readAll();
  f.close();
  EXPECT_EQ(write_export(tuner::ExportFormat::Megatron, c.export_request(0), path, false),
            ExportWrite::ExistsNotOverwritten);
  ASSERT_TRUE(f.open(QIODevice::ReadOnly));
  EXPECT_EQ(f.readAll(), before) << "the existing file is untouched";
  f.close();
  const QString script = dir.qfile("train.sh");
  EXPECT_EQ(write_export(tuner::ExportFormat::Megatron, c.export_request(0), script, false),
            ExportWrite::Written);
  EXPECT_TRUE(QFileInfo(script).isExecutable());
  EXPECT_EQ(write_export(tuner::ExportFormat::Megatron, c.export_request(0), path, true),
            ExportWrite::Written);
  ASSERT_TRUE(f.open(QIODevice::ReadOnly));
  EXPECT_NE(f.readAll(), before) << "overwritten once confirmed";
}

}  // namespace
}  // namespace pipetune::gui
