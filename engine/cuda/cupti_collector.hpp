// A per-process collector of GPU activity through the CUPTI Activity API (CUPTI 13): concurrent
// kernels (NCCL's included), copies, memsets, runtime and driver API calls (and, optionally,
// synchronisation records), delivered by CUPTI in buffers this collector hands it. At step end
// flush() makes CUPTI complete every buffer and take() returns what arrived since the last take
// as a profiler::GpuCapture (through cupti_records.hpp), ready for profiler::add_gpu_capture with
// clock_offset_ns(): CUPTI's timestamps plus that offset are the engine's clock (a RankRecorder's
// now_ns() for the same epoch).
//
//   CuptiCollector capture(recorder.epoch());
//   ... run a step ...
//   capture.flush();
//   profiler::add_gpu_capture(trace, rank, capture.take(), capture.clock_offset_ns());
//
// One per process. CUPTI's buffer callbacks are plain C function pointers with no user data,
// registered process-wide (cuptiActivityRegisterCallbacks), and the activity kinds are enabled
// process-wide too; so the callbacks reach the collector through exactly one registry object
// (cupti_collector.cpp) that holds the active collector under a mutex. A second collector while
// one is alive is refused (std::logic_error). CUPTI may complete buffers on its own thread: the
// collector's state is guarded.
//
// Dropped records (CUPTI had no buffer to put them in) are counted per completed buffer
// (cuptiActivityGetNumDroppedRecords) and reported by dropped_records(); a buffer CUPTI could not
// walk is counted in buffer_errors() with the first error's text (a callback cannot throw).
//
// Errors: a failing CUPTI call throws CudaError naming the call, cuptiGetResultString's text, file
// and line (PIPETUNE_CUPTI_CHECK). Without a usable device the constructor throws (CUPTI needs a
// driver): check cuda::query_devices() first.
#pragma once

#include <cupti.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cupti_library.hpp"
#include "engine/cuda/cupti_records.hpp"
#include "profiler/gpu/gpu_capture.hpp"

namespace pipetune::cuda {

namespace detail {
[[noreturn]] void throw_cupti_error(CUptiResult r, const char* call, const char* file, int line);
inline void check_cupti(CUptiResult r, const char* call, const char* file, int line) {
  if (r != CUPTI_SUCCESS) throw_cupti_error(r, call, file, line);
}
}  // namespace detail

// ---- pure parts (tested without a GPU) ----------------------------------------------------------

// One reading of both clocks: the engine's before and after CUPTI's.
struct ClockSample {
  std::int64_t engine_before_ns = 0;
  std::int64_t cupti_ns = 0;
  std::int64_t engine_after_ns = 0;
};

struct ClockOffset {
  std::int64_t offset_ns = 0;       // engine time = CUPTI time + offset_ns
  std::int64_t uncertainty_ns = 0;  // half the engine bracket of the sample used
};

// From the sample with the narrowest bracket (least disturbed by preemption): offset = midpoint
// of the engine readings - CUPTI's reading. Throws std::invalid_argument for no samples or a
// sample whose engine readings go backwards.
ClockOffset estimate_clock_offset(std::span<const ClockSample> samples);

struct BufferWalk {
  std::size_t records = 0;     // records in the buffer
  std::size_t kept = 0;        // of which the capture keeps (kernels, copies, memsets, API calls)
  std::size_t incomplete = 0;  // device records without their times (is_incomplete_device_record)
  CUptiResult error = CUPTI_SUCCESS;  // other than the end of the buffer; records before it count
};

// Every record of a completed CUPTI buffer (valid_bytes of it) into `capture`, walked with
// cuptiActivityGetNextRecord, names from `names` (the collector keeps one for its life), API
// calls as `kept` says.
BufferWalk append_cupti_buffer(std::uint8_t* buffer, std::size_t valid_bytes,
                               profiler::GpuCapture& capture, CuptiNameCache& names,
                               ApiCallsKept kept = ApiCallsKept::all);
// The same with a fresh name cache (tests).
BufferWalk append_cupti_buffer(std::uint8_t* buffer, std::size_t valid_bytes,
                               profiler::GpuCapture& capture);

// ---- the collector ------------------------------------------------------------------------------

// Which runtime and driver calls CUPTI records (the launch calls tie each kernel to the op that
// launched it): all (CUPTI_ACTIVITY_KIND_RUNTIME and _DRIVER); launches, only the calls that
// create device work (profiler::is_launch_call), which is all the router keeps: the kinds on and
// every other callback id switched off; none, device records only (what the overhead benchmark
// compares against).
enum class ApiRecords { all, launches, none };

// What a flush hands over: every buffer CUPTI holds, records of work still running included
// (they come without their times), or only the buffers whose records are all complete.
enum class FlushKind { forced, completed };

// CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED: where CUPTI keeps the timestamps of
// kernels, copies and memsets until a flush, in device memory (CUPTI 13's default) or in pinned
// host memory. Process-wide, and only for contexts created afterwards: call before the first CUDA
// call (the capture benchmark compares the two). Throws CudaError when CUPTI refuses.
void keep_cupti_timestamps_in_pinned_host_memory(bool pinned);
// CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE: the bytes of each such timestamp buffer (CUPTI 13's
// default 3,200,000, room for 100,000 records). The same rules as above.
void set_cupti_timestamp_buffer_bytes(std::size_t bytes);

struct CuptiCollectorOptions {
  std::size_t buffer_bytes = std::size_t{8} << 20;  // each buffer handed to CUPTI
  bool synchronization = false;  // also CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (kept out of captures)
  ApiRecords api_records = ApiRecords::all;
  int clock_samples = 16;  // readings for the clock offset
  // flush(): forced (every buffer, CUPTI's advice before reading a step's records), or only the
  // buffers whose records are all complete (what a flush after a synchronisation should find;
  // the overhead benchmark compares the two). flush(FlushKind) chooses per call.
  bool forced_flush = true;
  // Which API call records a take returns (CUPTI records them all with ApiRecords::all): the
  // engine's hub keeps the launching calls only, the rest being what its router drops.
  ApiCallsKept api_calls_kept = ApiCallsKept::all;
  // Hand CUPTI zeroed buffers (CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER): false leaves the
  // zeroing of each new buffer to CUPTI, on the thread whose launch needed it (the overhead
  // benchmark compares the two).
  bool zeroed_buffers = true;
};

class CuptiCollector {
 public:
  using Clock = std::chrono::steady_clock;  // RankRecorder::Clock

