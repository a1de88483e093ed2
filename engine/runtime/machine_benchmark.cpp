#include "engine/runtime/machine_benchmark.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/comm/thread_cluster.hpp"
#include "engine/errors.hpp"
#include "engine/tensor/cpu/cpu_backend.hpp"
#include "engine/tensor/tensor.hpp"

namespace pipetune::runtime {

namespace {

using Clock = std::chrono::steady_clock;
using tensor::Tensor;

struct GemmShape {
  std::int64_t m, k, n;
};

// What every device measures, in order.
struct Sweep {
  std::vector<GemmShape> gemm;
  std::int64_t attention_batch = 2, attention_heads = 4, attention_head_dim = 64;
  std::vector<std::int64_t> attention_seq;
  std::int64_t add_elements = 0;           // per array; three arrays per device
  std::int64_t ce_rows = 0, ce_vocab = 0;  // cross-entropy logits (rows, vocab)
  std::int64_t transfer_floats = 0;        // the large point-to-point message
  std::int64_t collective_floats = 0;      // a collective's full buffer (rounded to the devices)
};

Sweep make_sweep(bool quick) {
  Sweep s;
  if (quick) {
    s.gemm = {{32, 32, 32}, {128, 128, 128}};
    s.attention_seq = {32, 64};
    s.add_elements = std::int64_t{1} << 20;
    s.ce_rows = 64, s.ce_vocab = 512;
    s.transfer_floats = (std::int64_t{1} << 20) / 4;
    s.collective_floats = (std::int64_t{1} << 20) / 4;
  } else {
    // Products the size of a small GPT's layers on CPU (C = 256..1024, a few hundred tokens).
    s.gemm = {{64, 64, 64},    {128, 128, 128},   {256, 256, 256},   {256, 256, 1024},
              {512, 512, 512}, {512, 1024, 1024}, {1024, 1024, 1024}};
    s.attention_seq = {64, 128, 256, 512};
    s.add_elements = std::int64_t{8} << 20;  // 96 MiB per device over three arrays: beyond cache
    s.ce_rows = 256, s.ce_vocab = 8192;      // a micro-batch of a small GPT's logits
    s.transfer_floats = (std::int64_t{16} << 20) / 4;
    s.collective_floats = (std::int64_t{16} << 20) / 4;  // a few layers' gradients of a small GPT
  }
  return s;
}

// Seconds per call of one device, for each sample; each device writes only its own.
struct DeviceTimes {
  std::vector<double> gemm;
  std::vector<double> attention_forward;
  std::vector<double> attention_backward;
  double add = 0.0;
  double cross_entropy = 0.0;  // local stats + backward, one call each
  double all_reduce = 0.0, all_gather = 0.0, reduce_scatter = 0.0;  // 0 with one device
};

// Restores OpenBLAS's process-wide thread count however measure_machine() leaves.
class BlasThreadsGuard {
 public:
  explicit BlasThreadsGuard(int threads) : previous_(tensor::blas_threads()) {
    tensor::set_blas_threads(threads);
  }
  ~BlasThreadsGuard() { tensor::set_blas_threads(previous_); }
  BlasThreadsGuard(const BlasThreadsGuard&) = delete;
  BlasThreadsGuard& operator=(const BlasThreadsGuard&) = delete;

