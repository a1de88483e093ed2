#include "engine/runtime/rank_threads.hpp"

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace pipetune::runtime {

void run_rank_threads(int count, const std::function<void(int index)>& fn,
                      const std::function<void(int index, const std::string& what)>& on_failure) {
  std::mutex mutex;
  std::exception_ptr first;
  const auto failed = [&](int index, const std::string& what) {
    {
      std::lock_guard lock(mutex);
      if (!first) first = std::current_exception();
    }
    if (on_failure) on_failure(index, what);
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(count));
  try {
    for (int i = 0; i < count; ++i)
      threads.emplace_back([&, i] {
        try {
          fn(i);
        } catch (const std::exception& e) {
          failed(i, e.what());
        } catch (...) {
          failed(i, "unknown error");
        }
      });
  } catch (const std::exception& e) {
    // A thread could not start: the started ones would wait forever for its rank, unless
    // on_failure tells them; joinable threads left unjoined would end the process.
    failed(static_cast<int>(threads.size()),
           std::string("cannot start a rank thread: ") + e.what());
  }
  for (std::thread& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace pipetune::runtime
