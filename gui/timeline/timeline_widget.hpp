// TimelineWidget: the pipeline timeline of one run, or of two compared. Dear ImGui drawn on a
// QOpenGLWindow in a window container: a QOpenGLWidget renders into a framebuffer object that Qt
// then composes into its window with every other widget, which under software OpenGL cost more
// than the timeline's drawing (tests/bench/gui/frame/gl_surface_bench.cpp). Every layout decision
// (time->pixel, rectangles, folding, hatches, memory lines, hit testing, range statistics) lives in
// the pure model gui/core/timeline_*; this widget only feeds input to that model and turns its draw
// commands into ImGui draw calls.
#pragma once

#include <QImage>
#include <QString>
#include <QWidget>
#include <cstdint>
#include <memory>

class QOpenGLContext;

#include "gui/timeline/lanes_image.hpp"  // TimelineRaster
#include "profiler/trace.hpp"

namespace pipetune::gui {

class TimelineView;  // gui/timeline/timeline_widget.cpp: ImGui context, model, worker state

class TimelineWidget : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineWidget(QWidget* parent = nullptr);
  ~TimelineWidget() override;

  // A whole Trace in memory (simulated runs, tuner previews).
  void set_trace(std::shared_ptr<const profiler::Trace> trace, const QString& title);
  // Live runs: records arriving (appended to the shown trace; the view follows the right edge
  // unless the user has moved it).
  void append(const profiler::Trace& part);
  // A stored run, read through the workspace's windowed reader (LaneWindowReader::fold) on a
  // worker thread: big runs never load whole and never block the GUI thread.
  void open_run(const QString& db_path, std::int64_t run_id);
  // A second run stacked below with an aligned time axis, and the per-stage diff
  // (profiler analysis trace_diff) available through comparison_text(). Null clears it.
  // `pipelines`: both runs' ranks are pipeline stages (else the text says idle, not bubble).
  void set_comparison(std::shared_ptr<const profiler::Trace> other, const QString& title,
                      bool pipelines = true);
  void clear();
  QString comparison_text() const;

  // Takes effect at the next frame.
  void set_raster(TimelineRaster mode);
  // Whether the frames drawn now draw the lanes on the CPU (false before the first frame).
  bool lanes_on_cpu() const;

  // A frame drawn now and read back (empty while the surface has never been shown): what
  // QOpenGLWidget::grabFramebuffer gave. Waits up to 5 s for a shown widget's surface to appear.
  QImage grabFramebuffer();
  // The surface's OpenGL context, current on this thread between makeCurrent and doneCurrent
  // (null before the surface first appeared).
  QOpenGLContext* context() const;
  void makeCurrent();
  void doneCurrent();

 signals:
  void frameSwapped();                      // a frame reached the window
  void span_selected(QString details);      // click on a block
  void range_selected(QString statistics);  // modifier-drag range: time by kind, bubble, memory
  void error_message(QString message);      // e.g. a run still being written, unreadable file

 protected:
  // Input arrives here whether sent to the widget or to its surface (which forwards it).
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;
  void keyReleaseEvent(QKeyEvent* event) override;
  void leaveEvent(QEvent* event) override;

 private:
  class Surface;  // the QOpenGLWindow (timeline_widget.cpp)
  void initializeGL();
  void paintGL();
  // A new frame: the surface repaints (QWidget::update would repaint only the widget).
  void request_frame();
  // paintGL's parts, in the order it calls them.
  void clear_viewport(qreal dpr, bool clear);
  double feed_imgui_display(qreal dpr);
  void refresh_live_analysis(double now);
  void lay_out_view(bool panel);
  void request_stored_window();
  void draw_hover_tooltip();
  void draw_side_panel();

  std::unique_ptr<TimelineView> view_;
  Surface* surface_ = nullptr;  // owned by its container, a child widget
};

}  // namespace pipetune::gui
