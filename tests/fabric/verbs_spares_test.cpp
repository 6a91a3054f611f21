// The verbs provider's regions made ahead (VerbsSpares, verbs_device.hpp),
// on the device CATENA_PROVIDER names (verbs:<device>[,...]); skipped for
// every other provider. In this binary because ci/vm runs it on rxe0.
#include <chrono>
#include <cstring>
#include <gtest/gtest.h>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../test_env.hpp"
#include "verbs/verbs_device.hpp"

namespace catena::fabric::verbs {
namespace {

using namespace std::chrono_literals;

constexpr std::uint32_t kAccess = kLocalWrite | kRemoteWrite;

std::optional<std::string> verbs_device_name() {
  const std::string spec = test::provider_spec();
  if (!spec.starts_with("verbs:")) return std::nullopt;
  const std::string rest = spec.substr(6);
  return rest.substr(0, rest.find(','));
}

// Waits up to 60 s (the CI's VM emulates its CPU: zeroing and registering
// 4 MiB there takes tens of ms, more under load) for made() to reach `n`.
bool wait_made(const VerbsDevice& dev, std::uint64_t n) {
  for (auto until = std::chrono::steady_clock::now() + 60s; std::chrono::steady_clock::now() < until;) {
    if (dev.spares.made() >= n) return true;
    std::this_thread::sleep_for(1ms);
  }
  return dev.spares.made() >= n;
}

bool all_zero(const MemoryRegion& r) {
  for (std::size_t i = 0; i < r.size(); ++i) {
    if (r.data()[i] != std::byte{0}) return false;
  }
  return true;
}

// The second allocation of a kind of 1 MiB or more makes the next one
// ahead, kept warm. While warm regions of the kind are left nothing more is
// made; the allocation that takes the last one asks for the next, and the
// one after takes that (had it been allocated anew, the pool would still
// hold the spare and no further one would be made). All zeroed.
TEST(VerbsSpares, ARecurringKindIsMadeAheadAndTheNextAllocationTakesIt) {
  const auto name = verbs_device_name();
  if (!name) GTEST_SKIP() << "provider " << test::provider_spec() << " is not verbs";
  auto dev = VerbsDevice::open(*name);
  ASSERT_TRUE(dev.ok()) << dev.error().message;
  constexpr std::size_t kBytes = 4u << 20;

  auto first = VerbsMemoryRegion::allocate(dev.value(), kBytes, kAccess, kDefaultDomain);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(dev.value()->spares.pending_bytes(), 0u) << "a kind seen once is not made ahead";
  auto second = VerbsMemoryRegion::allocate(dev.value(), kBytes, kAccess, kDefaultDomain);
  ASSERT_TRUE(second.ok()) << second.error().message;
  ASSERT_TRUE(wait_made(*dev.value(), 1)) << "no spare after the second allocation";
  EXPECT_TRUE(dev.value()->warm.holds(kBytes, kAccess, kDefaultDomain));
  EXPECT_EQ(dev.value()->warm.bytes(), kBytes);
  // Another access or domain is another kind: not served by it.
  EXPECT_FALSE(dev.value()->warm.holds(kBytes, kLocalWrite, kDefaultDomain));

  std::memset(first.value()->data(), 0x5a, kBytes);  // given back below: its bytes must not reach anyone
  first.value().reset();
  second.value().reset();  // both kept warm: the pool holds three
  EXPECT_EQ(dev.value()->warm.bytes(), 3 * kBytes);

  auto third = VerbsMemoryRegion::allocate(dev.value(), kBytes, kAccess, kDefaultDomain);
  ASSERT_TRUE(third.ok()) << third.error().message;
  EXPECT_TRUE(all_zero(*third.value()));
  // Warm regions of the kind were left for the next: nothing more made.
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(dev.value()->spares.made(), 1u);
  EXPECT_EQ(dev.value()->warm.bytes(), 2 * kBytes);

  // Take the rest: the last warm one taken asks for the next.
  auto fourth = VerbsMemoryRegion::allocate(dev.value(), kBytes, kAccess, kDefaultDomain);
  auto fifth = VerbsMemoryRegion::allocate(dev.value(), kBytes, kAccess, kDefaultDomain);
  ASSERT_TRUE(fourth.ok() && fifth.ok());
  EXPECT_TRUE(all_zero(*fourth.value()));
  EXPECT_TRUE(all_zero(*fifth.value()));
  ASSERT_TRUE(wait_made(*dev.value(), 2)) << "the pool ran dry and no spare came";
  EXPECT_EQ(dev.value()->warm.bytes(), kBytes);
  auto sixth = VerbsMemoryRegion::allocate(dev.value(), kBytes, kAccess, kDefaultDomain);
  ASSERT_TRUE(sixth.ok());
  EXPECT_TRUE(all_zero(*sixth.value()));
  ASSERT_TRUE(wait_made(*dev.value(), 3));
}

// Small kinds are not made ahead, nor anything while the warm limit leaves
// no room (`verbs:<device>,warm=0`).
TEST(VerbsSpares, NoneForSmallRegionsOrWithoutRoom) {
  const auto name = verbs_device_name();
  if (!name) GTEST_SKIP() << "provider " << test::provider_spec() << " is not verbs";
  auto dev = VerbsDevice::open(*name);
  ASSERT_TRUE(dev.ok()) << dev.error().message;
  std::vector<std::unique_ptr<MemoryRegion>> held;
  for (int i = 0; i < 3; ++i) {
    auto r = VerbsMemoryRegion::allocate(dev.value(), 64u << 10, kAccess, kDefaultDomain);
    ASSERT_TRUE(r.ok());
    held.push_back(std::move(r.value()));
  }
  dev.value()->warm.set_limit(0);
  for (int i = 0; i < 3; ++i) {
    auto r = VerbsMemoryRegion::allocate(dev.value(), 2u << 20, kAccess, kDefaultDomain);
    ASSERT_TRUE(r.ok());
    held.push_back(std::move(r.value()));
  }
  EXPECT_EQ(dev.value()->spares.pending_bytes(), 0u);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(dev.value()->spares.made(), 0u);
  EXPECT_EQ(dev.value()->warm.bytes(), 0u);
}

}  // namespace
}  // namespace catena::fabric::verbs
