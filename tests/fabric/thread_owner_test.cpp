// ThreadOwner, the check behind `_st` functions: the owner is the first
// thread to call in (or the one that bound itself), any other thread aborts
// with the function's name; release() hands the object over. The same check
// in place in a Replica: tests/chain/replica_thread_test.cpp.
#include <gtest/gtest.h>
#include <thread>

#include <catena/fabric/thread_owner.hpp>

namespace catena {
namespace {

#if defined(CATENA_THREAD_CHECKS) && CATENA_THREAD_CHECKS
constexpr bool kChecks = true;
#else
constexpr bool kChecks = false;
#endif

struct Agent {
  void work_st() { CATENA_ST_CHECK(owner_); }
  fabric::ThreadOwner owner_;
};

class ThreadOwnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kChecks)
      GTEST_SKIP() << "built without CATENA_THREAD_CHECKS (a release build): the checks are compiled out";
    // The child of a death test re-runs the test from the start, rather
    // than forking a process that holds threads it cannot run.
    GTEST_FLAG_SET(death_test_style, "threadsafe");
  }
};

TEST_F(ThreadOwnerTest, OwnerIsTheFirstThreadToCallIn) {
  Agent a;
  a.work_st();
  a.work_st();
  std::thread([&] {
    Agent b;  // a fresh object is free: this thread takes it
    b.work_st();
  }).join();
}

TEST_F(ThreadOwnerTest, WrongThreadAbortsNamingTheFunction) {
  EXPECT_DEATH(
      {
        Agent a;
        a.work_st();
        std::thread([&] { a.work_st(); }).join();
      },
      "thread check failed: .*work_st.*owned by thread");
}

TEST_F(ThreadOwnerTest, BoundThreadOwnsBeforeAnyCall) {
  EXPECT_DEATH(
      {
        Agent a;
        a.owner_.bind_to_current_thread();
        std::thread([&] { a.work_st(); }).join();
      },
      "thread check failed: .*work_st");
}

TEST_F(ThreadOwnerTest, ReleaseHandsTheObjectOver) {
  Agent a;
  a.work_st();
  a.owner_.release();
  std::thread([&] { a.work_st(); }).join();
  // Now the other thread owns it (it ended, but nobody released it).
  EXPECT_DEATH(a.work_st(), "thread check failed");
}

}  // namespace
}  // namespace catena
