#include "db/import/chrome_trace_import.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

#include "db/chrome_trace.hpp"
#include "db/import/chrome_event_reader.hpp"
#include "db/import/chrome_ranks.hpp"
#include "db/import/pipeline_phase_names.hpp"
#include "db/import/trace_builder.hpp"
#include "engine/errors.hpp"
#include "profiler/analysis/time_window.hpp"
#include "profiler/gpu/gpu_activity_names.hpp"

namespace pipetune::db {

namespace {

using import_detail::ChromeEvent;
using import_detail::ChromeId;
using import_detail::ChromeProcess;
using import_detail::ChromeThread;
using import_detail::id_number;
using import_detail::int_arg;
using nlohmann::json;
using profiler::Span;
using profiler::SpanKind;
using profiler::Stream;

std::string id_key(const ChromeId& id) {
  if (!id.present) return "-";
  return id.is_text ? "s" + id.text : "i" + std::to_string(id.number);
}

std::array<std::int32_t, 3> dim_arg(const json& args, const char* key) {
  std::array<std::int32_t, 3> d{0, 0, 0};
  if (!args.is_object()) return d;
  auto it = args.find(key);
  if (it == args.end() || !it->is_array()) return d;
  for (std::size_t i = 0; i < 3 && i < it->size(); ++i)
    if ((*it)[i].is_number_integer()) d[i] = (*it)[i].get<std::int32_t>();
  return d;
}

bool is_gpu_kind(SpanKind k) {
  return k == SpanKind::Kernel || k == SpanKind::Memcpy || k == SpanKind::Memset;
}

bool is_kineto_category(const std::string& cat) {
  // Not "kernel": that is also a span kind name, which db/chrome_trace writes as the category.
  return cat == "gpu_memcpy" || cat == "gpu_memset" || cat == "cuda_runtime" ||
         cat == "cuda_driver" || cat == "cpu_op" || cat == "user_annotation" ||
         cat == "gpu_user_annotation" || cat == "python_function" || cat == "ac2g";
}

// The stream and index of a thread named as db/chrome_trace names them: "<stream>", then
// " <index>", then " (<anything>)" ("compute", "gpu 7", "host 144 (python3)").
std::optional<std::pair<Stream, std::int32_t>> export_thread_lane(const std::string& name) {
  const std::size_t space = name.find(' ');
  Stream stream;
  if (name.empty() || !profiler::parse_stream(name.substr(0, space), stream)) return std::nullopt;
  if (space == std::string::npos) return std::pair(stream, 0);
  std::string_view rest = std::string_view(name).substr(space + 1);
  std::size_t digits = rest.size() > 0 && rest[0] == '-' ? 1 : 0;
  while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
  std::int32_t index = 0;
  if (digits > 0) {
    auto v = id_number(ChromeId{true, 0, std::string(rest.substr(0, digits)), true});
    if (!v || *v < INT32_MIN || *v > INT32_MAX) return std::nullopt;
    index = static_cast<std::int32_t>(*v);
    rest.remove_prefix(digits);
    if (rest.empty()) return std::pair(stream, index);
    if (rest[0] != ' ') return std::nullopt;
    rest.remove_prefix(1);
  }
  if (rest.size() < 2 || rest.front() != '(' || rest.back() != ')') return std::nullopt;
  return std::pair(stream, index);
}

struct PendingSpan {
  std::uint32_t thread = 0;
  Span span;         // lane not yet known
  bool gpu = false;  // goes to the Gpu lane of gpu_stream
  std::int32_t gpu_stream = -1;
  std::int64_t kernel = -1;       // index into records_
  std::int64_t correlation = -1;  // of a CUDA API call: the GPU activity it launched
};

struct OpenSpan {
  std::uint32_t thread = 0;
  std::string name, cat;
  std::int64_t start_ns = 0;
  json args;
};

struct PendingCounter {
  std::uint32_t thread = 0;
  std::int64_t t_ns = 0;
  std::string name, key;
  double value = 0.0;
};

class ChromeImport {
 public:
  ChromeImport(const std::filesystem::path& file, const ImportLimits& limits)
      : file_(file.string()), limits_(limits) {
    builder_.set_source(file_);
    builder_.set_limits(limits);
  }

