// A process's rank threads (ranks as processes, K per process): each rank's function on a thread
// of its own, a failure reported at once so that the process's other ranks stop waiting for the
// failed one, and the cause rethrown once every thread has ended.
#pragma once

#include <functional>
#include <string>

namespace pipetune::runtime {

// Runs fn(i) for i in [0, count) on `count` threads and joins them. When fn throws, the exception
// is kept, then on_failure(i, what) is called on that thread (may be null). The rethrown
// exception is the cause: the first one kept. It is kept before on_failure runs, so a sibling
// that on_failure wakes (and that throws because of it) is never taken for the cause.
// A thread that cannot start is a failure of its index: the ones started are joined after
// on_failure has been told, so that they can be woken.
void run_rank_threads(int count, const std::function<void(int index)>& fn,
                      const std::function<void(int index, const std::string& what)>& on_failure);

}  // namespace pipetune::runtime
