#include "tuner/calibration/cpu_profile.hpp"

#include <algorithm>
#include <cmath>

#include "engine/errors.hpp"
#include "tuner/cost/collectives.hpp"
#include "tuner/cost/execution.hpp"
#include "tuner/cost/work.hpp"

namespace pipetune::tuner {

namespace {

void check_positive(double v, const std::string& what) {
  if (!(v > 0.0) || !std::isfinite(v))
    throw InputError("CPU profile: " + what + " must be a positive number, not " +
                     std::to_string(v));
}

struct Line {
  double slope = 0.0, intercept = 0.0;
};

double gemm_flops(const profiler::GemmSample& g) {
  return 2.0 * static_cast<double>(g.m) * static_cast<double>(g.k) * static_cast<double>(g.n);
}

// Least squares of t = slope * F + intercept, each sample's residual divided by its t.
Line fit_relative(const std::vector<profiler::GemmSample>& samples) {
  // Normal equations of rows (F/t, 1/t) -> 1.
  double sff = 0, sf1 = 0, s11 = 0, sf = 0, s1 = 0;
  for (const profiler::GemmSample& g : samples) {
    const double a = gemm_flops(g) / g.seconds, b = 1.0 / g.seconds;
    sff += a * a, sf1 += a * b, s11 += b * b, sf += a, s1 += b;
  }
  const double det = sff * s11 - sf1 * sf1;
  Line l;
  if (det > 0.0) {
    l.slope = (sf * s11 - s1 * sf1) / det;
    l.intercept = (sff * s1 - sf1 * sf) / det;
  }
  if (!(l.slope > 0.0) || l.intercept < 0.0) {
    // No per-call overhead visible (or noise made it negative): the rate alone.
    l.intercept = 0.0;
    l.slope = sf / sff;
  }
  return l;
}

// Bus bandwidth of one measured collective: the inverse of collective_time()'s ring formula
// (collectives.hpp) for `devices` members at `latency` per step, so the cost model prices the
// measured call at its measured time. Where the latency terms leave nothing (tiny buffers), the
// whole time gives a lower bound.
double collective_bus_bandwidth(Collective kind, double seconds, double bytes, int devices,
                                double latency) {
  const double n = devices, share = (n - 1.0) / n;
  const double rounds = kind == Collective::AllReduce ? 2.0 : 1.0;
  const double moving = seconds - rounds * (n - 1.0) * latency;
  return rounds * share * bytes / (moving > 0.0 ? moving : seconds);
}

}  // namespace

double attention_forward_flops(std::int64_t batch, std::int64_t heads, std::int64_t seq,
                               std::int64_t head_dim) {
  return 2.0 * static_cast<double>(batch) * static_cast<double>(seq) * static_cast<double>(seq) *
         static_cast<double>(heads) * static_cast<double>(head_dim);
}

namespace {

double causal_forward_flops(const profiler::AttentionSample& a) {
  return attention_forward_flops(a.batch, a.heads, a.seq, a.head_dim);
}

// Every measurement the profile is fitted from is present and positive (the collectives' only
// when there is more than one device and a size to time).
void check_measurements(const profiler::MachineMeasurements& m) {
  if (m.devices < 1) throw InputError("CPU profile: devices must be at least 1");
  if (m.gemm.size() < 2)
    throw InputError("CPU profile: the GEMM sweep needs at least two sizes, got " +
                     std::to_string(m.gemm.size()));
  for (const profiler::GemmSample& g : m.gemm) {
    check_positive(gemm_flops(g), "GEMM FLOPs");
    check_positive(g.seconds, "GEMM time");
  }
  if (m.attention.empty()) throw InputError("CPU profile: no attention timings");
  for (const profiler::AttentionSample& a : m.attention) {
    check_positive(causal_forward_flops(a), "attention FLOPs");
    check_positive(a.forward_seconds, "attention forward time");
    check_positive(a.backward_seconds, "attention backward time");
  }
  check_positive(m.memory_bandwidth, "memory bandwidth");
  check_positive(m.special_function_rate, "exp rate");
  check_positive(m.transfer_bandwidth, "transfer bandwidth");
  check_positive(m.transfer_latency, "transfer latency");
  if (m.memory_bytes <= 0) throw InputError("CPU profile: memory bytes must be positive");
  if (m.devices > 1 && m.collective_bytes > 0) {
    for (double t : {m.all_reduce_seconds, m.all_gather_seconds, m.reduce_scatter_seconds})
      check_positive(t, "collective time");
  }
}

// Fused-kernel accounting of the cost model for the engine (work.cpp): the backward executes
// attention_backward_factor times the forward's FLOPs. The geometric mean over the sweep.
double measured_attention_rate(const profiler::MachineMeasurements& m) {
  const double passes = 1.0 + attention_backward_factor(cpu_engine_execution());
  double log_sum = 0.0;
  for (const profiler::AttentionSample& a : m.attention)
    log_sum +=
        std::log(passes * causal_forward_flops(a) / (a.forward_seconds + a.backward_seconds));
  return std::exp(log_sum / static_cast<double>(m.attention.size()));
}

}  // namespace

spec::HardwareSpec cpu_hardware_profile(const profiler::MachineMeasurements& m,
                                        const std::string& name, const std::string& description) {
  check_measurements(m);
  const bool collectives = m.devices > 1 && m.collective_bytes > 0;

  const double f = kCpuProfileFraction;
  spec::HardwareSpec hw;
  hw.name = name;
  hw.description = description;
  hw.device = spec::DeviceKind::Cpu;
  const Line line = fit_relative(m.gemm);
  const double gemm_rate = 1.0 / line.slope;  // asymptotic GEMM FLOP/s

  const double attention_rate = measured_attention_rate(m);

  // The faster of the two sets the peak at fraction f, so both fractions are at most f.
  hw.peak_flops = std::max(gemm_rate, attention_rate) / f;
  hw.efficiency.gemm = gemm_rate / hw.peak_flops;
  hw.efficiency.gemm_half_flops = line.intercept / line.slope;
  hw.efficiency.attention = attention_rate / hw.peak_flops;

  hw.hbm_bandwidth = m.memory_bandwidth / f;
  hw.efficiency.memory = f;
  hw.special_function_rate = m.special_function_rate;
  hw.hbm_bytes = m.memory_bytes;
  // Offload on a CPU rank is a copy into other host memory: it reads and writes every byte, so
  // it runs at half the element-wise kernels' bandwidth (which counts both).
  hw.host_bandwidth = m.memory_bandwidth / 2.0;
  hw.efficiency.host_link = 1.0;
  // The fastest of the transfer and the collectives sets intra_node_bandwidth at fraction f; each
  // gets its share: intra_node_bus for point-to-point (and all-to-all, broadcast), the
  // collectives their own.
  double all_reduce = 0.0, all_gather = 0.0, reduce_scatter = 0.0;
  if (collectives) {
    all_reduce = collective_bus_bandwidth(Collective::AllReduce, m.all_reduce_seconds,
                                          static_cast<double>(m.collective_bytes), m.devices,
                                          m.transfer_latency);
    all_gather = collective_bus_bandwidth(Collective::AllGather, m.all_gather_seconds,
                                          static_cast<double>(m.collective_bytes), m.devices,
                                          m.transfer_latency);
    reduce_scatter = collective_bus_bandwidth(Collective::ReduceScatter, m.reduce_scatter_seconds,
                                              static_cast<double>(m.collective_bytes), m.devices,
                                              m.transfer_latency);
  }
  const double fastest = std::max({m.transfer_bandwidth, all_reduce, all_gather, reduce_scatter});
  hw.intra_node_bandwidth = fastest / f;
  hw.efficiency.intra_node_bus = m.transfer_bandwidth / hw.intra_node_bandwidth;
  hw.efficiency.all_reduce_bus = all_reduce / hw.intra_node_bandwidth;
  hw.efficiency.all_gather_bus = all_gather / hw.intra_node_bandwidth;
  hw.efficiency.reduce_scatter_bus = reduce_scatter / hw.intra_node_bandwidth;
  // One machine: no second tier. Ranks beyond devices_per_node still exchange at the transfer's
  // rate.
  hw.inter_node_bandwidth = m.transfer_bandwidth / f;
  hw.efficiency.inter_node_bus = f;
  hw.intra_node_latency = m.transfer_latency;
  hw.inter_node_latency = m.transfer_latency;
  hw.devices_per_node = m.devices;
  return hw;
}

}  // namespace pipetune::tuner
