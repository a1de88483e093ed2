// ParameterSet's units under ZeRO-2 and 3: which entries form a unit, and the full unit buffers'
// life: a closed layer unit's buffer comes back for the next layer unit of its size (one kept per
// size), any other buffer is freed, and unit_buffer_bytes() is what the storage holds for them
// (checked against the allocator's own accounting).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/parameters.hpp"
#include "engine/tensor/device_allocator.hpp"

namespace pipetune::model {
namespace {

constexpr std::int64_t kFloat = sizeof(float);

ParamEntry vector_entry(const std::string& name, std::int64_t n) {
  ParamEntry e;
  e.name = name;
  e.shape = tensor::Shape{n};
  e.layout = ShardLayout::whole(n);
  return e;
}

// wte (12), h.0 (10 + 6), h.1 (16), h.2 (an MoE-like layer of another size: 8), lnf (4),
// head (12); sharded over a group of 2.
struct Fixture {
  tensor::HostAllocator storage;
  ParameterSet set;
  explicit Fixture(bool parameters) {
    set.add(vector_entry("wte", 12));
    set.add(vector_entry("h.0.a", 10));
    set.add(vector_entry("h.0.b", 6));
    set.add(vector_entry("h.1.a", 16));
    set.add(vector_entry("h.2.a", 8));
    set.add(vector_entry("lnf.w", 4));
    set.add(vector_entry("head.w", 12));
    set.allocate_sharded({.size = 2, .index = 0}, &storage, parameters);
  }
  int unit(const char* name) const { return set.find_unit(name); }
  // The allocator's gradient bytes beyond the kept shards: the full unit buffers.
  std::int64_t gradient_buffers() const {
    return storage.bytes(profiler::MemoryCategory::Gradients) - set.owned_size() * kFloat;
  }
  std::int64_t value_buffers() const {
    return storage.bytes(profiler::MemoryCategory::Parameters) - set.owned_size() * kFloat;
  }
};

TEST(ParameterUnits, EntriesGroupIntoLayerAndTableUnits) {
  Fixture f(false);
  const std::vector<ParamUnit>& u = f.set.units();
  ASSERT_EQ(u.size(), 6u);
  const std::vector<std::string> names = {"wte", "h.0", "h.1", "h.2", "lnf", "head"};
  const std::vector<std::int64_t> numel = {12, 16, 16, 8, 4, 12};
  for (std::size_t i = 0; i < u.size(); ++i) {
    SCOPED_TRACE(names[i]);
    EXPECT_EQ(u[i].name, names[i]);
    EXPECT_EQ(u[i].numel, numel[i]);
    EXPECT_EQ(u[i].layer, names[i].starts_with("h."));
    EXPECT_EQ(u[i].vocabulary, names[i] == "wte" || names[i] == "head");
  }
}

TEST(ParameterUnits, ALayerReusesTheLastClosedLayerBufferOfItsSize) {
  Fixture f(false);
  const int h0 = f.unit("h.0"), h1 = f.unit("h.1"), h2 = f.unit("h.2"), head = f.unit("head");
  f.set.open_gradient_unit(h0);
  const float* h0_buffer = f.set.unit_gradient(h0).data();
  f.set.unit_gradient(h0).data()[3] = 7.0f;
  f.set.close_gradient_unit(h0);
  EXPECT_EQ(f.set.unit_buffer_bytes().gradients, 16 * kFloat) << "the closed layer's buffer kept";
  // A table opened and closed in between neither takes nor replaces it.
  f.set.open_gradient_unit(head);
  EXPECT_EQ(f.set.unit_buffer_bytes().vocabulary_gradients, 12 * kFloat);
  f.set.close_gradient_unit(head);
  EXPECT_EQ(f.set.unit_buffer_bytes().vocabulary_gradients, 0) << "a table's buffer is freed";
  f.set.open_gradient_unit(h1);
  EXPECT_EQ(f.set.unit_gradient(h1).data(), h0_buffer) << "h.1 did not reuse h.0's buffer";
  EXPECT_EQ(f.set.unit_gradient(h1).data()[3], 0.0f) << "a reused gradient buffer is zeroed";
  EXPECT_EQ(f.set.unit_buffer_bytes().gradients, 16 * kFloat);
  // A layer of another size gets its own buffer, kept beside the first after both close.
  f.set.open_gradient_unit(h2);
  EXPECT_EQ(f.set.unit_buffer_bytes().gradients, (16 + 8) * kFloat);
  f.set.close_gradient_unit(h1);
  f.set.close_gradient_unit(h2);
  EXPECT_EQ(f.set.unit_buffer_bytes().gradients, (16 + 8) * kFloat);
  // Two layers of one size open at once: the second's buffer is freed when both close.
  f.set.open_gradient_unit(h0);
  f.set.open_gradient_unit(h1);
  EXPECT_EQ(f.set.unit_buffer_bytes().gradients, (16 + 16 + 8) * kFloat);
  f.set.close_gradient_unit(h0);
  f.set.close_gradient_unit(h1);
  EXPECT_EQ(f.set.unit_buffer_bytes().gradients, (16 + 8) * kFloat);
}

// unit_buffer_bytes() is what the storage holds for the unit buffers, at every step of a layer
// sequence like a backward's (head and final LayerNorm, layers, embedding), values alike.
TEST(ParameterUnits, BufferBytesAreWhatTheStorageHolds) {
  for (bool parameters : {false, true}) {
    SCOPED_TRACE(parameters ? "ZeRO-3" : "ZeRO-2");
    Fixture f(parameters);
    const auto check = [&](const char* when) {
      SCOPED_TRACE(when);
      const UnitBufferBytes& b = f.set.unit_buffer_bytes();
      EXPECT_EQ(f.gradient_buffers(), b.gradients + b.vocabulary_gradients);
      if (parameters) {
        EXPECT_EQ(f.value_buffers(), b.values + b.vocabulary_values);
      }
    };
    const std::vector<std::vector<const char*>> scopes = {{"head", "lnf"}, {"h.2"}, {"h.1"},
                                                          {"h.0"},         {"wte"}, {"h.2", "h.1"}};
    for (const auto& scope : scopes) {
      for (const char* name : scope) {
        f.set.open_gradient_unit(f.unit(name));
        if (parameters) f.set.open_parameter_unit(f.unit(name));
      }
      check(scope.front());
      for (const char* name : scope) {
        f.set.close_gradient_unit(f.unit(name));
        if (parameters) f.set.close_parameter_unit(f.unit(name));
      }
      check("closed");
    }
  }
}

}  // namespace
}  // namespace pipetune::model