  // Registers the buffer callbacks (once per process), enables the activity kinds and measures
  // the clock offset against `epoch` (the recorder's). Throws std::logic_error when another
  // collector is alive, CudaError when CUPTI fails.
  explicit CuptiCollector(Clock::time_point epoch, CuptiCollectorOptions options = {});
  // Disables the kinds, flushes and detaches (records completed afterwards are dropped).
  ~CuptiCollector();
  CuptiCollector(const CuptiCollector&) = delete;
  CuptiCollector& operator=(const CuptiCollector&) = delete;

  // Completes every buffer CUPTI holds (cuptiActivityFlushAll, forced unless the options say
  // otherwise): call at step end after the device work of the step has finished (synchronise
  // first).
  void flush();
  void flush(FlushKind kind);
  // What arrived since the last take, emptied.
  profiler::GpuCapture take();

  std::int64_t clock_offset_ns() const { return offset_.offset_ns; }
  std::int64_t clock_uncertainty_ns() const { return offset_.uncertainty_ns; }
  // Measures the offset again (long runs: the clocks may drift apart).
  void remeasure_clock();

  // Whether CUPTI takes the zeroed buffers as they are (options.zeroed_buffers, and a CUPTI that
  // has the attribute).
  bool zeroed_buffers() const { return zeroed_buffers_; }
  // Whether API records carry system thread ids (gettid(), set by the constructor through
  // cuptiSetThreadIdType): what lets a rank find the calls of its own thread.
  bool system_thread_ids() const { return system_thread_ids_; }
  std::uint64_t dropped_records() const;
  // Device records that came without their times and were left out (a forced flush while work
  // of that record still ran).
  std::size_t incomplete_records() const;
  std::size_t records_seen() const;
  std::size_t buffer_errors() const;
  std::string first_buffer_error() const;

  // Called by the registry with a completed buffer (any thread).
  void consume(std::uint8_t* buffer, std::size_t valid_bytes, std::uint64_t dropped);

  std::int64_t engine_now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - epoch_).count();
  }

 private:
  Clock::time_point epoch_;
  CuptiCollectorOptions options_;
  ClockOffset offset_;
  bool zeroed_buffers_ = false;
  bool system_thread_ids_ = false;
  mutable std::mutex mutex_;  // what follows: filled by CUPTI's completion callback
  profiler::GpuCapture capture_;
  CuptiNameCache names_;
  std::uint64_t dropped_ = 0;
  std::size_t records_ = 0, buffer_errors_ = 0, incomplete_ = 0;
  std::string first_error_;
};

}  // namespace pipetune::cuda

// PIPETUNE_CUPTI_CHECK(cupti().ActivityFlushAll(0));
#define PIPETUNE_CUPTI_CHECK(call) \
  ::pipetune::cuda::detail::check_cupti((call), #call, __FILE__, __LINE__)