  ImportedProfile run(const std::filesystem::path& path) {
    info_ = import_detail::read_chrome_events(
        path, [this](ChromeEvent& e) { on_event(e); }, limits_);
    finish();
    if (info_.unterminated)
      out_.warnings.push_back(
          "the event array ends without its ']' (the format allows it, e.g. "
          "a traced process that died): " +
          std::to_string(info_.events) + " events read up to the cut");
    if (out_.trace.spans.empty())
      throw InputError(file_ + ": no spans to import (" + std::to_string(info_.events) +
                       " events, none of them a complete, begin/end or GPU activity span)");
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const ChromeEvent& e, const std::string& what) const {
    throw InputError(file_ + ": event " + std::to_string(e.index) + " (\"" + e.name + "\", ph " +
                     e.ph + "): " + what);
  }

  // One more record held until finish(): bounded by ImportLimits::max_records.
  void hold() {
    if (++held_ <= limits_.max_records) return;
    throw InputError(file_ + ": more than " + std::to_string(limits_.max_records) +
                     " spans, samples, step markers, open begin events, processes and threads: "
                     "beyond the import limit");
  }

  std::uint32_t process_of(const ChromeId& pid) {
    const std::string key = id_key(pid);
    auto it = process_index_.find(key);
    if (it != process_index_.end()) return it->second;
    hold();
    const auto id = static_cast<std::uint32_t>(processes_.size());
    processes_.push_back(ChromeProcess{pid, {}, {}});
    process_index_.emplace(key, id);
    return id;
  }

  std::uint32_t thread_of(const ChromeEvent& e) {
    // A missing tid is the process's own thread (as Perfetto reads it).
    const ChromeId& tid = e.tid.present ? e.tid : e.pid;
    const std::string key = id_key(e.pid) + '\x1f' + id_key(tid);
    auto it = thread_index_.find(key);
    if (it != thread_index_.end()) return it->second;
    hold();
    const auto id = static_cast<std::uint32_t>(threads_.size());
    ChromeThread t;
    t.pid = e.pid;
    t.tid = tid;
    t.process = process_of(e.pid);
    threads_.push_back(std::move(t));
    thread_index_.emplace(key, id);
    return id;
  }

  void on_event(ChromeEvent& e) {
    if (e.ph.empty()) fail(e, "no \"ph\"");
    if (!e.cat.empty() && is_kineto_category(e.cat)) kineto_ = true;
    switch (e.ph[0]) {
      case 'X': {
        if (!e.ts_ns || !e.dur_ns) fail(e, "a complete event needs \"ts\" and \"dur\"");
        if (*e.dur_ns < 0) {
          ++negative_durations_;
          return;
        }
        add_span(thread_of(e), e.name, e.cat, *e.ts_ns, *e.ts_ns + *e.dur_ns, e.args);
        return;
      }
      case 'B':
      case 'b': {
        if (!e.ts_ns) fail(e, "a begin event needs \"ts\"");
        const std::uint32_t thread = thread_of(e);
        hold();
        OpenSpan open{thread, e.name, e.cat, *e.ts_ns, std::move(e.args)};
        if (e.ph[0] == 'B') {
          open_by_thread_[thread].push_back(std::move(open));
        } else {
          open_async_[async_key(e)].push_back(std::move(open));
        }
        return;
      }
      case 'E':
      case 'e': {
        if (!e.ts_ns) fail(e, "an end event needs \"ts\"");
        std::vector<OpenSpan>* stack = nullptr;
        if (e.ph[0] == 'E') {
          stack = &open_by_thread_[thread_of(e)];
        } else {
          auto it = open_async_.find(async_key(e));
          if (it != open_async_.end()) stack = &it->second;
        }
        if (stack == nullptr || stack->empty()) {
          ++unmatched_ends_;
          return;
        }
        OpenSpan open = std::move(stack->back());
        stack->pop_back();
        --held_;  // held again as its span
        if (*e.ts_ns < open.start_ns) {
          ++negative_durations_;
          return;
        }
        add_span(open.thread, open.name, open.cat, open.start_ns, *e.ts_ns, open.args);
        return;
      }
      case 'C':
        add_counters(e);
        return;
      case 'M':
        add_metadata(e);
        return;
      case 'i':
      case 'I':
        if (e.cat == kChromeStepCategory) {
          add_step(e);
          return;
        }
        if (e.name == "[memory]" && add_memory(e)) return;
        ++ignored_events_;
        return;
      default:
        ++ignored_events_;  // instants, flows, samples, object events: not spans
    }
  }

