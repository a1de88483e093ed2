#include "db/import/nsys_sqlite.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <system_error>
#include <unordered_set>

#include "db/import/launch_command.hpp"
#include "db/import/nsys_rows.hpp"
#include "db/import/nsys_schema.hpp"
#include "db/import/nsys_sendrecv.hpp"
#include "db/import/pipeline_phase_names.hpp"
#include "db/import/rank_names.hpp"
#include "db/import/trace_builder.hpp"

namespace pipetune::db {

namespace {

using namespace import_detail;
using profiler::Span;
using profiler::SpanKind;
using profiler::Stream;

constexpr std::string_view kKernels = "CUPTI_ACTIVITY_KIND_KERNEL";
constexpr std::string_view kMemcpy = "CUPTI_ACTIVITY_KIND_MEMCPY";
constexpr std::string_view kMemset = "CUPTI_ACTIVITY_KIND_MEMSET";
constexpr std::string_view kRuntime = "CUPTI_ACTIVITY_KIND_RUNTIME";
constexpr std::string_view kNvtx = "NVTX_EVENTS";

// NVTX eventType codes (nsys "SQLite Schema Event Values").
constexpr std::int64_t kNvtxThreadName = 39;
constexpr std::int64_t kNvtxPushPop = 59;
constexpr std::int64_t kNvtxStartEnd = 60;
constexpr std::int64_t kNvtxDomainCreate = 75;

std::string plural(std::int64_t n, std::string_view what) {
  return std::to_string(n) + " " + std::string(what);
}

class NsysImport {
 public:
  explicit NsysImport(const std::filesystem::path& file)
      : file_(file.string()), db_(file), schema_(db_) {
    builder_.set_source(file_);
  }

  ImportedProfile run() {
    check_is_nsys_export();
    read_schema_version();
    read_launch_command();
    strings_ = read_string_ids(schema_);
    read_memcpy_kinds();
    read_processes_and_threads();
    read_kernels();
    read_copies();
    read_memsets();
    read_runtime();
    read_nvtx();
    read_mpi_ranks();
    read_gpus();
    read_memory_usage();
    emit();
    return std::move(out_);
  }

 private:
  void warn(std::string text) { out_.warnings.push_back(std::move(text)); }

  void note_missing(std::string_view table, std::string_view consequence) {
    if (!schema_.has_table(table))
      warn("table " + std::string(table) +
           " absent (nsys creates tables only for captured "
           "data): " +
           std::string(consequence));
  }

  void check_is_nsys_export() {
    bool activity = schema_.has_table(kNvtx);
    for (std::string_view t : {kKernels, kMemcpy, kMemset, kRuntime})
      activity = activity || schema_.has_table(t);
    if (!schema_.has_table("StringIds") && !activity)
      throw InputError(file_ +
                       ": not an Nsight Systems export: no StringIds, CUPTI_ACTIVITY_KIND_* or "
                       "NVTX_EVENTS table");
    note_missing("StringIds", "kernel, API and registered NVTX names unknown");
    note_missing(kKernels, "no kernels");
    note_missing(kMemcpy, "no copies");
    note_missing(kMemset, "no memsets");
    note_missing(kRuntime, "no CUDA API calls");
    note_missing(kNvtx, "no NVTX ranges");
    note_missing("TARGET_INFO_GPU", "GPU names unknown");
    note_missing("PROCESSES", "process names unknown");
    note_missing("ThreadNames", "thread names unknown");
  }

