#include "engine/cuda/cupti_collector.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "engine/cuda/cupti_records.hpp"
#include "profiler/gpu/capture_router.hpp"

namespace pipetune::cuda {

namespace detail {

void throw_cupti_error(CUptiResult r, const char* call, const char* file, int line) {
  const char* text = nullptr;
  if (cupti().GetResultString(r, &text) != CUPTI_SUCCESS || text == nullptr) text = "unknown error";
  std::string_view f(file);
  const auto slash = f.rfind('/');
  if (slash != std::string_view::npos) f.remove_prefix(slash + 1);
  throw CudaError(std::string(call) + ": " + text + " (CUptiResult " + std::to_string(r) + ") [" +
                  std::string(f) + ":" + std::to_string(line) + "]");
}

}  // namespace detail

namespace {

// CUPTI wants activity buffers aligned to 8 bytes.
constexpr std::size_t kBufferAlign = 8;

// The one registry of the process. Why a process-wide object: cuptiActivityRegisterCallbacks
// takes two plain C function pointers with no user-data argument, and the registration and the
// enabled activity kinds are process-wide; the completion callback has no other way to find the
// collector. It holds only the active collector (at most one) and the buffer size it asked for.
class Registry {
 public:
  static Registry& instance() {
    static Registry registry;
    return registry;
  }

  void attach(CuptiCollector* collector, std::size_t buffer_bytes) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (active_ != nullptr)
      throw std::logic_error(
          "a CUPTI collector is already active in this process (CUPTI's activity buffers are "
          "process-wide: one collector per process)");
    if (!registered_) {
      PIPETUNE_CUPTI_CHECK(cupti().ActivityRegisterCallbacks(&buffer_requested, &buffer_completed));
      registered_ = true;
    }
    buffer_bytes_ = std::max<std::size_t>(buffer_bytes, 64 * 1024);
    buffer_bytes_ = (buffer_bytes_ + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
    active_ = collector;
  }

  void detach(CuptiCollector* collector) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (active_ == collector) active_ = nullptr;
  }

 private:
  static void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size,
                                        std::size_t* max_records) {
    Registry& r = instance();
    std::size_t bytes = 0;
    {
      const std::lock_guard<std::mutex> lock(r.mutex_);
      bytes = r.buffer_bytes_;
    }
    *buffer = r.reuse(bytes);
    if (*buffer == nullptr) {
      *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(kBufferAlign, bytes));
      if (*buffer != nullptr) std::memset(*buffer, 0, bytes);  // handed over zeroed, see below
    }
    *size = *buffer != nullptr ? bytes : 0;  // no buffer: CUPTI drops records (and counts them)
    *max_records = 0;                        // as many as fit
  }

  static void CUPTIAPI buffer_completed(CUcontext context, std::uint32_t stream_id,
                                        std::uint8_t* buffer, std::size_t size,
                                        std::size_t valid_bytes) {
    std::size_t dropped = 0;
    if (cupti().ActivityGetNumDroppedRecords(context, stream_id, &dropped) != CUPTI_SUCCESS)
      dropped = 0;
    Registry& r = instance();
    {
      const std::lock_guard<std::mutex> lock(r.mutex_);
      if (r.active_ != nullptr && buffer != nullptr)
        r.active_->consume(buffer, valid_bytes, dropped);
    }
    // Zero what CUPTI wrote (and a margin), so the buffer goes back zeroed at a step end: CUPTI
    // zeroes every new buffer itself otherwise, on the thread launching the next kernel.
    if (buffer != nullptr) std::memset(buffer, 0, std::min(size, valid_bytes + kZeroMargin));
    r.give_back(buffer, size);
  }

  static constexpr std::size_t kZeroMargin = std::size_t{64} << 10;

  // Buffers come back at every step's flush: reusing them saves a large allocation and its page
  // faults per step. At most kSpareBuffers are kept, of the current size only, all zeroed.
  static constexpr std::size_t kSpareBuffers = 4;

  std::uint8_t* reuse(std::size_t bytes) {
    const std::lock_guard<std::mutex> lock(spare_mutex_);
    if (spare_.empty() || spare_bytes_ != bytes) return nullptr;
    std::uint8_t* b = spare_.back();
    spare_.pop_back();
    return b;
  }

  void give_back(std::uint8_t* buffer, std::size_t size) {
    if (buffer == nullptr) return;
    {
      const std::lock_guard<std::mutex> lock(spare_mutex_);
      if (spare_bytes_ != size) {
        for (std::uint8_t* b : spare_) std::free(b);
        spare_.clear();
        spare_bytes_ = size;
      }
      if (spare_.size() < kSpareBuffers) {
        spare_.push_back(buffer);
        return;
      }
    }
    std::free(buffer);
  }

  std::mutex mutex_;
  std::mutex spare_mutex_;  // the spare buffers (apart: consume() runs under mutex_)
  std::vector<std::uint8_t*> spare_;
  std::size_t spare_bytes_ = 0;
  CuptiCollector* active_ = nullptr;
  bool registered_ = false;
  std::size_t buffer_bytes_ = std::size_t{8} << 20;
};