  std::string async_key(const ChromeEvent& e) const {
    return id_key(e.pid) + '\x1f' + e.cat + '\x1f' + e.id;
  }

  void add_metadata(ChromeEvent& e) {
    if (!e.args.is_object()) return;
    auto name = e.args.find("name");
    if (name == e.args.end() || !name->is_string()) return;
    if (e.name == "process_name") {
      processes_[process_of(e.pid)].name = name->get<std::string>();
    } else if (e.name == "thread_name") {
      threads_[thread_of(e)].name = name->get<std::string>();
    }
  }

  // PyTorch's profile_memory: "[memory]" instants whose "Total Allocated" is the caching
  // allocator's allocated bytes on the device after the event ("Device Type" 1 = CUDA). They
  // become the rank's memory in the unattributed category. False for other devices.
  bool add_memory(const ChromeEvent& e) {
    if (!e.ts_ns || !e.args.is_object()) return false;
    const auto type = int_arg(e.args, "Device Type");
    const auto total = e.args.find("Total Allocated");
    if (!type || *type != 1 || total == e.args.end() || !total->is_number()) return false;
    const std::uint32_t thread = thread_of(e);
    hold();
    counters_.push_back(
        PendingCounter{thread, *e.ts_ns, "memory bytes", "unattributed", total->get<double>()});
    return true;
  }

  // A step's end as export-trace writes it: args "step", "loss", "tokens_per_s" (null: unknown).
  void add_step(const ChromeEvent& e) {
    if (!e.ts_ns) fail(e, "a step marker needs \"ts\" (the step's end)");
    const auto number = [&](const char* key) {
      if (!e.args.is_object()) return std::numeric_limits<double>::quiet_NaN();
      auto it = e.args.find(key);
      if (it == e.args.end() || it->is_null()) return std::numeric_limits<double>::quiet_NaN();
      if (!it->is_number()) fail(e, std::string("\"") + key + "\" is not a number");
      return it->get<double>();
    };
    profiler::StepMetric step;
    const auto index = int_arg(e.args, "step");
    if (!index || *index < INT32_MIN || *index > INT32_MAX)
      fail(e, "a step marker needs \"step\" in its args: the step's number (a 32-bit integer)");
    step.step = static_cast<std::int32_t>(*index);
    step.t_ns = *e.ts_ns;
    step.loss = number("loss");
    step.tokens_per_s = number("tokens_per_s");
    hold();
    steps_.push_back(step);
  }

  void add_counters(const ChromeEvent& e) {
    if (!e.ts_ns) fail(e, "a counter event needs \"ts\"");
    if (!e.args.is_object()) return;
    const std::uint32_t thread = thread_of(e);
    for (auto it = e.args.begin(); it != e.args.end(); ++it) {
      if (!it->is_number()) continue;
      hold();
      counters_.push_back(PendingCounter{thread, *e.ts_ns, e.name, it.key(), it->get<double>()});
    }
  }

  void add_span(std::uint32_t thread, const std::string& name, const std::string& cat,
                std::int64_t start, std::int64_t end, const json& args) {
    hold();
    PendingSpan p;
    p.thread = thread;
    Span& s = p.span;
    s.start_ns = start;
    s.end_ns = end;
    s.name = builder_.name(name);
    SpanKind kind = kind_of_category(p, name, cat, args);
    if (profiler::is_compute(kind)) threads_[thread].compute = true;
    const bool gpu = is_gpu_kind(kind);
    if (kind == SpanKind::Kernel) kind = nccl_kernel_kind(name);
    s.kind = kind;
    if (gpu) hold_gpu_record(p, name, start, end, args);
    spans_.push_back(p);
  }

