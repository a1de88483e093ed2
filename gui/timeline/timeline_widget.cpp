#include "gui/timeline/timeline_widget.hpp"

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QOpenGLContext>
#include <QOpenGLFunctions>
#include <QOpenGLWindow>
#include <QSurfaceFormat>
#include <QTimer>
#include <QVBoxLayout>
#include <QWheelEvent>
#include <algorithm>
#include <chrono>
#include <cmath>

#include "gui/core/timeline_layout.hpp"
#include "gui/core/timeline_loader.hpp"
#include "gui/core/timeline_stored_source.hpp"
#include "gui/core/timeline_text.hpp"
#include "gui/core/timeline_trace_source.hpp"
#include "gui/timeline/timeline_imgui_draw.hpp"
#include "gui/timeline/timeline_view.hpp"
#include "imgui.h"
#include "imgui_impl_opengl3.h"
#include "profiler/analysis/trace_diff.hpp"

namespace pipetune::gui {

namespace {
// In-memory traces above this many spans are indexed and analysed on the worker.
constexpr std::size_t kPrepareOnWorkerSpans = 200'000;
}  // namespace

namespace {
void update_comparison(TimelineWidget& w, TimelineView& v);
}  // namespace

// The OpenGL window the timeline draws on: its GL calls and its input go to the widget, until
// the widget, going away first (its container deletes the window after it), detaches it.
class TimelineWidget::Surface : public QOpenGLWindow {
 public:
  explicit Surface(TimelineWidget& owner) : owner_(&owner) {}
  void detach() { owner_ = nullptr; }

 protected:
  void initializeGL() override { forward(&TimelineWidget::initializeGL); }
  void paintGL() override { forward(&TimelineWidget::paintGL); }
  void mousePressEvent(QMouseEvent* e) override { forward(&TimelineWidget::mousePressEvent, e); }
  void mouseMoveEvent(QMouseEvent* e) override { forward(&TimelineWidget::mouseMoveEvent, e); }
  void mouseReleaseEvent(QMouseEvent* e) override {
    forward(&TimelineWidget::mouseReleaseEvent, e);
  }
  void wheelEvent(QWheelEvent* e) override { forward(&TimelineWidget::wheelEvent, e); }
  void keyPressEvent(QKeyEvent* e) override { forward(&TimelineWidget::keyPressEvent, e); }
  void keyReleaseEvent(QKeyEvent* e) override { forward(&TimelineWidget::keyReleaseEvent, e); }
  bool event(QEvent* e) override {
    if (e->type() == QEvent::Leave) forward(&TimelineWidget::leaveEvent, e);
    if (e->type() == QEvent::UpdateRequest && owner_ != nullptr)
      owner_->view_->frame_posted = false;
    return QOpenGLWindow::event(e);
  }

 private:
  template <class... Args>
  void forward(void (TimelineWidget::*handler)(Args...), Args... args) {
    if (owner_ != nullptr) (owner_->*handler)(args...);
  }