std::vector<CUpti_ActivityKind> kinds(const CuptiCollectorOptions& options) {
  std::vector<CUpti_ActivityKind> k = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                       CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};
  if (options.api_records != ApiRecords::none) {
    k.push_back(CUPTI_ACTIVITY_KIND_RUNTIME);
    k.push_back(CUPTI_ACTIVITY_KIND_DRIVER);
  }
  if (options.synchronization) k.push_back(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
  return k;
}

// ApiRecords::launches: with the runtime and driver kinds on, switches off the records of every
// call that creates no device work. Switching single calls on does not do it: CUPTI 13 on an H100
// recorded nothing for calls switched on once the context existed with the kinds off (the GPU
// test's launches case, 0 API records). Enabling a kind again forgets these switches, so the next
// collector starts from every call.
void keep_only_launch_api_records() {
  const auto each = [&](CUpti_CallbackDomain domain, CUpti_CallbackId count, auto enable) {
    for (CUpti_CallbackId id = 1; id < count; ++id) {
      const char* name = nullptr;
      if (cupti().GetCallbackName(domain, id, &name) != CUPTI_SUCCESS || name == nullptr) continue;
      if (profiler::is_launch_call(name)) continue;
      const CUptiResult r = enable(id, std::uint8_t{0});
      if (r != CUPTI_SUCCESS)
        detail::throw_cupti_error(r, "cuptiActivityEnable*Api", __FILE__, __LINE__);
    }
  };
  each(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE,
       cupti().ActivityEnableRuntimeApi);
  each(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE, cupti().ActivityEnableDriverApi);
}

}  // namespace

ClockOffset estimate_clock_offset(std::span<const ClockSample> samples) {
  if (samples.empty()) throw std::invalid_argument("clock offset: no samples");
  const ClockSample* best = nullptr;
  for (const ClockSample& s : samples) {
    if (s.engine_after_ns < s.engine_before_ns)
      throw std::invalid_argument("clock offset: an engine clock reading went backwards (" +
                                  std::to_string(s.engine_before_ns) + " then " +
                                  std::to_string(s.engine_after_ns) + " ns)");
    if (best == nullptr ||
        s.engine_after_ns - s.engine_before_ns < best->engine_after_ns - best->engine_before_ns)
      best = &s;
  }
  const std::int64_t width = best->engine_after_ns - best->engine_before_ns;
  const std::int64_t mid = best->engine_before_ns + width / 2;
  return {mid - best->cupti_ns, (width + 1) / 2};
}

BufferWalk append_cupti_buffer(std::uint8_t* buffer, std::size_t valid_bytes,
                               profiler::GpuCapture& capture) {
  CuptiNameCache names;
  return append_cupti_buffer(buffer, valid_bytes, capture, names);
}

BufferWalk append_cupti_buffer(std::uint8_t* buffer, std::size_t valid_bytes,
                               profiler::GpuCapture& capture, CuptiNameCache& names,
                               ApiCallsKept kept) {
  BufferWalk walk;
  CUpti_Activity* record = nullptr;
  for (;;) {
    const CUptiResult r = cupti().ActivityGetNextRecord(buffer, valid_bytes, &record);
    if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // the end of the valid bytes
    if (r != CUPTI_SUCCESS) {
      walk.error = r;
      break;
    }
    ++walk.records;
    if (append_cupti_record(*record, capture, names, kept))
      ++walk.kept;
    else if (is_incomplete_device_record(*record))  // left out: counted apart from other kinds
      ++walk.incomplete;
  }
  return walk;
}