 private:
  int previous_;
};

// Small nonzero values in [-0.1, 0.1]: no NaN or denormal slows a kernel, and repeated
// accumulation stays far from overflow.
Tensor filled(tensor::Shape shape) {
  Tensor t(shape);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t[i] = static_cast<float>((i * 37) % 101 - 50) / 500.0f;
  return t;
}

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// Times each `call` alone, back to back, until `enough(calls made, seconds since the first)`, and
// returns the median seconds per call: a call the scheduler preempted (one can take longer than
// a whole window on a loaded machine) does not set the figure.
template <class Fn, class Enough>
double median_of_timed_calls(Fn&& call, Enough&& enough) {
  std::vector<double> per_call;
  per_call.reserve(64);
  const auto start = Clock::now();
  auto before = start;
  do {
    call();
    const auto after = Clock::now();
    per_call.push_back(seconds_between(before, after));
    before = after;
  } while (!enough(per_call.size(), seconds_between(start, before)));
  return median_seconds(std::move(per_call));
}

// One warm-up call (first-touch page faults, pool wake-up, BLAS buffers), then all devices start
// together and each repeats the call until `seconds` have passed and at least kMinCalls were made.
template <class Fn>
double time_per_call(comm::Communicator& comm, const comm::ProcessGroup& world, double seconds,
                     Fn&& call) {
  constexpr std::size_t kMinCalls = 5;
  call();
  comm.barrier(world);
  return median_of_timed_calls(call, [&](std::size_t calls, double elapsed) {
    return calls >= kMinCalls && elapsed >= seconds;
  });
}

// time_per_call for a collective: every member must make the same number of calls, so one timed
// call (after the warm-up) sets it from the slowest member's time, agreed by an all-reduce.
template <class Fn>
double time_per_collective(comm::Communicator& comm, const comm::ProcessGroup& world,
                           double seconds, Fn&& call) {
  constexpr std::int64_t kMinCalls = 5, kMaxCalls = 100000;
  call();
  comm.barrier(world);
  const auto before = Clock::now();
  call();
  std::vector<float> slowest(1, static_cast<float>(seconds_between(before, Clock::now())));
  comm.all_reduce(world, slowest, comm::ReduceOp::max);
  const double first = std::max(static_cast<double>(slowest[0]), 1e-9);
  const auto calls = static_cast<std::size_t>(
      std::clamp(static_cast<std::int64_t>(std::ceil(seconds / first)), kMinCalls, kMaxCalls));
  comm.barrier(world);
  return median_of_timed_calls(call, [&](std::size_t made, double) { return made >= calls; });
}

void measure_device(comm::Communicator& comm, const Sweep& sweep, int threads, double seconds,
                    DeviceTimes& out) {
  const comm::ProcessGroup world = comm::make_world_group(comm.world());
  tensor::CpuBackend backend(threads);

  for (const GemmShape& g : sweep.gemm) {
    const Tensor x = filled({g.m, g.k});  // (m, k)
    const Tensor w = filled({g.n, g.k});  // (n, k), Megatron layout (out, in)
    Tensor y({g.m, g.n});                 // (m, n)
    out.gemm.push_back(
        time_per_call(comm, world, seconds, [&] { backend.linear_forward(x, w, {}, y); }));
  }

  const std::int64_t B = sweep.attention_batch, NH = sweep.attention_heads;
  const std::int64_t C = NH * sweep.attention_head_dim;
  for (const std::int64_t T : sweep.attention_seq) {
    const Tensor qkv = filled({B, T, 3 * C});  // (B, T, 3C)
    const Tensor dout = filled({B, T, C});     // (B, T, C)
    Tensor y({B, T, C});                       // (B, T, C)
    Tensor att({B, NH, T, T});                 // (B, NH, T, T)
    Tensor dqkv({B, T, 3 * C});                // (B, T, 3C), accumulates over the calls
    out.attention_forward.push_back(
        time_per_call(comm, world, seconds, [&] { backend.attention_forward(qkv, NH, y, att); }));
    // The backward reads the softmax probabilities the forward just stored, as in training.
    out.attention_backward.push_back(time_per_call(
        comm, world, seconds, [&] { backend.attention_backward_input(dout, qkv, att, NH, dqkv); }));
  }

  const Tensor a = filled({sweep.add_elements});
  const Tensor b = filled({sweep.add_elements});
  Tensor sum({sweep.add_elements});
  out.add = time_per_call(comm, world, seconds, [&] { backend.add(a, b, sum); });

  const std::int64_t N = sweep.ce_rows, V = sweep.ce_vocab;
  const Tensor logits = filled({N, V});  // (N, V)
  std::vector<std::int32_t> targets(static_cast<std::size_t>(N));
  for (std::int64_t n = 0; n < N; ++n)
    targets[static_cast<std::size_t>(n)] = static_cast<std::int32_t>((n * 7919) % V);
  Tensor local_max({N}), local_sum({N}), target_logit({N});  // (N)
  Tensor dlogits({N, V});                                    // (N, V), accumulates
  out.cross_entropy = time_per_call(comm, world, seconds, [&] {
    backend.vocab_ce_local_stats(logits, targets, 0, local_max, local_sum, target_logit);
    backend.vocab_ce_backward(logits, targets, 0, local_max, local_sum,
                              1.0f / static_cast<float>(N), dlogits);
  });

  // The collectives training makes (DP gradients, ZeRO's gathers and scatters) over every device,
  // on a full buffer of collective_floats. The all-reduce's sums double per call and reach inf
  // after about 130 calls: the same speed on x86-64 and AArch64, where only subnormals are slow.
  const int n = comm.world();
  if (n < 2) return;
  const std::int64_t chunk = sweep.collective_floats / n;
  Tensor full = filled({chunk * n});  // (n * chunk)
  Tensor part = filled({chunk});      // (chunk)
  out.all_reduce =
      time_per_collective(comm, world, seconds, [&] { comm.all_reduce(world, full.values()); });
  out.all_gather = time_per_collective(
      comm, world, seconds, [&] { comm.all_gather(world, part.values(), full.values()); });
  out.reduce_scatter = time_per_collective(
      comm, world, seconds, [&] { comm.reduce_scatter(world, full.values(), part.values()); });
}

struct Transfer {
  double latency = 0.0;    // seconds, one way
  double bandwidth = 0.0;  // bytes/s
};

// Two ranks: rank 0 sends, rank 1 answers every message with one float. The first float of
// each message from rank 0 says whether another one follows (1) or this was the last (0), so
// rank 1 needs no count agreed beforehand; the last round is never timed.
Transfer measure_transfer(std::int64_t large_floats, double seconds) {
  constexpr int kSmallTag = 1, kLargeTag = 2;
  constexpr std::size_t kMinRoundTrips = 10;  // a median even when seconds is tiny
  double small_round_trip = 0.0, large_round_trip = 0.0;

  comm::run_threads(2, [&](comm::Communicator& comm) {
    std::vector<float> small(1, 1.0f), reply(1, 1.0f);
    std::vector<float> large = std::move(filled({large_floats}).values());

    if (comm.rank() == 1) {
      for (int tag : {kSmallTag, kLargeTag}) {
        std::vector<float>& in = tag == kSmallTag ? small : large;
        do {
          comm.recv(0, tag, in);
          comm.send(0, tag, reply);
        } while (in[0] != 0.0f);
      }
      return;
    }

    // Rank 0: warm-up round, timed rounds, then the final (untimed) round that stops rank 1.
    const auto ping_pong = [&](int tag, std::vector<float>& message) {
      message[0] = 1.0f;
      comm.send(1, tag, message);
      comm.recv(1, tag, reply);
      const double round_trip = median_of_timed_calls(
          [&] {
            comm.send(1, tag, message);
            comm.recv(1, tag, reply);
          },
          [&](std::size_t rounds, double elapsed) {
            return rounds >= kMinRoundTrips && elapsed >= seconds;
          });
      message[0] = 0.0f;
      comm.send(1, tag, message);
      comm.recv(1, tag, reply);
      return round_trip;
    };
    small_round_trip = ping_pong(kSmallTag, small);
    large_round_trip = ping_pong(kLargeTag, large);
  });

  Transfer t;
  t.latency = small_round_trip / 2.0;
  // A large round trip is latency + bytes / bandwidth one way plus the 1-float reply's latency:
  // subtract the small round trip. Should noise make that non-positive, the whole round trip
  // still gives a lower bound of the bandwidth.
  const double payload_seconds = large_round_trip - small_round_trip;
  const double bytes = static_cast<double>(large_floats) * sizeof(float);
  t.bandwidth = bytes / (payload_seconds > 0.0 ? payload_seconds : large_round_trip);
  return t;
}

std::int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;  // unknown
  return static_cast<std::int64_t>(pages) * static_cast<std::int64_t>(page_size);
}

}  // namespace

