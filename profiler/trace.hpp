// Trace: what happened (or what the simulator predicts will happen). Three producers make the
// same Trace: the simulator, the engine's profiler and importers; analyses work on any of them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pipetune::profiler {

enum class TraceKind : std::uint8_t { Simulated, Measured, Imported };

// A rank has several streams; each (rank, stream, index) is one lane of the timeline.
enum class Stream : std::uint8_t {
  Compute,  // forward/backward/vocabulary passes
  Comm,     // collectives (vocabulary barriers, DP/TP/EP collectives)
  P2P,      // point-to-point sends between pipeline stages
  Gpu,      // a device stream of an imported profile (Lane::index = CUDA stream id)
  Host,     // a host thread of an imported profile: CUDA API calls, NVTX ranges (index = tid)
  Offload,  // copies between a rank's device and host memory (activation offload, KARMA)
};
inline constexpr int kStreamCount = 6;
std::string_view stream_name(Stream s);
// Inverse of stream_name; false when `name` is none of them.
bool parse_stream(std::string_view name, Stream& out);

// What a span is. The first eight mirror the schedule op kinds (same order). Values are stored
// by name (span_kind_name), never by number, so new kinds may be added anywhere before Other.
enum class SpanKind : std::uint8_t {
  F,
  B,
  W,
  BW,
  S,
  T,
  IF,
  IB,
  Send,
  AllReduce,
  Broadcast,
  Recv,  // point-to-point receive (peer = source rank)
  AllGather,
  ReduceScatter,
  AllToAll,
  Barrier,
  Offload,  // a micro-batch's activations copied to host memory after its forward
  Reload,   // ... and copied back before its backward
  Kernel,   // an imported GPU kernel that is not a collective
  Memcpy,   // imported GPU copy
  Memset,   // imported GPU memset
  Runtime,  // imported CUDA runtime / driver API call (host)
  Range,    // an annotation range (NVTX) that is not a pipeline phase
  Other,
};
inline constexpr int kSpanKindCount = static_cast<int>(SpanKind::Other) + 1;
std::string_view span_kind_name(SpanKind k);
// Inverse of span_kind_name; false when `name` is none of them.
bool parse_span_kind(std::string_view name, SpanKind& out);
// Pipeline compute: F, B, W, BW, S, T, IF, IB.
bool is_compute(SpanKind k);
// Data movement between ranks: Send, Recv and the collectives (Barrier included).
bool is_communication(SpanKind k);

enum class MemoryCategory : std::uint8_t {
  Parameters,
  Gradients,
  OptimizerState,
  Activations,
  Temporaries,
  VocabularyLayers,
  // Device memory a profiler reports without saying what it holds (an imported profile: PyTorch
  // Kineto's "[memory]" allocated total, nsys's CUDA memory-usage allocations).
  Unattributed,
};
inline constexpr int kMemoryCategoryCount = 7;
std::string_view memory_category_name(MemoryCategory c);
// Inverse of memory_category_name; false when `name` is none of them.
bool parse_memory_category(std::string_view name, MemoryCategory& out);

struct Lane {
  std::int32_t rank = 0;
  Stream stream = Stream::Compute;
  std::string name;        // "rank 3 compute"
  std::int32_t index = 0;  // tells apart lanes of one (rank, stream): GPU stream id, thread id
};

struct Span {
  std::int32_t lane = 0;  // index into Trace::lanes
  SpanKind kind = SpanKind::Other;
  std::int16_t chunk = -1;       // -1 when not applicable
  std::int32_t microbatch = -1;  // -1 when not applicable
  std::int32_t peer = -1;        // Send: destination rank; Recv: source rank
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::uint32_t name = 0;  // index into Trace::names; 0 = derive from kind/mb/chunk
};

// Bytes in use on a rank for one category from t_ns on (a step function).
struct MemorySample {
  std::int32_t rank = 0;
  MemoryCategory category = MemoryCategory::Activations;
  std::int64_t t_ns = 0;
  std::int64_t bytes = 0;
};

// A named numeric series per rank (for example activations held, in micro-batches).
struct CounterSample {
  std::int32_t rank = 0;
  std::uint32_t name = 0;  // index into Trace::names
  std::int64_t t_ns = 0;
  double value = 0.0;
};

struct StepMetric {
  std::int32_t step = 0;
  std::int64_t t_ns = 0;
  double loss = 0.0;
  double tokens_per_s = 0.0;
};

struct Trace {
  TraceKind kind = TraceKind::Simulated;
  std::vector<Lane> lanes;
  std::vector<Span> spans;
  std::vector<MemorySample> memory;
  std::vector<CounterSample> counters;
  std::vector<StepMetric> steps;
  std::vector<std::string> names{""};  // names[0] is the empty name
  // Each rank's ops called their communication themselves (its non-GPU lanes were one thread),
  // so communication nested in an op is time the op waited (analysis NestedComm::Wait). Implied
  // by TraceKind::Measured; set on an import of such a trace (pipetune's own Chrome export).
  bool ops_wait_for_nested_comm = false;

  // Index of the (rank, stream, index) lane, created on first use.
  std::int32_t lane(std::int32_t rank, Stream stream, std::int32_t index = 0);
  std::uint32_t intern(std::string name);
  // "F3.1" style label: kind, micro-batch and chunk when present, or the interned name.
  std::string span_label(const Span& s) const;
  // Whether any lane is a GPU stream (the run captured or imported GPU activity).
  bool has_gpu_lanes() const;
  // Whether communication nested in an op was that op's wait: a measured trace, or one marked
  // ops_wait_for_nested_comm.
  bool nested_comm_is_wait() const {
    return kind == TraceKind::Measured || ops_wait_for_nested_comm;
  }
};

}  // namespace pipetune::profiler