  // The span kind its category says: one of ours (with micro-batch, chunk and peer from the
  // args), a Kineto copy, memset or CUDA call (with the correlation it launched), or a range,
  // which a pipeline phase's name makes that phase (marking its thread compute, on its stage).
  SpanKind kind_of_category(PendingSpan& p, const std::string& name, const std::string& cat,
                            const json& args) {
    Span& s = p.span;
    SpanKind kind = SpanKind::Range;
    if (!cat.empty() && profiler::parse_span_kind(cat, kind)) {
      if (auto v = int_arg(args, "microbatch")) s.microbatch = static_cast<std::int32_t>(*v);
      if (auto v = int_arg(args, "chunk")) s.chunk = static_cast<std::int16_t>(*v);
      if (auto v = int_arg(args, "peer")) s.peer = static_cast<std::int32_t>(*v);
    } else if (cat == "gpu_memcpy") {
      kind = SpanKind::Memcpy;
    } else if (cat == "gpu_memset") {
      kind = SpanKind::Memset;
    } else if (cat == "cuda_runtime" || cat == "cuda_driver") {
      kind = SpanKind::Runtime;
      p.correlation = int_arg(args, "correlation").value_or(-1);
    } else if (auto phase = cat == "cpu_op" ? std::nullopt  // operators, not annotations
                            : cat == "python_function"
                                ? match_python_function_phase(name)  // DeepSpeed's passes only
                                : match_pipeline_phase(name)) {
      kind = phase->kind;
      s.microbatch = phase->microbatch;
      ChromeThread& t = threads_[p.thread];
      t.compute = true;
      if (phase->stage >= 0) {
        if (t.stage >= 0 && t.stage != phase->stage) t.stage_conflict = true;
        t.stage = phase->stage;
      }
    }
    return kind;
  }

  // A kernel's span kind: the collective a NCCL kernel's name says, else a kernel (counted when
  // it is NCCL's but no span kind fits).
  SpanKind nccl_kernel_kind(const std::string& name) {
    const auto nccl = profiler::classify_nccl_kernel(name);
    if (!nccl) return SpanKind::Kernel;
    switch (*nccl) {
      case profiler::NcclKernel::AllReduce:
        return SpanKind::AllReduce;
      case profiler::NcclKernel::AllGather:
        return SpanKind::AllGather;
      case profiler::NcclKernel::ReduceScatter:
        return SpanKind::ReduceScatter;
      case profiler::NcclKernel::Broadcast:
        return SpanKind::Broadcast;
      case profiler::NcclKernel::AllToAll:
        return SpanKind::AllToAll;
      case profiler::NcclKernel::Send:
      case profiler::NcclKernel::SendRecv:
        return SpanKind::Send;
      case profiler::NcclKernel::Recv:
        return SpanKind::Recv;
      case profiler::NcclKernel::Reduce:
      case profiler::NcclKernel::Unknown:
        ++unclassified_nccl_;
        break;
    }
    return SpanKind::Kernel;
  }

  // GPU activity: its stream (the args' or the thread's id) and a kernel record held until
  // finish(); its device noted on the process.
  void hold_gpu_record(PendingSpan& p, const std::string& name, std::int64_t start,
                       std::int64_t end, const json& args) {
    const ChromeThread& t = threads_[p.thread];
    p.gpu = true;
    p.gpu_stream =
        static_cast<std::int32_t>(int_arg(args, "stream").value_or(id_number(t.tid).value_or(-1)));
    profiler::KernelRecord r;
    r.device =
        static_cast<std::int32_t>(int_arg(args, "device").value_or(id_number(t.pid).value_or(-1)));
    r.stream = p.gpu_stream;
    r.correlation = int_arg(args, "correlation").value_or(-1);
    r.start_ns = start;
    r.end_ns = end;
    r.name = name;
    r.grid = dim_arg(args, "grid");
    r.block = dim_arg(args, "block");
    r.bytes = int_arg(args, "bytes").value_or(0);
    if (r.device >= 0) processes_[t.process].devices.insert(r.device);
    p.kernel = static_cast<std::int64_t>(records_.size());
    records_.push_back(std::move(r));
  }

