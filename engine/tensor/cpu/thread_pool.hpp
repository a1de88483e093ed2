// ThreadPool: the CPU backend's own worker threads (one pool per CpuBackend, no globals).
//
// parallel_for splits an index range into one contiguous part per thread with a FIXED static
// partition: part p of P covers units [U*p/P, U*(p+1)/P) of `grain` indices each. The calling
// thread runs part 0, the workers the rest, and parallel_for returns when every part is done.
// Ops keep their results independent of the thread count by giving every output element to
// exactly one part and computing it the same way whichever part that is; reductions across parts
// use a chunking that does not depend on the thread count (see the op files).
//
// Idle workers spin briefly (back-to-back ops reuse them without a wake-up) and then sleep on a
// condition variable, so they leave the cores to BLAS between ops. The pool is not reentrant: a
// parallel_for issued from inside a part, or from a second thread while one is running, runs
// inline on its caller. Parts on workers must not throw (std::terminate; the ops check shapes
// and allocate scratch before they dispatch); an exception from part 0 (the caller's) is
// rethrown after the workers finish.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace pipetune::tensor {

class ThreadPool {
 public:
  // threads >= 1 (smaller values count as 1): threads - 1 workers are started; the caller of
  // parallel_for is the remaining one.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return threads_; }

  struct Range {
    std::int64_t begin = 0;
    std::int64_t end = 0;
  };

  // Number of parts parallel_for(n, grain, ...) uses: min(size(), ceil(n / grain)), 0 for n <= 0.
  int parts(std::int64_t n, std::int64_t grain) const;

  // The indices of part p of `parts` over [0, n) in units of `grain` (the last unit may be short).
  static Range part_range(std::int64_t n, std::int64_t grain, int parts, int p);

  // Calls fn(begin, end, part) once per part; part in [0, parts(n, grain)) indexes per-part
  // scratch. Returns after every part has finished.
  template <class Fn>
  void parallel_for(std::int64_t n, std::int64_t grain, Fn&& fn) {
    const int p = parts(n, grain);
    if (p == 0) return;
    if (p == 1) {
      fn(std::int64_t{0}, n, 0);
      return;
    }
    struct Ctx {
      std::remove_reference_t<Fn>* fn;
      std::int64_t n, grain;
      int parts;
    } ctx{&fn, n, grain, p};
    run(
        [](void* c, int part) {
          auto* x = static_cast<Ctx*>(c);
          const Range r = part_range(x->n, x->grain, x->parts, part);
          (*x->fn)(r.begin, r.end, part);
        },
        &ctx, p);
  }

 private:
  using Task = void (*)(void* ctx, int part);

  // Runs task(ctx, p) for p in [0, parts): part 0 on the caller, part p on worker p.
  void run(Task task, void* ctx, int parts);
  void worker_loop(int index);

  int threads_ = 1;
  std::vector<std::thread> workers_;

  // The current job: written by the dispatcher before it bumps generation_ (release), read by
  // workers after they see the new generation (acquire).
  Task task_ = nullptr;
  void* ctx_ = nullptr;
  int parts_ = 0;
  bool stop_ = false;

  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};  // workers that have not finished the current generation
  std::atomic<int> sleepers_{0};
  std::atomic<bool> busy_{false};  // a parallel_for is running (guards against reentry)
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace pipetune::tensor
