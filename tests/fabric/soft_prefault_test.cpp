// The soft provider faults a fresh large region's pages in ahead of its
// first writer (soft/populator.hpp), and never after the region is gone;
// it keeps freed large ranges warm and makes spares ahead, within its warm
// limit (soft/arena.hpp, Warm memory). Residency is read with mincore(2) on
// the region's own mapping.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <thread>
#include <vector>

#include <catena/fabric/fabric.hpp>

#include "soft/arena.hpp"

namespace catena::fabric::test {
namespace {

using namespace std::chrono_literals;

constexpr std::uint32_t kPrefaultRw = kLocalWrite | kRemoteWrite | kRemoteRead;

std::size_t prefault_resident_pages(const std::byte* p, std::size_t bytes) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((bytes + page - 1) / page);
  if (mincore(const_cast<std::byte*>(p), bytes, v.data()) != 0) return ~std::size_t{0};
  std::size_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

std::unique_ptr<Provider> open_prefault_soft() {
  auto p = Provider::open("soft");
  EXPECT_TRUE(p.ok()) << p.error().message;
  return p.ok() ? std::move(p.value()) : nullptr;
}

TEST(SoftPrefault, ALargeRegionIsFaultedInBeforeAnyoneWritesIt) {
  auto prov = open_prefault_soft();
  ASSERT_NE(prov, nullptr);
  constexpr std::size_t kBytes = 64u << 20;
  auto mr = prov->allocate(kBytes, kPrefaultRw);
  ASSERT_TRUE(mr.ok()) << mr.error().message;
  const std::byte* p = mr.value()->data();
  const std::size_t pages = kBytes / static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  std::size_t resident = 0;
  while ((resident = prefault_resident_pages(p, kBytes)) < pages &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(resident, pages) << "pages present without a write";
  // Populated, still zeros: what allocate promises.
  for (std::size_t i = 0; i < kBytes; i += 4096 + 8) ASSERT_EQ(p[i], std::byte{0}) << i;
}

TEST(SoftPrefault, ARegionFreedWhileItIsFaultedInKeepsNoPages) {
  auto prov = open_prefault_soft();
  ASSERT_NE(prov, nullptr);
  constexpr std::size_t kBytes = 512u << 20;  // longer to populate than the free takes to come
  for (int round = 0; round < 3; ++round) {
    auto mr = prov->allocate(kBytes, kPrefaultRw);
    ASSERT_TRUE(mr.ok()) << mr.error().message;
    const std::byte* p = mr.value()->data();  // the arena's mapping stays after the free
    std::this_thread::sleep_for(std::chrono::milliseconds(3 * round));
    mr.value().reset();
    // A populate still running after the pages were dropped would fault
    // them back in: memory the arena believes it gave back.
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(prefault_resident_pages(p, kBytes), 0u) << "round " << round;
  }
}

TEST(SoftPrefault, WritesRacingThePopulatorAreNeverUndone) {
  // The populator writes every page it populates (an atomic add of 0 to
  // its first word): a writer filling the region at the same time must
  // find every byte it wrote, also in the words the populator touched.
  auto prov = open_prefault_soft();
  ASSERT_NE(prov, nullptr);
  constexpr std::size_t kBytes = 64u << 20;
  for (int round = 0; round < 4; ++round) {
    auto mr = prov->allocate(kBytes, kPrefaultRw);
    ASSERT_TRUE(mr.ok()) << mr.error().message;
    auto* p = reinterpret_cast<std::uint64_t*>(mr.value()->data());
    const std::uint64_t mark = 0x0123456789abcdefULL + static_cast<std::uint64_t>(round);
    for (std::size_t i = 0; i < kBytes / 8; i += 512) p[i] = mark ^ i;  // the first word of each page
    std::this_thread::sleep_for(100ms);                                 // the populator has passed every page
    for (std::size_t i = 0; i < kBytes / 8; i += 512)
      ASSERT_EQ(p[i], mark ^ i) << "round " << round << " word " << i;
  }
}

TEST(SoftPrefault, ASmallRegionIsLeftToItsFirstWrite) {
  auto prov = open_prefault_soft();
  ASSERT_NE(prov, nullptr);
  auto big = prov->allocate(8u << 20, kPrefaultRw);  // starts the populator
  ASSERT_TRUE(big.ok());
  auto mr = prov->allocate(256u << 10, kPrefaultRw);
  ASSERT_TRUE(mr.ok()) << mr.error().message;
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(prefault_resident_pages(mr.value()->data(), 256u << 10), 0u);
}

// The arena's own allocations, white-box: what is warm, what is a spare.
std::unique_ptr<soft::Arena> warm_arena(std::uint64_t limit) {
  auto a = soft::Arena::create(4ull << 30);
  EXPECT_TRUE(a.ok()) << a.error().message;
  if (!a.ok()) return nullptr;
  a.value()->set_warm_limit(limit);
  return std::move(a.value());
}

// Waits until the arena's populator has nothing of `what` left to do.
bool settles(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

TEST(SoftWarmMemory, AFreedSegmentIsZeroedInPlaceAndTheNextOneOfItsSizeTakesItWarm) {
  constexpr std::uint64_t kSeg = 16u << 20;
  auto arena = warm_arena(4 * kSeg);
  ASSERT_NE(arena, nullptr);
  bool warm = true;
  auto first = arena->allocate_range(kSeg, &warm);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(warm) << "a fresh arena has nothing warm";
  // One allocation of a size (a client's ring) makes no spare.
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(arena->spare_bytes_pending() + arena->warm_bytes(), 0u);
  // The second does: a spare of its size, populated ahead.
  auto cold = arena->allocate_range(kSeg, &warm);
  ASSERT_TRUE(cold.ok());
  EXPECT_FALSE(warm);
  ASSERT_TRUE(settles([&] { return arena->spare_bytes_pending() == 0; }));
  EXPECT_EQ(arena->warm_bytes(), kSeg);
  std::byte* base = arena->view().base;
  std::memset(base + first.value(), 0x5a, kSeg);  // a segment's worth of records

  auto second = arena->allocate_range(kSeg, &warm);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(warm) << "the spare";
  EXPECT_EQ(prefault_resident_pages(base + second.value(), kSeg), kSeg / 4096) << "present before any write";

  arena->free_range(first.value(), kSeg);
  // Zeroed in place on the populator's thread, pages kept.
  ASSERT_TRUE(settles([&] { return arena->warm_bytes() >= 2 * kSeg; })) << arena->warm_bytes();
  EXPECT_EQ(prefault_resident_pages(base + first.value(), kSeg), kSeg / 4096);
  auto third = arena->allocate_range(kSeg, &warm);
  ASSERT_TRUE(third.ok());
  EXPECT_TRUE(warm);
  // Whichever warm range it took: zeros, every page present.
  for (std::uint64_t i = 0; i < kSeg; i += 4096) ASSERT_EQ(base[third.value() + i], std::byte{0}) << i;
  EXPECT_EQ(base[third.value() + kSeg - 1], std::byte{0});
  EXPECT_EQ(prefault_resident_pages(base + third.value(), kSeg), kSeg / 4096);
}

TEST(SoftWarmMemory, WhatIsFreedBeyondTheLimitGivesItsPagesBack) {
  constexpr std::uint64_t kSeg = 16u << 20;
  auto arena = warm_arena(kSeg);  // room for one
  ASSERT_NE(arena, nullptr);
  std::byte* base = arena->view().base;
  std::vector<std::uint64_t> offs;
  for (int i = 0; i < 3; ++i) {
    auto off = arena->allocate_range(kSeg);
    ASSERT_TRUE(off.ok());
    std::memset(base + off.value(), 0x11, kSeg);
    offs.push_back(off.value());
  }
  ASSERT_TRUE(settles([&] { return arena->spare_bytes_pending() == 0; }));
  ASSERT_EQ(arena->warm_bytes(), kSeg) << "the one spare the limit allows";
  // The limit is full: both freed segments are punched out, read as zeros.
  arena->free_range(offs[0], kSeg);
  arena->free_range(offs[1], kSeg);
  ASSERT_TRUE(settles([&] { return prefault_resident_pages(base + offs[1], kSeg) == 0; }));
  EXPECT_EQ(prefault_resident_pages(base + offs[0], kSeg), 0u);
  EXPECT_EQ(arena->warm_bytes(), kSeg);
  EXPECT_EQ(base[offs[0]], std::byte{0});

  // Limit 0: nothing warm, no spare, as before warm memory.
  arena->set_warm_limit(0);
  auto spare = arena->allocate_range(kSeg);  // takes the warm spare
  ASSERT_TRUE(spare.ok());
  auto cold = arena->allocate_range(kSeg);
  ASSERT_TRUE(cold.ok());
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(arena->spare_bytes_pending(), 0u);
  EXPECT_EQ(arena->warm_bytes(), 0u);
  arena->free_range(offs[2], kSeg);
  ASSERT_TRUE(settles([&] { return prefault_resident_pages(base + offs[2], kSeg) == 0; }));
  EXPECT_EQ(arena->warm_bytes(), 0u);
}

TEST(SoftWarmMemory, WhenNothingColdIsLeftWarmMemoryServesAnySize) {
  constexpr std::uint64_t kSeg = 16u << 20;
  auto a = soft::Arena::create(soft::kMinArenaSize);  // 1 GiB, fixed
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto& arena = *a.value();
  arena.set_warm_limit(kSeg);
  ASSERT_TRUE(arena.allocate_range(kSeg).ok());
  ASSERT_TRUE(arena.allocate_range(kSeg).ok());  // a spare of 16 MiB follows
  ASSERT_TRUE(settles([&] { return arena.spare_bytes_pending() == 0; }));
  ASSERT_EQ(arena.warm_bytes(), kSeg);
  // Small ranges until the arena refuses: the last 16 MiB come from the spare.
  int from_warm = 0;
  for (;;) {
    bool warm = false;
    auto r = arena.allocate_range(512u << 10, &warm);
    if (!r.ok()) {
      EXPECT_EQ(r.error().code, Errc::resource_exhausted);
      EXPECT_NE(r.error().message.find("soft arena exhausted"), std::string::npos) << r.error().message;
      break;
    }
    from_warm += warm ? 1 : 0;
  }
  EXPECT_EQ(from_warm, static_cast<int>(kSeg / (512u << 10)));
  EXPECT_EQ(arena.warm_bytes(), 0u);
}

TEST(SoftWarmMemory, AnAllocationWaitsForMemoryStillBeingGivenBack) {
  // Frees are finished on the populator's thread; an allocation that finds
  // the arena full while one is pending waits for it instead of failing.
  constexpr std::uint64_t kSeg = 64u << 20;
  auto a = soft::Arena::create(soft::kMinArenaSize);
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto& arena = *a.value();
  for (const std::uint64_t limit : {std::uint64_t{0}, 2 * kSeg}) {
    arena.set_warm_limit(limit);
    std::vector<std::uint64_t> held;
    for (;;) {
      auto r = arena.allocate_range(kSeg);
      if (!r.ok()) break;
      held.push_back(r.value());
    }
    ASSERT_GE(held.size(), 4u);
    for (int round = 0; round < 4; ++round) {
      std::memset(arena.view().base + held.back(), 0x3c, kSeg);  // pages to drop or clear: a slower free
      arena.free_range(held.back(), kSeg);
      auto again = arena.allocate_range(kSeg);
      ASSERT_TRUE(again.ok()) << "limit " << limit << " round " << round << ": " << again.error().message;
      EXPECT_EQ(arena.view().base[again.value() + kSeg - 1], std::byte{0});
      held.back() = again.value();
    }
    for (const std::uint64_t off : held) arena.free_range(off, kSeg);
    ASSERT_TRUE(settles([&] { return arena.allocate_range(kSeg).ok(); }));  // the frees went through
  }
}

TEST(SoftWarmMemory, FreesFasterThanThePopulatorZeroesStayBounded) {
  // A tight allocate-and-free loop of small ranges (zeroed in place, so
  // resident while free): the populator's queue of frees is capped, so the
  // arena's footprint is too, instead of growing with the loop.
  auto a = soft::Arena::create(16ull << 30);
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto& arena = *a.value();
  ASSERT_TRUE(arena.allocate_range(8u << 20).ok());  // starts the populator (a large range is prefaulted)
  std::uint64_t highest = 0;
  for (int i = 0; i < 400'000; ++i) {
    auto r = arena.allocate_range(64u << 10);
    ASSERT_TRUE(r.ok()) << i << ": " << r.error().message;
    highest = std::max(highest, r.value());
    arena.free_range(r.value(), 64u << 10);
  }
  EXPECT_LT(highest, soft::kDataOffset + soft::Populator::kMaxQueuedFreeBytes + (64u << 20));
}

TEST(SoftWarmMemory, TheProviderReportsWhatItKeepsWarm) {
  constexpr std::size_t kSeg = 16u << 20;
  for (const char* spec : {"soft", "fault:soft"}) {
    auto p = Provider::open(spec);
    ASSERT_TRUE(p.ok()) << p.error().message;
    Provider& prov = *p.value();
    EXPECT_EQ(prov.warm_bytes(), 0) << spec;
    auto a = prov.allocate(kSeg, kPrefaultRw);
    auto b = prov.allocate(kSeg, kPrefaultRw);  // the second of its size: a spare follows
    ASSERT_TRUE(a.ok() && b.ok()) << spec;
    EXPECT_TRUE(settles([&] { return prov.warm_bytes() == static_cast<std::int64_t>(kSeg); }))
        << spec << " " << prov.warm_bytes();
    a.value().reset();  // zeroed in place, kept
    EXPECT_TRUE(settles([&] { return prov.warm_bytes() == static_cast<std::int64_t>(2 * kSeg); }))
        << spec << " " << prov.warm_bytes();
  }
  auto off = Provider::open("soft:warm=0");
  ASSERT_TRUE(off.ok());
  auto a = off.value()->allocate(kSeg, kPrefaultRw);
  auto b = off.value()->allocate(kSeg, kPrefaultRw);
  a.value().reset();
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(off.value()->warm_bytes(), 0);
}

TEST(SoftWarmMemory, TheOptionSetsTheLimitAndABadValueIsAClearError) {
  auto p = Provider::open("soft:shm,warm=0");
  ASSERT_TRUE(p.ok()) << p.error().message;
  for (const char* bad : {"soft:warm=", "soft:warm=-1", "soft:warm=12x", "soft:warm=99999999"}) {
    auto q = Provider::open(bad);
    ASSERT_FALSE(q.ok()) << bad;
    EXPECT_EQ(q.error().code, Errc::invalid_argument) << bad;
    EXPECT_NE(q.error().message.find("warm=<MiB>"), std::string::npos) << q.error().message;
  }
}

}  // namespace
}  // namespace catena::fabric::test
