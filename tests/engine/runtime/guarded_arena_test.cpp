// The guarded test device's page bookkeeping: what the DeviceStorage tests rely on to prove that
// the engine never touches device storage from host code. Host access to a closed arena, and to a
// freed block of an open one, must fault; blocks must come back zero; freed space is reused.
#include "tests/engine/runtime/guarded_arena.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace pipetune::testing {
namespace {

std::size_t page() {
  return GuardedArena::page();
}

// The first byte of the block, read through a volatile so the compiler keeps the access.
int read_first(void* block) {
  return *static_cast<volatile unsigned char*>(block);
}

bool all_zero(const void* block, std::size_t bytes) {
  std::vector<unsigned char> zero(bytes, 0);
  return std::memcmp(block, zero.data(), bytes) == 0;
}

TEST(GuardedArena, BlocksArePageAlignedZeroAndDisjoint) {
  GuardedArena arena;
  arena.set_open(true);
  void* a = arena.allocate(1, true);
  void* b = arena.allocate(page() + 1, true);
  void* c = arena.allocate(0, true);
  for (void* p : {a, b, c}) EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % page(), 0u);
  EXPECT_TRUE(all_zero(a, page()));
  EXPECT_TRUE(all_zero(b, 2 * page()));
  EXPECT_TRUE(all_zero(c, page()));
  // Disjoint: b spans two pages, so a, b and c are at least that far apart.
  auto at = [](void* p) { return reinterpret_cast<std::uintptr_t>(p); };
  EXPECT_GE(at(b) > at(a) ? at(b) - at(a) : at(a) - at(b), page());
  EXPECT_GE(at(c) > at(b) ? at(c) - at(b) : at(b) - at(c), page());
  EXPECT_EQ(arena.live_blocks(), 3u);
  arena.set_open(false);
}

TEST(GuardedArena, AFreedBlockIsReusedAndComesBackZero) {
  GuardedArena arena;
  arena.set_open(true);
  void* a = arena.allocate(3 * page(), true);
  void* b = arena.allocate(page(), true);
  std::memset(a, 0x5a, 3 * page());
  arena.deallocate(a, true);
  void* again = arena.allocate(2 * page(), true);  // first fit: a's first two pages
  EXPECT_EQ(again, a);
  EXPECT_TRUE(all_zero(again, 2 * page()));
  void* rest = arena.allocate(page(), true);  // a's third page
  EXPECT_EQ(static_cast<char*>(rest), static_cast<char*>(a) + 2 * page());
  EXPECT_NE(rest, b);
  arena.set_open(false);
}

TEST(GuardedArena, NeighbouringHolesMergeAndTheTopFalls) {
  GuardedArena arena;
  char* a = static_cast<char*>(arena.allocate(page(), false));
  char* b = static_cast<char*>(arena.allocate(page(), false));
  char* c = static_cast<char*>(arena.allocate(page(), false));
  ASSERT_EQ(b, a + page());
  ASSERT_EQ(c, b + page());
  arena.deallocate(a, false);
  arena.deallocate(b, false);
  // a and b merged: a two-page block fits where they were.
  EXPECT_EQ(arena.allocate(2 * page(), false), a);
  arena.deallocate(a, false);
  arena.deallocate(c, false);  // c was at the top: everything is free, the top is back at a
  EXPECT_EQ(arena.allocate(3 * page(), false), a);
  EXPECT_EQ(arena.live_blocks(), 1u);
}

TEST(GuardedArena, ABlockLargerThanAChunkGetsItsOwn) {
  GuardedArena arena;
  void* small = arena.allocate(page(), false);
  const std::size_t big = (std::size_t{1} << 30) + page();
  void* large = arena.allocate(big, false);  // reserved, never touched beyond one page
  arena.set_open(true);
  EXPECT_EQ(read_first(large), 0);
  EXPECT_EQ(read_first(small), 0);
  arena.set_open(false);
  arena.deallocate(large, false);
  arena.deallocate(small, false);
  EXPECT_EQ(arena.live_blocks(), 0u);
}

using GuardedArenaDeathTest = ::testing::Test;

TEST(GuardedArenaDeathTest, HostAccessToAClosedArenaFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        GuardedArena arena;
        void* block = arena.allocate(page(), false);
        arena.set_open(true);
        (void)read_first(block);  // open: fine
        arena.set_open(false);
        (void)read_first(block);  // closed: faults
      },
      "");
}

TEST(GuardedArenaDeathTest, ABlockAllocatedWhileOpenIsGuardedAfterClose) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        GuardedArena arena;
        arena.set_open(true);
        void* block = arena.allocate(page(), true);
        *static_cast<volatile char*>(block) = 1;
        arena.set_open(false);
        (void)read_first(block);
      },
      "");
}

TEST(GuardedArenaDeathTest, AFreedBlockFaultsEvenWhileTheArenaIsOpen) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        GuardedArena arena;
        void* kept = arena.allocate(page(), false);
        void* freed = arena.allocate(page(), false);
        void* after = arena.allocate(page(), false);
        arena.deallocate(freed, false);
        arena.set_open(true);
        (void)read_first(kept);
        (void)read_first(after);
        (void)read_first(freed);  // a hole between two live blocks: still PROT_NONE
      },
      "");
}

}  // namespace
}  // namespace pipetune::testing