CuptiCollector::CuptiCollector(Clock::time_point epoch, CuptiCollectorOptions options)
    : epoch_(epoch), options_(options) {
  // Buffers are handed to CUPTI zeroed (the registry zeroes them as they come back), so CUPTI
  // need not zero each new one (8 MiB) on the thread whose launch asked for it, at the start of
  // every step (cuda_capture_bench measures both). Process-wide: set by each collector.
  // A CUPTI without the attribute zeroes the buffers itself, as before: not an error.
  std::uint8_t zeroed = options_.zeroed_buffers ? 1 : 0;
  std::size_t zeroed_size = sizeof zeroed;
  zeroed_buffers_ = cupti().ActivitySetAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER,
                                                 &zeroed_size, &zeroed) == CUPTI_SUCCESS &&
                    options_.zeroed_buffers;
  // Before any record: a rank knows its own thread by gettid(), not by pthread_self()'s address
  // cut to 32 bits (CUPTI's default on Linux). A CUPTI without it leaves the ids as they were.
  system_thread_ids_ =
      cupti().SetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) == CUPTI_SUCCESS;
  Registry::instance().attach(this, options_.buffer_bytes);
  std::vector<CUpti_ActivityKind> enabled;
  try {
    for (const CUpti_ActivityKind k : kinds(options_)) {
      PIPETUNE_CUPTI_CHECK(cupti().ActivityEnable(k));
      enabled.push_back(k);
    }
    if (options_.api_records == ApiRecords::launches) keep_only_launch_api_records();
    remeasure_clock();
  } catch (...) {
    for (const CUpti_ActivityKind k : enabled) cupti().ActivityDisable(k);
    Registry::instance().detach(this);
    throw;
  }
}

CuptiCollector::~CuptiCollector() {
  for (const CUpti_ActivityKind k : kinds(options_)) cupti().ActivityDisable(k);
  cupti().ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // completes into this collector
  Registry::instance().detach(this);
}

void CuptiCollector::remeasure_clock() {
  std::vector<ClockSample> samples(static_cast<std::size_t>(std::max(1, options_.clock_samples)));
  for (ClockSample& s : samples) {
    std::uint64_t t = 0;
    s.engine_before_ns = engine_now_ns();
    PIPETUNE_CUPTI_CHECK(cupti().GetTimestamp(&t));
    s.engine_after_ns = engine_now_ns();
    s.cupti_ns = static_cast<std::int64_t>(t);
  }
  offset_ = estimate_clock_offset(samples);
}

void CuptiCollector::flush() {
  flush(options_.forced_flush ? FlushKind::forced : FlushKind::completed);
}

void CuptiCollector::flush(FlushKind kind) {
  PIPETUNE_CUPTI_CHECK(
      cupti().ActivityFlushAll(kind == FlushKind::forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0));
}

void set_cupti_timestamp_buffer_bytes(std::size_t bytes) {
  std::size_t size = sizeof bytes;
  PIPETUNE_CUPTI_CHECK(
      cupti().ActivitySetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE, &size, &bytes));
}

void keep_cupti_timestamps_in_pinned_host_memory(bool pinned) {
  std::uint8_t value = pinned ? 1 : 0;
  std::size_t size = sizeof value;
  PIPETUNE_CUPTI_CHECK(cupti().ActivitySetAttribute(
      CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED, &size, &value));
}

profiler::GpuCapture CuptiCollector::take() {
  const std::lock_guard<std::mutex> lock(mutex_);
  profiler::GpuCapture out = std::move(capture_);
  capture_ = {};
  return out;
}

void CuptiCollector::consume(std::uint8_t* buffer, std::size_t valid_bytes, std::uint64_t dropped) {
  const std::lock_guard<std::mutex> lock(mutex_);
  const BufferWalk walk =
      append_cupti_buffer(buffer, valid_bytes, capture_, names_, options_.api_calls_kept);
  records_ += walk.records;
  incomplete_ += walk.incomplete;
  dropped_ += dropped;
  if (walk.error != CUPTI_SUCCESS) {
    if (buffer_errors_++ == 0) {
      const char* text = nullptr;
      if (cupti().GetResultString(walk.error, &text) != CUPTI_SUCCESS || text == nullptr)
        text = "unknown error";
      first_error_ = std::string("cuptiActivityGetNextRecord: ") + text + " after " +
                     std::to_string(walk.records) + " records";
    }
  }
}

std::uint64_t CuptiCollector::dropped_records() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

std::size_t CuptiCollector::incomplete_records() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return incomplete_;
}

std::size_t CuptiCollector::records_seen() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return records_;
}

std::size_t CuptiCollector::buffer_errors() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return buffer_errors_;
}

std::string CuptiCollector::first_buffer_error() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return first_error_;
}

}  // namespace pipetune::cuda
