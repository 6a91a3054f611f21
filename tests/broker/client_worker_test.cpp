// The workers a client's poll() hands its waiting calls to
// (broker/client/src/client_worker.hpp): a dial worker with more than one
// thread runs a new connect while another waits out its timeout, and an
// abandoned call's job either does not run (not started yet) or has its
// answer dropped on the worker's thread.
#include "../../broker/client/src/client_worker.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <gtest/gtest.h>
#include <memory>
#include <mutex>
#include <thread>

namespace catena::client_detail {
namespace {

using namespace std::chrono_literals;

// A job that blocks until released (a connect to a peer that answers
// nothing), with a bound so a failing test does not hang.
class Gate {
 public:
  void wait() {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, 10s, [&] { return open_; });
  }
  void open() {
    {
      std::lock_guard lk(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

template <class Pred>
bool eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(ClientWorker, AJobPostedWhileEveryThreadWaitsRunsOnAnotherThread) {
  ClientWorker worker("test-dial", 2);
  Gate gate;
  Call<int> stuck, next;
  stuck.start(worker, [&] {
    gate.wait();
    return 1;
  });
  next.start(worker, [] { return 2; });
  std::optional<int> got;
  EXPECT_TRUE(eventually([&] { return (got = next.take()).has_value(); }))
      << "the second job waited for the first";
  EXPECT_EQ(got, 2);
  EXPECT_FALSE(stuck.take().has_value());
  gate.open();
  EXPECT_TRUE(eventually([&] { return (got = stuck.take()).has_value(); }));
  EXPECT_EQ(got, 1);
}

TEST(ClientWorker, OneThreadRunsItsJobsInOrder) {
  ClientWorker worker("test-rt");
  Gate gate;
  Call<int> first, second;
  first.start(worker, [&] {
    gate.wait();
    return 1;
  });
  second.start(worker, [] { return 2; });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(second.take().has_value()) << "a one-thread worker ran a job out of order";
  gate.open();
  std::optional<int> got;
  EXPECT_TRUE(eventually([&] { return (got = second.take()).has_value(); }));
  EXPECT_EQ(got, 2);
  EXPECT_TRUE(first.take().has_value());
}

TEST(ClientWorker, AnAbandonedCallThatHasNotStartedDoesNotRun) {
  ClientWorker worker("test-rt");
  Gate gate;
  Call<int> blocker, dropped;
  std::atomic<bool> ran{false};
  blocker.start(worker, [&] {
    gate.wait();
    return 0;
  });
  dropped.start(worker, [&] {
    ran = true;
    return 1;
  });
  EXPECT_TRUE(dropped.busy());
  dropped.abandon();
  EXPECT_FALSE(dropped.busy());
  gate.open();
  Call<int> after;  // queued behind both: once it answered, the dropped one had its turn
  after.start(worker, [] { return 2; });
  EXPECT_TRUE(eventually([&] { return after.take().has_value(); }));
  EXPECT_FALSE(ran);
}

// What a connect's endpoint is to the worker: something that must be
// closed, here counted.
struct Closes {
  explicit Closes(std::atomic<int>& n) : closed(n) {}
  ~Closes() { ++closed; }
  std::atomic<int>& closed;
};

TEST(ClientWorker, TheAnswerOfAnAbandonedCallThatRanIsDropped) {
  ClientWorker worker("test-dial", 2);
  std::atomic<int> closed{0};
  Gate gate;
  std::atomic<bool> started{false};
  Call<std::unique_ptr<Closes>> running;
  running.start(worker, [&] {
    started = true;
    gate.wait();
    return std::make_unique<Closes>(closed);
  });
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  running.abandon();  // while it runs
  gate.open();
  EXPECT_TRUE(eventually([&] { return closed.load() == 1; })) << "the late answer was not dropped";

  Call<std::unique_ptr<Closes>> done;
  done.start(worker, [&] { return std::make_unique<Closes>(closed); });
  std::this_thread::sleep_for(50ms);  // answered, not taken
  done.abandon();
  EXPECT_EQ(closed.load(), 2);
}

// A client whose sessions are up holds no thread: a worker starts one for
// the job that needs it and lets it end after idle_exit without another
// (and starts one again for the next job).
TEST(ClientWorker, HoldsThreadsOnlyWhileItHasJobs) {
  ClientWorker worker("test-idle", 2, ClientWorker::Ending::join, 50ms);
  EXPECT_EQ(worker.threads(), 0u) << "a thread before any job";
  for (int round = 0; round < 2; ++round) {
    Call<int> call;
    call.start(worker, [round] { return round; });
    std::optional<int> got;
    EXPECT_TRUE(eventually([&] { return (got = call.take()).has_value(); }));
    EXPECT_EQ(got, round);
    EXPECT_TRUE(eventually([&] { return worker.threads() == 0; }))
        << "round " << round << ": a thread stayed";
  }
}

// The worker's end waits for a job in progress (Ending::join): what the job
// touches may go with the worker's owner.
TEST(ClientWorker, ItsEndWaitsForTheJobInProgress) {
  std::atomic<bool> finished{false};
  std::atomic<bool> started{false};
  {
    ClientWorker worker("test-end");
    Call<int> call;
    call.start(worker, [&] {
      started = true;
      std::this_thread::sleep_for(100ms);
      finished = true;
      return 1;
    });
    ASSERT_TRUE(eventually([&] { return started.load(); }));
  }
  EXPECT_TRUE(finished) << "the worker ended before its job";
}

}  // namespace
}  // namespace catena::client_detail
