// The soft provider faults a fresh large region's pages in ahead of its
// first writer (soft/populator.hpp), and never after the region is gone.
// Residency is read with mincore(2) on the region's own mapping.
#include <unistd.h>

#include <chrono>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <thread>
#include <vector>

#include <catena/fabric/fabric.hpp>

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

}  // namespace
}  // namespace catena::fabric::test