  TimelineWidget* owner_;
};

TimelineWidget::TimelineWidget(QWidget* parent)
    : QWidget(parent), view_(std::make_unique<TimelineView>()) {
  surface_ = new Surface(*this);
  QSurfaceFormat f = surface_->format();
  f.setVersion(3, 3);
  f.setProfile(QSurfaceFormat::CoreProfile);
  surface_->setFormat(f);
  QWidget* container = QWidget::createWindowContainer(surface_, this);
  container->setFocusPolicy(Qt::StrongFocus);
  container->setMouseTracking(true);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(container);
  setFocusProxy(container);
  setMouseTracking(true);
  setFocusPolicy(Qt::StrongFocus);
  setMinimumSize(400, 200);
  connect(surface_, &QOpenGLWindow::frameSwapped, this, &TimelineWidget::frameSwapped);
  view_->clock.start();
  TimelineView* v = view_.get();
  TimelineLoader::Callbacks cb;
  cb.opened = [this, v](std::uint64_t g, std::shared_ptr<const StoredRunMeta> meta) {
    if (g != v->generation) return;
    const db::RunRecord& r = meta->record;
    const QString title =
        QString("run %1: %2 (%3, %4)")
            .arg(r.id)
            .arg(QString::fromStdString(r.name))
            .arg(QString::fromStdString(std::string(db::trace_kind_name(r.kind))))
            .arg(QString::fromStdString(std::string(db::run_status_name(r.status))));
    v->stored = std::make_unique<StoredTimelineSource>(std::move(meta), title.toStdString());
    v->requested.reset();
    v->fit_pending = true;
    v->status.clear();
    if (r.status == db::RunStatus::Running) {
      v->status = QString(
                      "run %1 in %2 is still being written (status running): showing the %3 "
                      "spans stored so far; press R to re-read")
                      .arg(r.id)
                      .arg(v->db_path)
                      .arg(r.span_count);
      emit error_message(v->status);
    }
    request_frame();
  };
  cb.window = [this, v](std::uint64_t g, std::shared_ptr<const StoredWindow> w) {
    if (g != v->generation || !v->stored) return;
    v->stored->set_window(std::move(w));
    request_frame();
  };
  cb.bubble_ratios = [this, v](std::uint64_t g, std::map<std::int32_t, double> ratios) {
    if (g != v->generation || !v->stored) return;
    v->stored->set_bubble_ratios(std::move(ratios));
    request_frame();
  };
  cb.range_statistics = [this, v](std::uint64_t g, QString text) {
    if (g != v->generation) return;
    v->range_text = text;
    emit range_selected(text);
    request_frame();
  };
  cb.prepared = [this, v](std::uint64_t g, std::shared_ptr<TraceTimelineSource> source) {
    if (g != v->generation) return;
    v->trace = std::move(source);
    v->preparing = false;
    v->status.clear();
    try {
      for (const profiler::Trace& part : v->pending_parts) v->trace->append(part);
    } catch (const std::exception& e) {
      emit error_message(QString("live run: ") + e.what());
    }
    v->pending_parts.clear();
    v->fit_pending = true;
    v->last_analysis_s = v->clock.elapsed() / 1e3;
    update_comparison(*this, *v);
    request_frame();
  };
  cb.failed = [this, v](std::uint64_t g, QString message) {
    if (g != v->generation) return;
    v->preparing = false;
    v->pending_parts.clear();
    v->status = message;
    emit error_message(message);
    request_frame();
  };
  view_->loader = std::make_unique<TimelineLoader>(std::move(cb));
}

TimelineWidget::~TimelineWidget() {
  view_->loader.reset();  // joins the worker before the state its answers touch goes away
  if (view_->imgui != nullptr) {
    surface_->makeCurrent();
    ImGui::SetCurrentContext(view_->imgui);
    if (view_->gl_ready) ImGui_ImplOpenGL3_Shutdown();
    view_->lanes.release();
    ImGui::DestroyContext(view_->imgui);
    surface_->doneCurrent();
  }
  surface_->detach();  // the window outlives the view: nothing may reach it from there
}

void TimelineWidget::request_frame() {
  surface_->update();
  // Qt paints an update 5 ms later, to gather more events first (QPlatformWindow::requestUpdate);
  // the timeline answers input at once: the paint is posted now, and Qt's later one finds nothing
  // left to repaint. One at a time: events that arrive meanwhile are drawn by it.
  if (!view_->frame_posted && surface_->isExposed()) {
    view_->frame_posted = true;
    QCoreApplication::postEvent(surface_, new QEvent(QEvent::UpdateRequest));
  }
}

QImage TimelineWidget::grabFramebuffer() {
  QElapsedTimer waited;
  waited.start();
  while (isVisible() && !surface_->isValid() && waited.elapsed() < 5000)
    QCoreApplication::processEvents(QEventLoop::AllEvents, 10);
  if (!surface_->isValid()) return {};
  // QOpenGLWindow::grabFramebuffer reads what is drawn: draw a frame first, as QOpenGLWidget's
  // did.
  surface_->makeCurrent();
  surface_->context()->functions()->glBindFramebuffer(GL_FRAMEBUFFER,
                                                      surface_->defaultFramebufferObject());
  paintGL();
  QImage image = surface_->grabFramebuffer();
  surface_->doneCurrent();
  return image;
}

QOpenGLContext* TimelineWidget::context() const {
  return surface_->context();
}

void TimelineWidget::makeCurrent() {
  surface_->makeCurrent();
}

void TimelineWidget::doneCurrent() {
  surface_->doneCurrent();
}

namespace {

void reset_selection(TimelineView& v) {
  v.overlay = {};
  v.details.clear();
  v.range_text.clear();
  v.status.clear();
  v.fit_pending = true;
  v.view.set_following(true);
}

void update_comparison(TimelineWidget& w, TimelineView& v) {
  v.comparison.clear();
  if (!v.other) return;
  if (!v.trace) {
    v.comparison = "the per-stage diff needs the main run in memory (set_trace)";
    return;
  }
  try {
    v.comparison = QString::fromStdString(
        comparison_text(profiler::analysis::diff_traces(v.trace->trace(), v.other->trace()),
                        v.trace->title(), v.other->title(), v.comparison_of_pipelines));
  } catch (const std::exception& e) {
    v.comparison.clear();
    emit w.error_message(QString("comparison failed: ") + e.what());
  }
}

}  // namespace

void TimelineWidget::set_trace(std::shared_ptr<const profiler::Trace> trace, const QString& title) {
  TimelineView& v = *view_;
  ++v.generation;
  v.stored.reset();
  v.trace.reset();
  v.preparing = false;
  v.pending_parts.clear();
  reset_selection(v);
  if (trace && trace->spans.size() > kPrepareOnWorkerSpans) {
    // Indexing and analysing a big trace takes a second or more: done on the worker.
    v.status = QString("indexing %1 spans of %2 ...").arg(trace->spans.size()).arg(title);
    v.preparing = true;
    v.loader->prepare(v.generation, std::move(trace), title.toStdString());
  } else if (trace) {
    try {
      v.trace = std::make_unique<TraceTimelineSource>(std::move(trace), title.toStdString());
      v.last_analysis_s = v.clock.elapsed() / 1e3;
    } catch (const std::exception& e) {
      emit error_message(QString("cannot show %1: %2").arg(title, e.what()));
    }
  }
  update_comparison(*this, v);
  request_frame();
}

void TimelineWidget::append(const profiler::Trace& part) {
  TimelineView& v = *view_;
  if (v.preparing) {
    v.pending_parts.push_back(part);
    return;
  }
  try {
    if (!v.trace) {
      ++v.generation;
      v.stored.reset();
      reset_selection(v);
      v.trace = std::make_unique<TraceTimelineSource>(std::make_shared<const profiler::Trace>(),
                                                      "live run");
    }
    v.trace->append(part);
  } catch (const std::exception& e) {
    emit error_message(QString("live run: ") + e.what());
  }
  request_frame();
}

void TimelineWidget::open_run(const QString& db_path, std::int64_t run_id) {
  TimelineView& v = *view_;
  ++v.generation;
  v.preparing = false;
  v.pending_parts.clear();
  v.trace.reset();
  v.stored.reset();
  reset_selection(v);
  v.db_path = db_path;
  v.run_id = run_id;
  v.status = QString("reading run %1 of %2 ...").arg(run_id).arg(db_path);
  v.loader->open(v.generation, db_path, run_id);
  update_comparison(*this, v);
  request_frame();
}

void TimelineWidget::set_comparison(std::shared_ptr<const profiler::Trace> other,
                                    const QString& title, bool pipelines) {
  TimelineView& v = *view_;
  v.other.reset();
  v.comparison_of_pipelines = pipelines;
  if (other) {
    try {
      v.other = std::make_unique<TraceTimelineSource>(std::move(other), title.toStdString());
    } catch (const std::exception& e) {
      emit error_message(QString("cannot compare with %1: %2").arg(title, e.what()));
    }
  }
  update_comparison(*this, v);
  request_frame();
}

void TimelineWidget::clear() {
  TimelineView& v = *view_;
  ++v.generation;
  v.preparing = false;
  v.pending_parts.clear();
  v.trace.reset();
  v.stored.reset();
  v.other.reset();
  v.comparison.clear();
  reset_selection(v);
  request_frame();
}

QString TimelineWidget::comparison_text() const {
  return view_->comparison;
}

void TimelineWidget::initializeGL() {
  TimelineView& v = *view_;
  v.imgui = ImGui::CreateContext();
  ImGui::SetCurrentContext(v.imgui);
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;
  io.LogFilename = nullptr;
  ImGui::StyleColorsDark();
  v.gl_ready = ImGui_ImplOpenGL3_Init("#version 330 core");
  if (!v.gl_ready) emit error_message("timeline: OpenGL 3.3 initialisation failed");
}

void TimelineWidget::set_raster(TimelineRaster mode) {
  view_->lanes.set_mode(mode);
  request_frame();
}

bool TimelineWidget::lanes_on_cpu() const {
  return view_->lanes.on_cpu();
}

void TimelineWidget::paintGL() {
  TimelineView& v = *view_;
  const qreal dpr = devicePixelRatioF();
  if (!v.gl_ready || v.imgui == nullptr) {
    clear_viewport(dpr, true);
    return;
  }
  if (!v.lanes.resolved()) {
    const std::string error = v.lanes.resolve();
    if (!error.empty())
      emit error_message(QString("timeline: drawing the lanes as an image failed, drawing them "
                                 "as triangles: ") +
                         QString::fromStdString(error));
  }
  // The lanes' image covers the viewport: clearing under it would be a pass over it for nothing.
  clear_viewport(dpr, !v.lanes.on_cpu());
  ImGui::SetCurrentContext(v.imgui);
  const double now = feed_imgui_display(dpr);
  refresh_live_analysis(now);

  ImGuiIO& io = ImGui::GetIO();
  io.MouseDown[0] = v.panel_button;
  io.MouseWheel = v.panel_wheel;
  v.panel_wheel = 0.0f;
  ImGui_ImplOpenGL3_NewFrame();
  ImGui::NewFrame();

  const bool panel = !v.details.isEmpty() || !v.range_text.isEmpty() || !v.status.isEmpty() ||
                     !v.comparison.isEmpty();
  lay_out_view(panel);
  const TimelineSource* main = v.main();

  // Lanes, spans, axis and overlays: the layout model's frame, drawn behind ImGui's windows.
  TimelineGeometry& g = v.geometry;
  v.frame = build_frame(v.runs(), v.view, g, v.overlay);
  v.view.clamp_y(v.frame.content_height, static_cast<float>(height()) - g.axis_px);
  if (v.lanes.on_cpu())
    v.lanes.draw(v.frame, g, static_cast<int>(width() * dpr), static_cast<int>(height() * dpr),
                 static_cast<float>(dpr));
  draw_frame(*ImGui::GetBackgroundDrawList(), v.frame, g, v.lanes.on_cpu());

  request_stored_window();
  if (!v.pressed && main != nullptr) draw_hover_tooltip();
  if (panel) draw_side_panel();

  ImGui::Render();
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
}

void TimelineWidget::clear_viewport(qreal dpr, bool clear) {
  QOpenGLFunctions* gl = surface_->context()->functions();
  gl->glViewport(0, 0, static_cast<GLsizei>(width() * dpr), static_cast<GLsizei>(height() * dpr));
  if (!clear) return;
  const Rgba c = palette::kBackground;
  gl->glClearColor(c.r / 255.f, c.g / 255.f, c.b / 255.f, 1.f);
  gl->glClear(GL_COLOR_BUFFER_BIT);
}

// ImGui's display size, frame time and mouse position; returns the time now (s).
double TimelineWidget::feed_imgui_display(qreal dpr) {
  TimelineView& v = *view_;
  ImGuiIO& io = ImGui::GetIO();
  io.DisplaySize = ImVec2(static_cast<float>(width()), static_cast<float>(height()));
  io.DisplayFramebufferScale = ImVec2(static_cast<float>(dpr), static_cast<float>(dpr));
  const double now = v.clock.elapsed() / 1e3;
  io.DeltaTime = static_cast<float>(std::max(1e-3, now - v.last_frame_s));
  v.last_frame_s = now;
  io.MousePos = v.mouse.x() >= 0
                    ? ImVec2(static_cast<float>(v.mouse.x()), static_cast<float>(v.mouse.y()))
                    : ImVec2(-FLT_MAX, -FLT_MAX);
  return now;
}

// A live run's analysis (bubble ratios, memory) is refreshed at most once a second.
void TimelineWidget::refresh_live_analysis(double now) {
  TimelineView& v = *view_;
  if (v.trace && v.trace->analysis_stale()) {
    if (now - v.last_analysis_s >= 1.0) {
      v.trace->refresh_analysis();
      v.last_analysis_s = now;
    } else if (!v.refresh_scheduled) {  // the last part of a run must not stay unanalysed
      v.refresh_scheduled = true;
      QTimer::singleShot(1000, this, [this] {
        view_->refresh_scheduled = false;
        request_frame();
      });
    }
  }
}

// The lanes' area (narrowed by the side panel) and the time range shown: fitted to a newly
// shown run once, then following a live run's end.
void TimelineWidget::lay_out_view(bool panel) {
  TimelineView& v = *view_;
  TimelineGeometry& g = v.geometry;
  g.width_px = width();
  g.height_px = height();
  g.side_panel_px = panel ? std::min(470.0f, 0.34f * static_cast<float>(width())) : 0.0f;
  g.char_px = ImGui::CalcTextSize("0").x;
  v.view.set_area(lanes_left(g), lanes_right(g));
  const TimelineSource* main = v.main();
  if (main != nullptr && main->end_ns() > main->start_ns()) {
    const double start = static_cast<double>(main->start_ns() - main->origin_ns());
    double end = static_cast<double>(main->end_ns() - main->origin_ns());
    if (v.other) end = std::max(end, static_cast<double>(v.other->end_ns() - v.other->origin_ns()));
    if (v.fit_pending) {
      v.view.fit(start, end);
      v.fit_pending = false;
    } else {
      v.view.follow_end(end);
    }
  }
}

// A stored run: ask the worker for the window this frame wanted, once.
void TimelineWidget::request_stored_window() {
  TimelineView& v = *view_;
  if (v.stored) {
    const auto want = v.stored->last_request();
    const bool asked = v.requested && v.requested->t0 == want.t0 && v.requested->t1 == want.t1 &&
                       v.requested->width_px == want.width_px;
    if (want.width_px > 0 && !asked && !v.stored->window_answers(want)) {
      v.loader->request_window(v.generation, want.t0, want.t1, want.width_px);
      v.requested = want;
    }
  }
}

// The span under the mouse, in a tooltip.
void TimelineWidget::draw_hover_tooltip() {
  TimelineView& v = *view_;
  if (const HitTarget* hit =
          hit_test(v.frame, static_cast<float>(v.mouse.x()), static_cast<float>(v.mouse.y()))) {
    const auto runs = v.runs();
    ImGui::BeginTooltip();
    ImGui::TextUnformatted(span_details(*runs[static_cast<std::size_t>(hit->run)], *hit).c_str());
    ImGui::EndTooltip();
  }
}

// Status, selection, range statistics and comparison, beside the lanes.
void TimelineWidget::draw_side_panel() {
  TimelineView& v = *view_;
  const TimelineGeometry& g = v.geometry;
  ImGui::SetNextWindowPos(ImVec2(lanes_right(g), g.axis_px));
  ImGui::SetNextWindowSize(ImVec2(g.side_panel_px, static_cast<float>(height()) - g.axis_px));
  ImGui::Begin("##timeline_panel", nullptr,
               ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoMove |
                   ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_HorizontalScrollbar);
  const auto section = [](const char* title, const QString& body, bool wrap) {
    if (body.isEmpty()) return;
    ImGui::TextColored(ImVec4(1.0f, 0.86f, 0.35f, 1.0f), "%s", title);
    const std::string text = body.toStdString();
    if (wrap)
      ImGui::TextWrapped("%s", text.c_str());
    else
      ImGui::TextUnformatted(text.c_str());  // tables: columns aligned, scroll sideways
    ImGui::Separator();
  };
  section("Status", v.status, true);
  section("Selection", v.details, false);
  section("Range (Shift/Ctrl-drag)", v.range_text, false);
  section("Comparison (per stage)", v.comparison, false);
  ImGui::End();
}

}  // namespace pipetune::gui
