// One timeline screen of a stored 10-million-span run, as the widget makes it: the folded
// windows of its 16 lanes read from the workspace (read_stored_window), the frame laid out
// (build_frame) and turned into an ImGui draw list (draw_frame), with the lanes' rectangles
// drawn into an image on the CPU first when lanes_on_cpu is 1 (rasterize_lanes, as the widget
// does under software OpenGL). Whole run and a pan across a tenth of it, at 1600 x 900 px. ImGui
// runs headless (a font atlas, no renderer): what OpenGL does with the draw list and the image is
// timeline_frame_bench's (the widget under Xvfb).
//
//   build/tests/gui_bench --benchmark_filter=BM_TimelineScreen
#include <benchmark/benchmark.h>
#include <imgui.h>

#include <memory>
#include <string>

#include "../synthetic_run.hpp"
#include "db/store/run_writer.hpp"
#include "db/store/workspace.hpp"
#include "gui/core/timeline_layout.hpp"
#include "gui/core/timeline_raster.hpp"
#include "gui/core/timeline_stored_source.hpp"
#include "gui/timeline/timeline_imgui_draw.hpp"

namespace {

using namespace pipetune;

bench::StoredSyntheticRun& big_run() {
  static bench::StoredSyntheticRun r("screen_bench", 10'000'000, 11);
  return r;
}

// A headless ImGui context: the default font built into an atlas, a 1600 x 900 display.
struct HeadlessImGui {
  ImGuiContext* context = nullptr;
  HeadlessImGui() {
    context = ImGui::CreateContext();
    ImGuiIO& io = ImGui::GetIO();
    io.IniFilename = nullptr;
    io.LogFilename = nullptr;
    io.DisplaySize = ImVec2(1600, 900);
    io.DeltaTime = 1.0f / 60.0f;
    // As the widget's OpenGL 3 renderer says: draw lists past 64K vertices are split by offset.
    io.BackendFlags |= ImGuiBackendFlags_RendererHasVtxOffset;
    unsigned char* pixels = nullptr;
    int w = 0, h = 0;
    io.Fonts->GetTexDataAsRGBA32(&pixels, &w, &h);
  }
  ~HeadlessImGui() { ImGui::DestroyContext(context); }
};

// range(0): the window as a fraction 1/N of the run; successive iterations pan across the run
// by half a window, so each reads a window it has not read before. range(1): lanes on the CPU.
void BM_TimelineScreen(benchmark::State& state) {
  const bool lanes_on_cpu = state.range(1) != 0;
  gui::FrameImage image;
  bench::StoredSyntheticRun& big = big_run();
  HeadlessImGui imgui;
  db::Workspace ws(big.path);
  auto meta =
      std::make_shared<const gui::StoredRunMeta>(gui::read_stored_run(ws, big.path, big.run));
  gui::StoredTimelineSource source(meta, "big");
  const std::vector<const gui::TimelineSource*> runs{&source};
  gui::TimelineGeometry geometry;
  geometry.width_px = 1600;
  geometry.height_px = 900;
  geometry.header_px = 220.0f;
  const std::int64_t run_ns = meta->end_ns - meta->start_ns;
  const std::int64_t width_ns = run_ns / state.range(0);
  std::int64_t t0 = meta->start_ns;
  std::size_t commands = 0, folded = 0, vertices = 0;
  for (auto _ : state) {
    gui::TimeView view;
    view.set_area(gui::lanes_left(geometry), gui::lanes_right(geometry));
    view.fit(static_cast<double>(t0), static_cast<double>(t0 + width_ns));
    const std::int64_t w0 = static_cast<std::int64_t>(view.t0());
    const std::int64_t w1 = static_cast<std::int64_t>(view.t1());
    source.set_window(std::make_shared<const gui::StoredWindow>(
        gui::read_stored_window(ws, *meta, w0, w1, view.width_px())));
    ImGui::NewFrame();
    const gui::TimelineFrame frame = gui::build_frame(runs, view, geometry);
    if (lanes_on_cpu)
      gui::rasterize_lanes(frame, geometry, geometry.width_px, geometry.height_px, 1.0f,
                           gui::palette::kBackground, image);
    gui::draw_frame(*ImGui::GetBackgroundDrawList(), frame, geometry, lanes_on_cpu);
    ImGui::Render();
    commands += frame.commands.size();
    folded += frame.folded_spans;
    vertices += static_cast<std::size_t>(ImGui::GetDrawData()->TotalVtxCount);
    t0 += width_ns / 2;
    if (t0 + width_ns > meta->end_ns) t0 = meta->start_ns;
  }
  state.counters["draw_commands"] = static_cast<double>(commands) / state.iterations();
  state.counters["vertices"] = static_cast<double>(vertices) / state.iterations();
  state.counters["folded_spans"] = static_cast<double>(folded) / state.iterations();
}
BENCHMARK(BM_TimelineScreen)
    ->ArgNames({"fraction_1_over", "lanes_on_cpu"})
    ->ArgsProduct({{1, 10}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

}  // namespace
