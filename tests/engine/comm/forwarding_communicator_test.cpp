// ForwardingCommunicator: every call reaches the wrapped communicator with its own arguments, and
// a derived class that overrides one call changes that call only.
#include "engine/comm/forwarding_communicator.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pipetune::comm {
namespace {

// Records each call as "name:first argument:sizes".
class Recorder final : public Communicator {
 public:
  std::vector<std::string> calls;
  mutable int aborted_checks = 0;

  int rank() const override { return 3; }
  int world() const override { return 8; }
  void send(int dst, int tag, std::span<const float> d) override {
    add("send", dst, tag, d.size());
  }
  void recv(int src, int tag, std::span<float> d) override { add("recv", src, tag, d.size()); }
  void all_reduce(const ProcessGroup& g, std::span<float> d, ReduceOp op) override {
    add("all_reduce", g.size(), static_cast<int>(op), d.size());
  }
  void reduce_scatter(const ProcessGroup& g, std::span<const float> in, std::span<float> out,
                      ReduceOp op) override {
    add("reduce_scatter", g.size(), static_cast<int>(op), in.size() * 100 + out.size());
  }
  void reduce_scatter_v(const ProcessGroup& g, std::span<const float> in,
                        std::span<const std::size_t> counts, std::span<float> out,
                        ReduceOp op) override {
    add("reduce_scatter_v", g.size(), static_cast<int>(op) * 10 + static_cast<int>(counts[0]),
        in.size() * 100 + out.size());
  }
  void all_gather(const ProcessGroup& g, std::span<const float> in, std::span<float> out) override {
    add("all_gather", g.size(), 0, in.size() * 100 + out.size());
  }
  void all_to_all(const ProcessGroup& g, std::span<const float> in, std::span<float> out) override {
    add("all_to_all", g.size(), 0, in.size() * 100 + out.size());
  }
  void all_to_all_v(const ProcessGroup& g, std::span<const float> in,
                    std::span<const std::size_t> sc, std::span<float> out,
                    std::span<const std::size_t> rc) override {
    add("all_to_all_v", g.size(), static_cast<int>(sc.size() * 10 + rc.size()),
        in.size() * 100 + out.size());
  }
  void broadcast(const ProcessGroup& g, std::span<float> d, int root) override {
    add("broadcast", g.size(), root, d.size());
  }
  void barrier(const ProcessGroup& g) override { add("barrier", g.size(), 0, 0); }
  void throw_if_aborted() const override { ++aborted_checks; }
  void note_progress(std::int64_t step, std::string_view op, int microbatch) override {
    calls.push_back("progress:" + std::to_string(step) + ":" + std::string(op) + ":" +
                    std::to_string(microbatch));
  }

 private:
  void add(const char* name, std::size_t a, int b, std::size_t n) {
    calls.push_back(std::string(name) + ":" + std::to_string(a) + ":" + std::to_string(b) + ":" +
                    std::to_string(n));
  }
};

// Changes one call: sends go to rank 0.
class ToRankZero final : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  void send(int, int tag, std::span<const float> d) override { inner().send(0, tag, d); }
};

TEST(ForwardingCommunicator, EveryCallReachesTheWrappedCommunicator) {
  Recorder inner;
  ToRankZero c(inner);
  const ProcessGroup g{"dp", {0, 1}};
  std::vector<float> a(4), b(8);
  const std::vector<std::size_t> counts = {2, 2};
  EXPECT_EQ(c.rank(), 3);
  EXPECT_EQ(c.world(), 8);
  c.send(5, 7, a);
  c.recv(5, 7, a);
  c.all_reduce(g, a, ReduceOp::max);
  c.reduce_scatter(g, b, a, ReduceOp::sum);
  c.reduce_scatter_v(g, a, counts, std::span<float>(b).first(2), ReduceOp::max);
  c.all_gather(g, a, b);
  c.all_to_all(g, a, a);
  c.all_to_all_v(g, a, counts, b, counts);
  c.broadcast(g, a, 1);
  c.barrier(g);
  c.throw_if_aborted();
  c.note_progress(12, "BW", 3);
  EXPECT_EQ(inner.calls, (std::vector<std::string>{
                             "send:0:7:4",  // overridden: to rank 0
                             "recv:5:7:4",
                             "all_reduce:2:1:4",
                             "reduce_scatter:2:0:804",
                             "reduce_scatter_v:2:12:402",
                             "all_gather:2:0:408",
                             "all_to_all:2:0:404",
                             "all_to_all_v:2:22:408",
                             "broadcast:2:1:4",
                             "barrier:2:0:0",
                             "progress:12:BW:3",
                         }));
  EXPECT_EQ(inner.aborted_checks, 1);
}

}  // namespace
}  // namespace pipetune::comm