  // The command nsys launched (META_DATA_CAPTURE, newer exports): torchrun's or mpirun's
  // options say how many ranks the job has and where this capture's ranks start.
  void read_launch_command() {
    if (!schema_.has_table("META_DATA_CAPTURE")) return;
    TableReader r(schema_, "META_DATA_CAPTURE", {"name", "value"}, {},
                  "name = 'PROCESS_0:COMMAND' OR name LIKE 'PROCESS_0:ARGUMENT_%'");
    std::string command;
    std::map<int, std::string> arguments;
    while (r.next()) {
      const std::string_view name = r.text(0);
      if (name == "PROCESS_0:COMMAND") {
        command = std::string(r.text(1));
        continue;
      }
      const std::string_view index = name.substr(std::string_view("PROCESS_0:ARGUMENT_").size());
      int i = 0;
      const auto [end, ec] = std::from_chars(index.data(), index.data() + index.size(), i);
      if (ec == std::errc() && end == index.data() + index.size() && i >= 0 && i < 4096)
        arguments[i] = std::string(r.text(1));
    }
    std::vector<std::string> args;
    for (auto& [i, a] : arguments) args.push_back(std::move(a));
    launch_ = parse_launch_command(command, args);
  }

  void read_schema_version() {
    // Newer exports: META_DATA_EXPORT; schema 2.x: EXPORT_META_DATA.
    for (std::string_view table : {"META_DATA_EXPORT", "EXPORT_META_DATA"}) {
      if (!schema_.has_table(table)) continue;
      TableReader r(schema_, table, {"name", "value"}, {}, "name = 'EXPORT_SCHEMA_VERSION'");
      if (r.next()) out_.schema_version = std::string(r.text(1));
      return;
    }
    warn("no META_DATA_EXPORT or EXPORT_META_DATA table: export schema version unknown");
  }

  const std::string* string_id(std::optional<std::int64_t> id) {
    if (!id) return nullptr;
    auto it = strings_.find(*id);
    if (it == strings_.end()) {
      ++missing_strings_;
      return nullptr;
    }
    return &it->second;
  }

  void read_memcpy_kinds() {
    if (!schema_.has_table("ENUM_CUDA_MEMCPY_OPER")) return;
    TableReader r(schema_, "ENUM_CUDA_MEMCPY_OPER", {"id", "name"}, {});
    while (r.next()) {
      const std::string label = profiler::memcpy_kind_label_from_enum_name(r.text(1));
      if (auto id = r.integer(0); id && !label.empty()) memcpy_labels_[*id] = label;
    }
  }

  void read_processes_and_threads() {
    if (schema_.has_table("PROCESSES")) {
      TableReader r(schema_, "PROCESSES", {"globalPid"}, {"pid", "name"});
      while (r.next()) {
        auto gpid = r.integer(0);
        if (!gpid) continue;
        ProcessInfo info{static_cast<std::int32_t>(r.integer_or(1, pid_of(*gpid))),
                         std::string(r.text(2))};
        ranks_in_.processes[process_key(*gpid)] = std::move(info);
      }
    }
    if (schema_.has_table("ThreadNames")) {
      TableReader r(schema_, "ThreadNames", {"globalTid", "nameId"}, {"priority"});
      std::unordered_map<std::int64_t, std::int64_t> priority;
      while (r.next()) {
        auto gtid = r.integer(0);
        const std::string* name = string_id(r.integer(1));
        if (!gtid || name == nullptr) continue;
        const std::int64_t prio = r.integer_or(2, 0);
        auto [it, fresh] = priority.emplace(*gtid, prio);
        if (!fresh && prio < it->second) continue;
        it->second = prio;
        name_thread(*gtid, *name);
      }
    }
  }

  void name_thread(std::int64_t global_tid, std::string_view name) {
    thread_names_[global_tid] = std::string(name);
    if (auto rank = rank_from_name(name))
      ranks_in_.explicit_ranks[process_key(global_tid)] = {
          *rank, "thread name '" + std::string(name) + "'"};
  }

  void add_gpu(GpuActivity a) {
    ranks_in_.gpu_processes.insert(a.process);
    if (a.record.device >= 0) ranks_in_.devices[a.process].insert(a.record.device);
    gpu_.push_back(std::move(a));
  }

