// ThreadPool: static-partition parallel_for over a fixed set of worker threads.
#include "engine/tensor/cpu/thread_pool.hpp"

#include <algorithm>

namespace pipetune::tensor {

namespace {

// Spin iterations before an idle worker sleeps (a pause is ~40-140 cycles: tens of microseconds,
// long enough to catch the next op of a step, short next to a BLAS call).
constexpr int kWorkerSpins = 500;
// Spin iterations of the dispatcher waiting for the workers before it starts yielding.
constexpr int kDispatcherSpins = 4000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int threads) : threads_(std::max(1, threads)) {
  workers_.reserve(static_cast<std::size_t>(threads_ - 1));
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  if (workers_.empty()) return;
  stop_ = true;
  generation_.fetch_add(1, std::memory_order_seq_cst);
  { std::lock_guard<std::mutex> lock(mutex_); }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

int ThreadPool::parts(std::int64_t n, std::int64_t grain) const {
  if (n <= 0) return 0;
  const std::int64_t g = std::max<std::int64_t>(1, grain);
  const std::int64_t units = (n + g - 1) / g;
  return static_cast<int>(std::min<std::int64_t>(threads_, units));
}

ThreadPool::Range ThreadPool::part_range(std::int64_t n, std::int64_t grain, int parts, int p) {
  const std::int64_t g = std::max<std::int64_t>(1, grain);
  const std::int64_t units = (n + g - 1) / g;
  const std::int64_t u0 = units * p / parts, u1 = units * (p + 1) / parts;
  return {std::min(n, u0 * g), std::min(n, u1 * g)};
}

void ThreadPool::run(Task task, void* ctx, int parts) {
  if (busy_.exchange(true, std::memory_order_acquire)) {
    // Reentrant or concurrent use: same parts, run here one after the other.
    for (int p = 0; p < parts; ++p) task(ctx, p);
    return;
  }
  task_ = task;
  ctx_ = ctx;
  parts_ = parts;
  pending_.store(threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);  // publishes the job (release)
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    // A sleeper checks generation_ under the mutex before it waits: taking the mutex here means
    // it is either already waiting (and gets the notify) or will see the new generation.
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_all();
  }
  auto wait_for_workers = [this] {
    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
      if (spins < kDispatcherSpins) {
        cpu_relax();
      } else {
        std::this_thread::yield();
      }
    }
    busy_.store(false, std::memory_order_release);
  };
  try {
    task(ctx, 0);
  } catch (...) {
    wait_for_workers();  // the workers still use ctx: let them finish before unwinding
    throw;
  }
  wait_for_workers();
}

void ThreadPool::worker_loop(int index) {
  std::uint64_t seen = 0;
  for (;;) {
    std::uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spins = 0; gen == seen && spins < kWorkerSpins; ++spins) {
      cpu_relax();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      wake_.wait(lock, [&] {
        gen = generation_.load(std::memory_order_seq_cst);
        return gen != seen;
      });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    seen = gen;
    if (stop_) return;
    if (index < parts_) task_(ctx_, index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace pipetune::tensor
