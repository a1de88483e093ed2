// Training runs of the embedded engine: a virtual cluster of tp * pp * dp rank threads trains
// the model of a ModelSpec with a ParallelPlan, every rank executing its op list of the plan's
// Schedule. The parallel run computes the same numbers as the 1-rank run (up to the order of
// floating-point sums): tests/engine/runtime checks it for every axis of the plan.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/runtime/injected_fault.hpp"
#include "engine/schedule/schedule.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "engine/tensor/backend.hpp"
#include "engine/tensor/tensor.hpp"
#include "profiler/gpu/gpu_capture.hpp"
#include "profiler/gpu/kernel_record.hpp"
#include "profiler/trace.hpp"

namespace pipetune::comm {
class Communicator;
}
namespace pipetune::tensor {
class DeviceAllocator;
}

namespace pipetune::runtime {

// Where one rank computes: its backend, the storage its tensors live in and the communicator it
// talks through. The default is the CPU: a CpuBackend, host memory and the rank's own
// communicator. A GPU rank (engine/cuda/cuda_rank_device.hpp) has a CudaBackend on its own stream,
// a device allocator and a communicator that stages device spans.
class RankDevice {
 public:
  virtual ~RankDevice() = default;
  virtual tensor::Backend& backend() = 0;
  // The rank's device storage, or null for host memory.
  virtual tensor::DeviceAllocator* storage() = 0;
  virtual comm::Communicator& communicator() = 0;

  // GPU activity capture (CUPTI on a CUDA rank). Called once on the rank's thread before its
  // first step with the run's clock epoch (the recorders'); false when the device has no
  // activity to capture (the CPU) or capture is unavailable.
  virtual bool start_gpu_capture(std::chrono::steady_clock::time_point /*epoch*/) { return false; }
  // After a step: waits for the rank's device work, then returns what its device did since the
  // last take (its kernels, copies and memsets with the calls that launched them).
  struct GpuActivity {
    profiler::GpuCapture capture;
    std::int64_t clock_offset_ns = 0;  // engine time = capture time + clock_offset_ns
    // The profiler's flushes this take made, and how many of them were forced (they hand over
    // other ranks' running work without its times): 0 when another rank's flush served.
    std::size_t flushes = 0;
    std::size_t forced_flushes = 0;
    // The take's host time: its flushes (the profiler handing over its buffers, and their records
    // read), and the routing of what came to the ranks. What capture adds to a step's end.
    std::int64_t flush_ns = 0;
    std::int64_t route_ns = 0;
    // The host time of the flush that handed this take's records over, this take's or, when
    // another rank's flush served, that one's: what a take costs the process, whoever pays it
    // (the trainer weighs it against its steps to choose how often to take, CaptureCadence).
    std::int64_t serving_flush_ns = 0;
    // Launch calls left waiting for their device record after this take (across the process's
    // ranks): work still running, or calls whose record never comes and that are kept until
    // they age out. A count that grows step after step means the latter.
    std::size_t waiting_launch_calls = 0;
  };
  virtual GpuActivity take_gpu_activity() { return {}; }