  // Reads start, end, globalPid, deviceId, streamId, correlationId (columns 0..5) into `a`;
  // false (row skipped, counted) when a time or the process is missing or end < start.
  bool read_gpu_common(const TableReader& r, GpuActivity& a) {
    auto start = r.integer(0), end = r.integer(1), gpid = r.integer(2);
    if (!start || !end || !gpid || *end < *start) {
      ++skipped_gpu_;
      return false;
    }
    a.process = process_key(*gpid);
    a.record.start_ns = *start;
    a.record.end_ns = *end;
    a.record.device = static_cast<std::int32_t>(r.integer_or(3, -1));
    a.record.stream = static_cast<std::int32_t>(r.integer_or(4, -1));
    a.record.correlation = r.integer_or(5, -1);
    return true;
  }

  void read_kernels() {
    if (!schema_.has_table(kKernels)) return;
    TableReader r(schema_, kKernels, {"start", "end", "globalPid"},
                  {"deviceId", "streamId", "correlationId", "shortName", "demangledName",
                   "mangledName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"});
    while (r.next()) {
      GpuActivity a;
      if (!read_gpu_common(r, a)) continue;
      const std::string* short_name = string_id(r.integer(6));
      const std::string* demangled = string_id(r.integer(7));
      const std::string* mangled = string_id(r.integer(8));
      const std::string* label = short_name ? short_name : demangled ? demangled : mangled;
      a.span_name = builder_.name(label ? std::string_view(*label) : "kernel");
      const std::string* full = demangled ? demangled : label;
      if (full) a.record.name = *full;
      for (int i = 0; i < 3; ++i) {
        a.record.grid[static_cast<std::size_t>(i)] =
            static_cast<std::int32_t>(r.integer_or(9 + i, 0));
        a.record.block[static_cast<std::size_t>(i)] =
            static_cast<std::int32_t>(r.integer_or(12 + i, 0));
      }
      if (label) a.nccl = profiler::classify_nccl_kernel(*label);
      if (!a.nccl && full) a.nccl = profiler::classify_nccl_kernel(*full);
      a.kind = a.nccl ? profiler::span_kind_of(*a.nccl) : SpanKind::Kernel;
      add_gpu(std::move(a));
    }
  }

  void read_copies() {
    if (!schema_.has_table(kMemcpy)) return;
    TableReader r(schema_, kMemcpy, {"start", "end", "globalPid"},
                  {"deviceId", "streamId", "correlationId", "bytes", "copyKind"});
    while (r.next()) {
      GpuActivity a;
      if (!read_gpu_common(r, a)) continue;
      a.kind = SpanKind::Memcpy;
      a.record.bytes = r.integer_or(6, 0);
      const std::int64_t code = r.integer_or(7, 0);
      auto it = memcpy_labels_.find(code);
      const std::string label =
          it != memcpy_labels_.end() ? it->second : std::string(profiler::memcpy_kind_label(code));
      a.record.name = "memcpy " + label;
      a.span_name = builder_.name(a.record.name);
      add_gpu(std::move(a));
    }
  }

  void read_memsets() {
    if (!schema_.has_table(kMemset)) return;
    TableReader r(schema_, kMemset, {"start", "end", "globalPid"},
                  {"deviceId", "streamId", "correlationId", "bytes"});
    while (r.next()) {
      GpuActivity a;
      if (!read_gpu_common(r, a)) continue;
      a.kind = SpanKind::Memset;
      a.record.bytes = r.integer_or(6, 0);
      a.record.name = "memset";
      a.span_name = builder_.name(a.record.name);
      add_gpu(std::move(a));
    }
  }