double median_seconds(std::vector<double> samples) {
  if (samples.empty()) throw InputError("machine benchmark: median of no samples");
  const std::size_t mid = samples.size() / 2;
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(mid),
                   samples.end());
  const double upper = samples[mid];
  if (samples.size() % 2 == 1) return upper;
  const double lower =
      *std::max_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lower + upper);
}

MachineMeasurements measure_machine(const MachineBenchmarkOptions& options) {
  if (options.devices < 0)
    throw InputError("machine benchmark: devices=" + std::to_string(options.devices) +
                     " must be at least 0 (0 = one per hardware core)");
  if (options.threads_per_device < 1)
    throw InputError("machine benchmark: threads_per_device=" +
                     std::to_string(options.threads_per_device) + " must be at least 1");
  if (!std::isfinite(options.seconds_per_sample) || options.seconds_per_sample <= 0.0)
    throw InputError("machine benchmark: seconds_per_sample=" +
                     std::to_string(options.seconds_per_sample) + " must be positive and finite");

  const int hardware = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int devices =
      options.devices > 0 ? options.devices : std::max(1, hardware / options.threads_per_device);
  const int threads = options.threads_per_device;
  const double seconds = options.seconds_per_sample;
  const Sweep sweep = make_sweep(options.quick);

  MachineMeasurements result;
  result.devices = devices;
  result.threads_per_device = threads;

  {
    // OpenBLAS's thread count is process-wide: set once before the device threads start.
    const BlasThreadsGuard blas(threads);
    std::vector<DeviceTimes> times(static_cast<std::size_t>(devices));
    comm::run_threads(devices, [&](comm::Communicator& comm) {
      measure_device(comm, sweep, threads, seconds, times[static_cast<std::size_t>(comm.rank())]);
    });

    for (std::size_t i = 0; i < sweep.gemm.size(); ++i) {
      GemmSample s;
      s.m = sweep.gemm[i].m;
      s.k = sweep.gemm[i].k;
      s.n = sweep.gemm[i].n;
      for (const DeviceTimes& t : times) s.seconds += t.gemm[i];
      s.seconds /= static_cast<double>(devices);
      result.gemm.push_back(s);
    }
    for (std::size_t i = 0; i < sweep.attention_seq.size(); ++i) {
      AttentionSample s;
      s.batch = sweep.attention_batch;
      s.heads = sweep.attention_heads;
      s.seq = sweep.attention_seq[i];
      s.head_dim = sweep.attention_head_dim;
      for (const DeviceTimes& t : times) {
        s.forward_seconds += t.attention_forward[i];
        s.backward_seconds += t.attention_backward[i];
      }
      s.forward_seconds /= static_cast<double>(devices);
      s.backward_seconds /= static_cast<double>(devices);
      result.attention.push_back(s);
    }
    double add_seconds = 0.0;
    for (const DeviceTimes& t : times) add_seconds += t.add / static_cast<double>(devices);
    result.memory_bandwidth = 12.0 * static_cast<double>(sweep.add_elements) / add_seconds;
    double ce_seconds = 0.0;
    for (const DeviceTimes& t : times) ce_seconds += t.cross_entropy / static_cast<double>(devices);
    result.special_function_rate =
        2.0 * static_cast<double>(sweep.ce_rows * sweep.ce_vocab) / ce_seconds;
    if (devices > 1) {
      result.collective_bytes =
          sweep.collective_floats / devices * devices * static_cast<std::int64_t>(sizeof(float));
      for (const DeviceTimes& t : times) {
        result.all_reduce_seconds += t.all_reduce / static_cast<double>(devices);
        result.all_gather_seconds += t.all_gather / static_cast<double>(devices);
        result.reduce_scatter_seconds += t.reduce_scatter / static_cast<double>(devices);
      }
    }
  }

  const Transfer transfer = measure_transfer(sweep.transfer_floats, seconds);
  result.transfer_latency = transfer.latency;
  result.transfer_bandwidth = transfer.bandwidth;
  result.memory_bytes = physical_memory_bytes() / devices;
  return result;
}

}  // namespace pipetune::runtime