  // Overlapped pairs (schedule::Op::overlaps_previous: DualPipeV's "F & B"). A device that can run
  // two ops of its rank at once (a GPU rank: a second stream) returns true, and the rank's runtime
  // then calls begin_pair() before the pair's first op, second_of_pair() between the two ops and
  // end_pair() after the second. The device orders the second op after the work issued before the
  // first (not after the first), and what follows the pair after both. The two ops share no
  // buffers: they are of different chunks (layers) and micro-batches. False (the CPU): the pair's
  // ops run one after the other on the rank's one stream of work.
  virtual bool overlaps_pairs() const { return false; }
  virtual void begin_pair() {}
  virtual void second_of_pair() {}
  virtual void end_pair() {}
};

// Makes a rank's device on that rank's thread, from the communicator the run gives it and the
// compute threads per rank. Exceptions fail the run like any rank failure.
using RankDeviceFactory =
    std::function<std::unique_ptr<RankDevice>(comm::Communicator& comm, int threads_per_rank)>;

// The CPU rank: CpuBackend with `threads_per_rank` threads, host memory, `comm` itself.
std::unique_ptr<RankDevice> make_cpu_rank_device(comm::Communicator& comm, int threads_per_rank);

// Beyond this many rank threads a run is almost surely a typo (each rank is a thread here).
inline constexpr int kMaxTrainRanks = 256;

struct TrainOptions {
  spec::ModelSpec model;
  spec::ParallelPlan plan;
  // The schedule to execute, op for op: what `simulate` and `predict` simulate for this plan
  // (spec::plan_schedule with the cost model's op costs). Empty: spec::plan_schedule with unit
  // costs. Must match the plan (name, stages, micro-batches, chunks, vocabulary mode).
  std::optional<schedule::Schedule> schedule;
  int steps = 20;             // total iterations (a resumed run continues up to this count)
  std::uint64_t seed = 1234;  // parameter initialisation and the synthetic corpus
  tensor::AdamWConfig adamw{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  float grad_clip = 1.0f;        // global-norm clipping; <= 0 disables it
  double capacity_factor = 0.0;  // MoE expert capacity; <= 0: no token dropping
  float aux_loss_coef = 0.01f;   // MoE load-balancing loss weight
  std::string data_shards;       // llm.c token shards (glob patterns); empty = synthetic corpus
  std::string checkpoint_dir;    // write a checkpoint here (at the end, and every N steps)
  int checkpoint_every = 0;
  std::string resume_dir;           // resume from this checkpoint
  bool capture_gradients = false;   // TrainResult::first_step_gradients
  bool capture_parameters = false;  // TrainResult::final_parameters
  // Start from these full-model tensors (by parameter name, as in final_parameters) instead of
  // the seeded initialisation; tensors not named keep their initial values.
  const std::map<std::string, tensor::Tensor>* initial_parameters = nullptr;
  bool record_trace = false;        // TrainResult::trace: spans and memory of every rank
  double watchdog_seconds = 300.0;  // a collective waiting longer fails the run
  int threads_per_rank = 0;         // compute threads per rank; 0 = cores / world, at least 1
  // Layered reduction's R ops on a thread of each rank's own where the run allows it
  // (RankSummary::reductions_overlapped); false keeps them on the rank's thread, to compare.
  bool overlap_reductions = true;
  // The two ops of an overlapped pair run at once where the rank's device can (a GPU rank: the
  // second on a stream of its own, RankDevice::overlaps_pairs); false runs them one after the
  // other on every device, to compare.
  bool overlap_pairs = true;
  // The attention kernel every rank's blocks run; unset: the backend's default (stored on the
  // CPU, flash on CUDA; tensor::AttentionKernel).
  std::optional<tensor::AttentionKernel> attention;
  // Freed activation buffers each rank keeps for reuse (model::BufferCache), in bytes: host
  // memory, and device memory (a GPU rank; no limit by default, see buffer_cache.hpp).
  std::size_t buffer_cache_bytes = std::size_t{2} << 30;
  std::size_t device_buffer_cache_bytes = std::numeric_limits<std::size_t>::max();
  // Called on rank 0's thread after each step, once rank 0 has handed the step's records to
  // trace_sink (with processes: every rank's).
  std::function<void(const struct StepResult&)> on_step;
  // Streams the run's records: called on every rank's thread after each of its steps with what
  // the rank recorded in that step (spans, memory samples, counters; rank 0's part also carries
  // the step's StepMetric). Called concurrently from several ranks: it must be thread-safe. An
  // exception from it fails the run like any other rank failure.
  std::function<void(profiler::Trace)> trace_sink;
  // Capture each rank's GPU activity (when its device has any: RankDevice::start_gpu_capture)
  // into the run's trace as GPU lanes under the ops that launched it, with kernel_sink getting
  // the kernels' details (what the workspace's kernels table keeps). Off: NVTX ranges only.
  bool capture_gpu_activity = true;
  // Take the GPU activity at every Nth step end (and at the run's last step and each checkpoint
  // step; a rank that fails takes what its streamed steps launched since): each take flushes
  // CUPTI, which cost about 0.4 ms on an H100 whatever it handed over, so N > 1 spreads that over
  // N steps. The records of the steps between join the trace at the take, each attributed to
  // the op of its own step that launched it. 0 (auto): each rank takes at its first step end,
  // then as rarely as keeps the takes within gpu_capture_budget of its steps' time, from what
  // its latest take cost (at most every CaptureCadence::kMostStepsPerTake steps). Negative:
  // InputError.
  int gpu_capture_every = 0;
  double gpu_capture_budget = 0.01;  // in (0, 1), else InputError
  // Called after trace_sink with the kernels of the GPU activity added to that trace part, on
  // the same thread (with processes: on rank 0's process, for every rank); thread-safe like
  // trace_sink. May be null.
  std::function<void(std::vector<profiler::KernelRecord>)> kernel_sink;
  // A stop request (from another thread, e.g. a GUI's Stop button): read by rank 0 before each
  // step's final reduction; the run then ends cleanly after that step, every rank at the same
  // step, and TrainResult::stopped is set. Null: run all steps.
  const std::atomic<bool>* stop = nullptr;
  // A fault to inject (`train --fault`, injected_fault.hpp): for checking that failures end the
  // run cleanly. Unset in every real run.
  std::optional<InjectedFault> fault;
  // Where the ranks compute (`train --backend`): null for the CPU (make_cpu_rank_device). The
  // CLI sets engine/cuda's single-GPU factory for `--backend cuda`.
  RankDeviceFactory rank_device;
  // The memory of the device the ranks' state lives on, when it is not this machine's memory
  // (single-GPU mode: every rank on one device): the run is refused before anything is
  // allocated when the model's weights, gradients and Adam state cannot fit in it.
  struct DeviceMemory {
    std::string name;  // "GPU 0 (NVIDIA H100 80GB HBM3)"
    std::int64_t bytes = 0;
  };
  std::optional<DeviceMemory> device_memory;

  // Ranks as processes (mpirun / srun): this process runs its ranks of the run (one, or K as
  // threads in a hybrid run), each over its own communicator; the other ranks are other
  // processes started with the same options. Rank 0's process gets the run's summary (steps,
  // per-rank compute and memory) and its trace_sink every rank's parts (every process must set
  // one, or none). Unset: every rank is a thread of this process. Checkpoints are written by
  // rank 0's process and read by each process for its ranks (a shared directory). Not yet with
  // record_trace or captures (InputError).
  struct Processes {
    // This process's ranks, one communicator each (its rank() is the global rank); each
    // declares every group of the plan's topology.
    std::vector<comm::Communicator*> ranks;
    // Collective over every rank of the run, called on each rank's thread with its
    // communicator: every rank's bytes, in rank order, on rank 0 (empty elsewhere).
    std::function<std::vector<std::string>(comm::Communicator&, const std::string&)> gather_to_root;
    // Told of a rank's failure on its thread, so that the process's other ranks stop waiting
    // for it (hybrid runs); may be null.
    std::function<void(int rank, const std::string& reason)> on_rank_failure;
  };
  std::optional<Processes> processes;
};

struct StepResult {
  int step = 0;            // from 1
  double loss = 0.0;       // mean cross-entropy over the global batch
  double aux_loss = 0.0;   // MoE load-balancing loss (coefficient included)
  double grad_norm = 0.0;  // before clipping
  // Wall time of the step, steps timed back to back: from the end of the previous step's
  // optimizer step (the step's own start for the first) to the end of its own. So a step end's
  // work (the GPU capture's flush and attribution, the parts handed to trace_sink, on_step)
  // counts in the next step; writing a checkpoint counts nowhere.
  double seconds = 0.0;
  double tokens_per_s = 0.0;
};

// One rank as measured over the last step: time inside its ops against the pipeline's
// iteration time (first op start to last op end over all ranks), and its memory.
struct RankSummary {
  int rank = 0;
  int pp_rank = 0, tp_rank = 0, dp_rank = 0;
  double compute_seconds = 0.0;  // inside F/B/W/BW/S/T/IF/IB ops
  double bubble_seconds = 0.0;   // iteration time minus compute
  double bubble_ratio = 0.0;
  std::int64_t parameter_bytes = 0;
  std::int64_t gradient_bytes = 0;
  std::int64_t optimizer_bytes = 0;
  std::int64_t peak_activation_bytes = 0;  // activations and kept gradients, all steps
  // With offload_activations: the most activation bytes held in host memory at once, all steps.
  std::int64_t peak_offloaded_bytes = 0;
  // With offload_optimizer: the optimizer state held in host memory (optimizer_bytes is then 0).
  std::int64_t offloaded_optimizer_bytes = 0;
  // Layered gradient reduction: the R ops ran on a thread of their own, overlapping the ops after
  // them (host-memory ranks of a threads run); false when they ran on the rank's thread.
  bool reductions_overlapped = false;
  // Chunked MoE all-to-all (moe_chunks): the chunks ran on that thread beside the experts' GEMMs;
  // false when they ran in place.
  bool moe_all_to_all_overlapped = false;
  // Overlapped pairs whose two ops ran at once on the rank's device (a GPU rank's two streams),
  // over the whole run; 0 where pairs ran one op after the other.
  std::int64_t pairs_run_at_once = 0;
};

struct TrainResult {
  std::vector<StepResult> steps;  // the steps this run executed
  int first_step = 1;             // > 1 when resumed
  std::int64_t tokens_per_step = 0;
  std::vector<RankSummary> ranks;  // by global rank
  double iteration_seconds = 0.0;  // last step, pipeline schedule only (no optimizer)
  // Full-model tensors by parameter name ("h.3.attn.qkv.w"), gathered from every rank's shard.
  std::map<std::string, tensor::Tensor> first_step_gradients;  // reduced, before clipping
  std::map<std::string, tensor::Tensor> final_parameters;
  profiler::Trace trace;
  std::string schedule;  // the generated schedule's name
  int chunks = 1;        // layer groups per pipeline rank
  int microbatches = 1;
  bool stopped = false;  // ended early on TrainOptions::stop
  // Adaptive expert layouts (spec::ExpertLayout::Adaptive over tp > 1): each such MoE layer's
  // trial, its passes' seconds summed over the ranks holding it (the run's first step sharded,
  // its second deduplicated) and the way it computed the rest of the run. Empty when the run
  // had none, or ran fewer than two steps (the layers then stayed sharded).
  struct ExpertLayoutChoice {
    std::int64_t layer = 0;  // in the model
    double sharded_seconds = 0.0, dedup_seconds = 0.0;
    spec::ExpertLayout chosen = spec::ExpertLayout::Sharded;
  };
  std::vector<ExpertLayoutChoice> expert_layout_choices;
  // With record_trace and GPU capture: the kernels of trace's GPU lanes, in the lanes' order.
  std::vector<profiler::KernelRecord> kernels;
  struct GpuCaptureCounts {
    std::size_t activities = 0;      // kernels, copies and memsets captured on the ranks' devices
    std::size_t attributed = 0;      // launched inside one of the rank's ops
    std::size_t outside_ops = 0;     // launched between ops (the optimizer, checkpoints)
    std::size_t without_launch = 0;  // whose launch call was not captured
    std::size_t flushes = 0;         // step-end flushes of the capture (this process's ranks)
    std::size_t forced_flushes = 0;  // of which forced (RankDevice::GpuActivity)
    std::int64_t flush_ns = 0;       // host time of those flushes, summed over takes
    std::int64_t route_ns = 0;       // host time of routing the records, summed
    std::size_t waiting_launch_calls = 0;  // the most left waiting after a take
    std::size_t takes = 0;                 // step ends at which the ranks took (summed)
    int most_steps_per_take = 0;           // the most step ends one take covered
  };
  GpuCaptureCounts gpu_capture;  // all zero without GPU capture
};

// Throws InputError (bad plan, spec, data or checkpoint) or a runtime error (a failed rank, a
// non-finite loss naming step and rank, a failed checkpoint write).
TrainResult train(const TrainOptions& options);

// Mean tokens/s over the steps after the first (which pays for warming caches and pools); the
// one step's when there is only one. What `train` and the GUI report and store.
double steady_tokens_per_s(const TrainResult& result);

// Raises the InputError train() would raise for these options, without training.
void check_train_options(const TrainOptions& options);

// The plan text stored in checkpoints and compared on resume.
std::string describe_plan(const spec::ParallelPlan& plan);

}  // namespace pipetune::runtime