  void read_runtime() {
    if (!schema_.has_table(kRuntime)) return;
    TableReader r(schema_, kRuntime, {"start", "end", "globalTid"},
                  {"correlationId", "nameId", "name"});
    std::unordered_map<std::int64_t, std::uint32_t> name_of_id;
    while (r.next()) {
      auto start = r.integer(0), end = r.integer(1), gtid = r.integer(2);
      if (!start || !end || !gtid || *end < *start) {
        ++skipped_api_;
        continue;
      }
      ApiCall c{process_key(*gtid), tid_of(*gtid), *start, *end, r.integer_or(3, -1), 0};
      if (!r.is_null(5)) {
        c.name = builder_.name(r.text(5));  // schema 2.x carries a name column (usually NULL)
      } else if (auto id = r.integer(4)) {
        auto it = name_of_id.find(*id);
        if (it == name_of_id.end()) {
          const std::string* s = string_id(id);
          it = name_of_id.emplace(*id, builder_.name(s ? std::string_view(*s) : "CUDA API")).first;
        }
        c.name = it->second;
      } else {
        c.name = builder_.name("CUDA API");
      }
      ranks_in_.host_processes.insert(c.process);
      api_.push_back(c);
    }
  }

  void read_nvtx() {
    if (!schema_.has_table(kNvtx)) return;
    TableReader r(schema_, kNvtx, {"start", "eventType", "globalTid"},
                  {"end", "text", "textId", "domainId"});
    std::unordered_map<std::int64_t, std::uint32_t> name_of_text_id;
    while (r.next()) {
      const std::int64_t type = r.integer_or(1, -1);
      auto gtid = r.integer(2);
      std::string_view text;
      bool have_text = !r.is_null(4);
      if (have_text) text = r.text(4);
      if (type == kNvtxDomainCreate || type == kNvtxThreadName) {
        if (!have_text) {
          const std::string* s = string_id(r.integer(5));
          if (s) text = *s, have_text = true;
        }
        if (!have_text) continue;
        if (type == kNvtxDomainCreate) domain_names_[r.integer_or(6, 0)] = std::string(text);
        if (type == kNvtxThreadName && gtid) name_thread(*gtid, text);
        continue;
      }
      if (type != kNvtxPushPop && type != kNvtxStartEnd) continue;
      auto start = r.integer(0), end = r.integer(3);
      if (!start || !end || !gtid || *end < *start) {
        ++skipped_nvtx_;
        continue;
      }
      NvtxRange range{process_key(*gtid), tid_of(*gtid), *start, *end, 0, NcclCall::None};
      if (have_text) {
        range.name = builder_.name(text);
        range.nccl = nccl_call_of(text);
      } else if (auto id = r.integer(5)) {
        auto it = name_of_text_id.find(*id);
        if (it == name_of_text_id.end()) {
          const std::string* s = string_id(id);
          it = name_of_text_id.emplace(*id, builder_.name(s ? std::string_view(*s) : "")).first;
        }
        range.name = it->second;
        range.nccl = nccl_call_of(builder_.trace().names[range.name]);
      }
      range_domains_.push_back(r.integer_or(6, 0));
      ranks_in_.host_processes.insert(range.process);
      nvtx_.push_back(range);
    }
  }

  void read_mpi_ranks() {
    if (!schema_.has_table("MPI_RANKS")) return;
    TableReader r(schema_, "MPI_RANKS", {"globalTid", "rank"}, {});
    while (r.next()) {
      auto gtid = r.integer(0), rank = r.integer(1);
      if (gtid && rank && *rank >= 0 && *rank <= INT32_MAX)
        ranks_in_.explicit_ranks[process_key(*gtid)] = {static_cast<std::int32_t>(*rank),
                                                        "MPI_RANKS"};
    }
  }

  void read_gpus() {
    if (!schema_.has_table("TARGET_INFO_GPU")) return;
    TableReader r(schema_, "TARGET_INFO_GPU", {"id"}, {"name", "totalMemory", "smCount"});
    while (r.next()) {
      ImportedGpu g;
      g.id = static_cast<std::int32_t>(r.integer_or(0, 0));
      g.name = std::string(r.text(1));
      g.total_memory_bytes = r.integer_or(2, 0);
      g.sm_count = static_cast<std::int32_t>(r.integer_or(3, 0));
      out_.gpus.push_back(std::move(g));
    }
  }

