// Trace analyses that work on any profiler::Trace (simulated, measured or imported): per-stage
// time breakdown, critical path, memory timeline, the diff of two runs and MoE routing
// statistics. Results are plain structs; formatting (tables, JSON, the GUI) belongs to the front
// ends.
#pragma once

#include "profiler/analysis/analysis_error.hpp"
#include "profiler/analysis/critical_path.hpp"
#include "profiler/analysis/expert_load.hpp"
#include "profiler/analysis/memory_timeline.hpp"
#include "profiler/analysis/op_pairing.hpp"
#include "profiler/analysis/span_roles.hpp"
#include "profiler/analysis/stage_breakdown.hpp"
#include "profiler/analysis/time_window.hpp"
#include "profiler/analysis/trace_diff.hpp"
