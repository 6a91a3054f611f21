// A Replica's entry points are `_st`: owned by the node's data-plane thread.
// In builds with CATENA_THREAD_CHECKS a call from another thread aborts
// (tests/fabric/thread_owner_test.cpp tests the check itself).
#include <gtest/gtest.h>
#include <thread>

#include <catena/chain/replica.hpp>
#include <catena/fabric/clock.hpp>
#include <catena/fabric/fabric.hpp>

namespace catena::chain {
namespace {

#if defined(CATENA_THREAD_CHECKS) && CATENA_THREAD_CHECKS
constexpr bool kChecks = true;
#else
constexpr bool kChecks = false;
#endif

// A replica belongs to its node's data-plane thread: a call from any other
// thread after that one started driving it aborts.
TEST(ReplicaThreads, CallFromASecondThreadAborts) {
  if (!kChecks)
    GTEST_SKIP() << "built without CATENA_THREAD_CHECKS (a release build): the checks are compiled out";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto provider = fabric::Provider::open("soft");
  ASSERT_TRUE(provider) << provider.error().message;
  ManualClock clock;
  ReplicaConfig cfg;
  cfg.channel = "c";
  cfg.epoch = 1;
  cfg.node_id = "n1";
  cfg.log.segment_bytes = 64 << 10;
  auto rep = Replica::create(*provider.value(), cfg, clock);
  ASSERT_TRUE(rep) << rep.error().message;
  std::thread([&] { (void)rep.value()->do_work(); }).join();  // the "data-plane thread"
  EXPECT_DEATH(rep.value()->tick(), "thread check failed: .*Replica::tick");
}

}  // namespace
}  // namespace catena::chain