  // CUDA memory-usage tracing (nsys --cuda-memory-usage=true): each allocation and free on a
  // device, in bytes. The running total per process is the memory cudaMalloc holds (for PyTorch,
  // the caching allocator's reserved memory), stored as the rank's unattributed memory.
  void read_memory_usage() {
    constexpr std::string_view table = "CUDA_GPU_MEMORY_USAGE_EVENTS";
    if (!schema_.has_table(table)) return;
    TableReader r(schema_, table, {"start", "globalPid", "bytes"}, {"memoryOperationType"});
    while (r.next()) {
      auto start = r.integer(0), gpid = r.integer(1), bytes = r.integer(2);
      if (!start || !gpid || !bytes || *bytes < 0 || *bytes > (std::int64_t{1} << 50)) {
        ++skipped_memory_;
        continue;
      }
      const std::int64_t op = r.integer_or(3, 0);  // ENUM_CUDA_DEV_MEM_EVENT_OPER: 0 alloc, 1 free
      memory_.push_back({process_key(*gpid), *start, op == 1 ? -*bytes : *bytes});
    }
    std::stable_sort(memory_.begin(), memory_.end(),
                     [](const MemoryEvent& a, const MemoryEvent& b) { return a.t_ns < b.t_ns; });
  }

  std::int32_t host_lane(std::int32_t rank, std::int64_t process, std::int32_t tid) {
    const std::int32_t lane = builder_.lane(rank, Stream::Host, tid);
    if (named_lanes_.insert(lane).second) {
      std::string name = "rank " + std::to_string(rank) + " host " + std::to_string(tid);
      auto it = thread_names_.find(process | tid);
      if (it != thread_names_.end()) name += " (" + it->second + ")";
      builder_.set_lane_name(lane, std::move(name));
    }
    return lane;
  }

  // torchrun: a capture holds one node's workers; ranks found by device or PID order are their
  // local ranks, so global ranks start at node_rank * nproc_per_node. Said either way.
  void apply_launch(std::map<std::int64_t, std::int32_t>& rank_of) {
    if (!launch_) return;
    const LaunchCommand& l = *launch_;
    std::string said = "launched by " + l.text;
    if (l.world_size) said += ": world size " + std::to_string(*l.world_size);
    out_.launch = l.text;
    out_.launch_world_size = l.world_size.value_or(0);
    const bool implicit = std::all_of(out_.ranks.begin(), out_.ranks.end(),
                                      [](const ImportedRank& r) { return r.ordered; });
    if (l.launcher == "torchrun" && l.processes_per_node) {
      const auto here = static_cast<std::int32_t>(out_.ranks.size());
      if (here != *l.processes_per_node)
        said += "; torchrun started " + std::to_string(*l.processes_per_node) +
                " workers per node, the capture holds " + std::to_string(here);
      const std::int32_t offset = l.node_rank.value_or(0) * *l.processes_per_node;
      if (implicit) {
        for (auto& [process, rank] : rank_of) rank += offset;
        for (ImportedRank& r : out_.ranks) {
          r.rank += offset;
          r.source += "; torchrun local rank " + std::to_string(r.rank - offset) + " of node " +
                      std::to_string(l.node_rank.value_or(0));
        }
      }
    } else if (l.world_size && static_cast<std::int32_t>(out_.ranks.size()) != *l.world_size) {
      said += "; the capture holds " + std::to_string(out_.ranks.size()) + " of them";
    }
    warn(std::move(said));
  }

  // What emitting left out or could only guess, for the warnings.
  struct EmitCounts {
    std::int64_t unclassified_nccl = 0, sendrecv_without_evidence = 0, dropped_api = 0,
                 dropped_nvtx = 0, dropped_memory = 0;
    bool stream_shared = false;
  };