  std::int32_t lane_of(const PendingSpan& p) {
    const ChromeThread& t = threads_[p.thread];
    if (auto ours = export_thread_lane(t.name)) {
      const std::int32_t lane = builder_.lane(t.rank, ours->first, ours->second);
      if (named_lanes_.insert(lane).second)
        builder_.set_lane_name(lane, "rank " + std::to_string(t.rank) + " " + t.name);
      return lane;
    }
    if (p.gpu) return builder_.lane(t.rank, Stream::Gpu, p.gpu_stream);
    // Kineto traces are host threads and streams; a thread with pipeline phases is a compute
    // lane only in traces that are nothing but such phases (PiPPy's).
    if (t.compute && !kineto_) {
      auto [it, fresh] = compute_index_.emplace(p.thread, 0);
      if (fresh) it->second = compute_lanes_[t.rank]++;
      return builder_.lane(t.rank, Stream::Compute, it->second);
    }
    auto [it, fresh] = host_index_.emplace(p.thread, 0);
    if (fresh) {
      auto n = id_number(t.tid);
      it->second = n ? static_cast<std::int32_t>(*n) : --text_tids_;
    }
    const std::int32_t lane = builder_.lane(t.rank, Stream::Host, it->second);
    if (named_lanes_.insert(lane).second) {
      std::string name = "rank " + std::to_string(t.rank) + " host " + std::to_string(it->second);
      const std::string label = !t.name.empty() ? t.name : t.tid.is_text ? t.tid.text : "";
      if (!label.empty()) name += " (" + label + ")";
      builder_.set_lane_name(lane, std::move(name));
    }
    return lane;
  }

  void finish() {
    for (ImportedRank& r : import_detail::assign_chrome_ranks(threads_, processes_, info_.top_level,
                                                              kineto_, out_.warnings))
      out_.ranks.push_back(std::move(r));
    read_time_base();
    emit_spans();
    emit_counters();
    for (profiler::StepMetric step : steps_) {
      step.t_ns = based(step.t_ns, "a step marker");
      builder_.trace().steps.push_back(step);
    }
    warn_skipped();
    if (info_.top_level.contains("schemaVersion"))
      out_.schema_version = info_.top_level["schemaVersion"].dump();
    builder_.finish(out_);
    if (const auto other = info_.top_level.find("otherData");
        other != info_.top_level.end() && other->is_object()) {
      const auto rule = other->find(std::string(kChromeNestedCommKey));
      out_.trace.ops_wait_for_nested_comm =
          rule != other->end() && rule->is_string() && rule->get<std::string>() == "wait";
    }
  }

  [[noreturn]] void beyond(std::int64_t t, const std::string& what) const {
    throw InputError(file_ + ": " + what + " at " + std::to_string(t) +
                     " ns is beyond the times pipetune handles (2^62 ns, about 146 years)");
  }

  // The file's baseTimeNanoseconds, added to every time it holds.
  void read_time_base() {
    if (info_.top_level.contains("baseTimeNanoseconds") &&
        info_.top_level["baseTimeNanoseconds"].is_number_integer())
      base_ = info_.top_level["baseTimeNanoseconds"].get<std::int64_t>();
    if (!profiler::analysis::trace_time_ok(base_)) beyond(base_, "baseTimeNanoseconds");
  }

  // A time and the base, each within the analyses' range (2^62 ns), add without overflow; the
  // sum is checked again where it is stored (trace_builder).
  std::int64_t based(std::int64_t t, const char* what) const {
    if (!profiler::analysis::trace_time_ok(t)) beyond(t, what);
    return t + base_;
  }

  // Every span on its lane, GPU activity with its kernel record and CUDA calls as the launches of
  // their correlation ids.
  void emit_spans() {
    // Threads our export named keep their lanes even without spans (an idle comm lane).
    for (std::uint32_t i = 0; i < threads_.size(); ++i)
      if (export_thread_lane(threads_[i].name)) lane_of(PendingSpan{i, Span{}, false, -1, -1});
    for (PendingSpan& p : spans_) {
      p.span.lane = lane_of(p);
      p.span.start_ns = based(p.span.start_ns, "a span start");
      p.span.end_ns = based(p.span.end_ns, "a span end");
      if (p.kernel >= 0) {
        profiler::KernelRecord r = std::move(records_[static_cast<std::size_t>(p.kernel)]);
        r.rank = threads_[p.thread].rank;
        r.start_ns = p.span.start_ns;
        r.end_ns = p.span.end_ns;
        builder_.add_gpu_span(p.span, std::move(r));
      } else {
        if (p.correlation >= 0)
          builder_.add_launch(threads_[p.thread].rank, p.correlation, p.span.lane, p.span.start_ns);
        builder_.add_span(p.span);
      }
    }
    spans_.clear();
  }

