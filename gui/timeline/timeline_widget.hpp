// TimelineWidget: the pipeline timeline of one run, or of two compared. Dear ImGui drawn inside a
// QOpenGLWidget; every layout decision (time->pixel, rectangles, folding, hatches, memory
// lines, hit testing, range statistics) lives in the pure model gui/core/timeline_*; this
// widget only feeds input to that model and turns its draw commands into ImGui draw calls.
#pragma once

#include <QOpenGLWidget>
#include <QString>
#include <cstdint>
#include <memory>

#include "profiler/trace.hpp"

namespace pipetune::gui {

class TimelineView;  // gui/timeline/timeline_widget.cpp: ImGui context, model, worker state

class TimelineWidget : public QOpenGLWidget {
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

 signals:
  void span_selected(QString details);      // click on a block
  void range_selected(QString statistics);  // modifier-drag range: time by kind, bubble, memory
  void error_message(QString message);      // e.g. a run still being written, unreadable file

 protected:
  void initializeGL() override;
  void resizeGL(int w, int h) override;
  void paintGL() override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;
  void keyReleaseEvent(QKeyEvent* event) override;
  void leaveEvent(QEvent* event) override;

 private:
  // paintGL's parts, in the order it calls them.
  void clear_viewport(qreal dpr);
  double feed_imgui_display(qreal dpr);
  void refresh_live_analysis(double now);
  void lay_out_view(bool panel);
  void request_stored_window();
  void draw_hover_tooltip();
  void draw_side_panel();

  std::unique_ptr<TimelineView> view_;
};

}  // namespace pipetune::gui