  void emit() {
    auto rank_of = assign_ranks(ranks_in_, out_.ranks, out_.warnings);
    apply_launch(rank_of);
    EmitCounts counts;
    emit_gpu_activity(rank_of, counts);
    emit_api_calls(rank_of, counts);
    emit_nvtx_ranges(rank_of, counts);
    emit_memory(rank_of, counts);
    warn_left_out(counts);
    builder_.finish(out_);
  }

  // Kernels, copies and memsets on their rank's GPU stream lanes; SendRecv kernels get their
  // direction from the NCCL calls that launched them.
  void emit_gpu_activity(const std::map<std::int64_t, std::int32_t>& rank_of, EmitCounts& counts) {
    const SendRecvDirections directions(gpu_, api_, nvtx_, range_domains_, domain_names_);
    std::map<std::pair<std::int32_t, std::int32_t>, std::int32_t> stream_device;
    for (GpuActivity& a : gpu_) {
      const std::int32_t rank = rank_of.at(a.process);
      a.record.rank = rank;
      SpanKind kind = a.kind;
      if (a.nccl == profiler::NcclKernel::SendRecv) {
        if (!directions.has_launch(a)) ++counts.sendrecv_without_evidence;
        kind = directions.direction(a);
      }
      if (a.nccl == profiler::NcclKernel::Reduce || a.nccl == profiler::NcclKernel::Unknown)
        ++counts.unclassified_nccl;
      auto [it, fresh] = stream_device.emplace(std::pair(rank, a.record.stream), a.record.device);
      counts.stream_shared = counts.stream_shared || (!fresh && it->second != a.record.device);
      Span s;
      s.lane = builder_.lane(rank, Stream::Gpu, a.record.stream);
      s.kind = kind;
      s.start_ns = a.record.start_ns;
      s.end_ns = a.record.end_ns;
      s.name = a.span_name;
      builder_.add_gpu_span(s, std::move(a.record));
    }
    gpu_.clear();
  }

  // CUDA API calls on their thread's host lane, each noted as the launch of its correlation id.
  void emit_api_calls(const std::map<std::int64_t, std::int32_t>& rank_of, EmitCounts& counts) {
    for (const ApiCall& c : api_) {
      auto r = rank_of.find(c.process);
      if (r == rank_of.end()) {
        ++counts.dropped_api;
        continue;
      }
      Span s;
      s.lane = host_lane(r->second, c.process, c.tid);
      builder_.add_launch(r->second, c.correlation, s.lane, c.start_ns);
      s.kind = SpanKind::Runtime;
      s.start_ns = c.start_ns;
      s.end_ns = c.end_ns;
      s.name = c.name;
      builder_.add_span(s);
    }
  }

  // NVTX ranges on their thread's host lane: a pipeline phase's name gives its span kind and
  // micro-batch, any other is a range.
  void emit_nvtx_ranges(const std::map<std::int64_t, std::int32_t>& rank_of, EmitCounts& counts) {
    std::unordered_map<std::uint32_t, std::optional<PipelinePhase>> phase_of_name;
    for (const NvtxRange& n : nvtx_) {
      auto r = rank_of.find(n.process);
      if (r == rank_of.end()) {
        ++counts.dropped_nvtx;
        continue;
      }
      auto ph = phase_of_name.find(n.name);
      if (ph == phase_of_name.end())
        ph = phase_of_name.emplace(n.name, match_pipeline_phase(builder_.trace().names[n.name]))
                 .first;
      Span s;
      s.lane = host_lane(r->second, n.process, n.tid);
      s.kind = ph->second ? ph->second->kind : SpanKind::Range;
      if (ph->second) s.microbatch = ph->second->microbatch;
      s.start_ns = n.start_ns;
      s.end_ns = n.end_ns;
      s.name = n.name;
      builder_.add_span(s);
    }
  }