  // Counters: memory by category from "memory bytes", only changes kept (our export repeats
  // every category of the rank at each sample); any other counter as it is.
  void emit_counters() {
    std::map<std::pair<std::int32_t, int>, std::int64_t> last_bytes;
    auto& trace = builder_.trace();
    for (const PendingCounter& c : counters_) {
      const std::int32_t rank = threads_[c.thread].rank;
      profiler::MemoryCategory category;
      if (c.name == "memory bytes" && profiler::parse_memory_category(c.key, category)) {
        // A byte count must be a whole number a 64-bit counter holds (2^62: far beyond any
        // device); anything else is a damaged trace, not a value to convert (undefined).
        if (!(c.value >= 0.0 && c.value <= 4.6e18))
          throw InputError(file_ + ": memory bytes " + std::to_string(c.value) + " of '" + c.key +
                           "' is not a byte count");
        const auto bytes = static_cast<std::int64_t>(c.value);
        auto [it, fresh] = last_bytes.emplace(std::pair(rank, static_cast<int>(category)), bytes);
        if (!fresh && it->second == bytes) continue;
        it->second = bytes;
        trace.memory.push_back(
            profiler::MemorySample{rank, category, based(c.t_ns, "a memory sample"), bytes});
      } else {
        const std::string name = c.key == "value" ? c.name : c.name + " " + c.key;
        trace.counters.push_back(profiler::CounterSample{rank, builder_.name(name),
                                                         based(c.t_ns, "a counter"), c.value});
      }
    }
  }

  // One warning for each kind of event skipped or kept without its kind.
  void warn_skipped() {
    std::int64_t unclosed = 0;
    for (const auto& [thread, stack] : open_by_thread_)
      unclosed += static_cast<std::int64_t>(stack.size());
    for (const auto& [key, stack] : open_async_)
      unclosed += static_cast<std::int64_t>(stack.size());
    auto warn = [&](std::int64_t n, const std::string& what) {
      if (n > 0) out_.warnings.push_back(std::to_string(n) + " " + what);
    };
    warn(unclosed, "begin events (B/b) never ended: skipped");
    warn(unmatched_ends_, "end events (E/e) without a begin: skipped");
    warn(negative_durations_, "events ending before they start: skipped");
    warn(unclassified_nccl_,
         "NCCL kernels of a collective with no span kind (Reduce or unknown) kept as kernel spans");
    warn(ignored_events_, "instant, flow or other non-span events ignored");
  }

  std::string file_;
  const ImportLimits& limits_;
  std::uint64_t held_ = 0;  // records held (hold())
  import_detail::ChromeFileInfo info_;
  import_detail::ImportedTraceBuilder builder_;
  ImportedProfile out_;
  bool kineto_ = false;
  std::int64_t base_ = 0;  // baseTimeNanoseconds

  std::vector<ChromeProcess> processes_;
  std::unordered_map<std::string, std::uint32_t> process_index_;
  std::vector<ChromeThread> threads_;
  std::unordered_map<std::string, std::uint32_t> thread_index_;
  std::vector<PendingSpan> spans_;
  std::vector<profiler::KernelRecord> records_;
  std::vector<PendingCounter> counters_;
  std::vector<profiler::StepMetric> steps_;
  std::unordered_map<std::uint32_t, std::vector<OpenSpan>> open_by_thread_;
  std::unordered_map<std::string, std::vector<OpenSpan>> open_async_;

  std::unordered_map<std::uint32_t, std::int32_t> compute_index_, host_index_;
  std::map<std::int32_t, std::int32_t> compute_lanes_;  // rank -> compute lanes so far
  std::set<std::int32_t> named_lanes_;
  std::int32_t text_tids_ = 0;

  std::int64_t unmatched_ends_ = 0, negative_durations_ = 0, unclassified_nccl_ = 0,
               ignored_events_ = 0;
};

}  // namespace

ImportedProfile import_chrome_trace(const std::filesystem::path& file, const ImportLimits& limits) {
  return ChromeImport(file, limits).run(file);
}

bool chrome_trace_gzip_supported() {
  return import_detail::gzip_supported();
}

}  // namespace pipetune::db