  // CUDA memory usage as each rank's bytes held over time.
  void emit_memory(const std::map<std::int64_t, std::int32_t>& rank_of, EmitCounts& counts) {
    std::map<std::int64_t, std::int64_t> held;  // process -> bytes allocated
    for (const MemoryEvent& m : memory_) {
      auto r = rank_of.find(m.process);
      if (r == rank_of.end()) {
        ++counts.dropped_memory;
        continue;
      }
      std::int64_t& total = held[m.process];
      total = std::max<std::int64_t>(0, total + m.delta);  // a free of memory allocated earlier
      builder_.trace().memory.push_back(
          profiler::MemorySample{r->second, profiler::MemoryCategory::Unattributed, m.t_ns, total});
    }
  }

  // One warning for each kind of row skipped, dropped or guessed at.
  void warn_left_out(const EmitCounts& counts) {
    if (skipped_memory_ > 0)
      warn(plural(skipped_memory_, "CUDA memory-usage rows") +
           " without time, process or a byte count: skipped");
    if (counts.dropped_memory > 0)
      warn(plural(counts.dropped_memory, "CUDA memory-usage events") +
           " of processes that are not ranks: skipped");
    if (counts.unclassified_nccl > 0)
      warn(plural(counts.unclassified_nccl, "NCCL kernels") +
           " of a collective with no span kind (Reduce or unknown) kept as kernel spans");
    if (counts.sendrecv_without_evidence > 0)
      warn(plural(counts.sendrecv_without_evidence, "NCCL SendRecv kernels") +
           " without their launching CUDA call in the capture: kind send");
    if (counts.stream_shared)
      warn("a rank uses the same CUDA stream id on several devices: their work shares a lane");
    if (skipped_gpu_ > 0)
      warn(plural(skipped_gpu_, "GPU activity rows") +
           " without start, end or process, or ending before they start: skipped");
    if (skipped_api_ > 0)
      warn(plural(skipped_api_, "CUDA API rows") + " without times or thread: skipped");
    if (skipped_nvtx_ > 0)
      warn(plural(skipped_nvtx_, "NVTX ranges") + " without an end or a thread: skipped");
    if (counts.dropped_api > 0)
      warn(plural(counts.dropped_api, "CUDA API calls") +
           " of processes that are not ranks: skipped");
    if (counts.dropped_nvtx > 0)
      warn(plural(counts.dropped_nvtx, "NVTX ranges") +
           " of processes that are not ranks: skipped");
    if (missing_strings_ > 0)
      warn(plural(missing_strings_, "string ids") + " not in StringIds: names left generic");
  }

  std::string file_;
  ReadOnlyDatabase db_;
  NsysSchema schema_;
  ImportedTraceBuilder builder_;
  ImportedProfile out_;

  std::unordered_map<std::int64_t, std::string> strings_;
  std::unordered_map<std::int64_t, std::string> memcpy_labels_;
  std::unordered_map<std::int64_t, std::string> thread_names_;  // globalTid -> name
  std::unordered_map<std::int64_t, std::string> domain_names_;  // domainId -> name
  RankInputs ranks_in_;
  std::optional<LaunchCommand> launch_;
  std::vector<GpuActivity> gpu_;
  std::vector<ApiCall> api_;
  std::vector<NvtxRange> nvtx_;
  std::vector<std::int64_t> range_domains_;  // domainId per nvtx_ entry
  std::unordered_set<std::int32_t> named_lanes_;

  struct MemoryEvent {
    std::int64_t process = 0;
    std::int64_t t_ns = 0;
    std::int64_t delta = 0;  // bytes allocated (> 0) or freed (< 0)
  };
  std::vector<MemoryEvent> memory_;

  std::int64_t skipped_gpu_ = 0, skipped_api_ = 0, skipped_nvtx_ = 0, missing_strings_ = 0,
               skipped_memory_ = 0;
};

}  // namespace

ImportedProfile import_nsys_sqlite(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) throw InputError(file.string() + ": no such file");
  if (!std::filesystem::is_regular_file(file, ec))
    throw InputError(file.string() + ": not a regular file");
  return NsysImport(file).run();
}

}  // namespace pipetune::db
