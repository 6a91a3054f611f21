// The fault-injecting wrapper: each fault does what it says and nothing
// else, over whichever provider CATENA_PROVIDER names. (With nothing armed
// the conformance suite runs through it: ctest's fabric_conformance_fault_soft.)
#include <chrono>
#include <cstring>
#include <future>
#include <gtest/gtest.h>

#include <catena/fabric/fault_provider.hpp>

#include "fabric_test_util.hpp"

namespace catena::fabric::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class FaultProviderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto inner = Provider::open(provider_spec());
    ASSERT_TRUE(inner.ok()) << inner.error().message;
    faults_ = std::make_shared<FaultInjector>();
    provider_ = std::make_unique<FaultProvider>(std::move(inner.value()), faults_);
    src_ = alloc(4096, kLocalWrite);
    dst_ = alloc(4096, kLocalWrite | kRemoteWrite | kRemoteRead);
    recv_ = alloc(4096, kLocalWrite);
  }

  std::unique_ptr<MemoryRegion> alloc(std::size_t size, std::uint32_t access) {
    auto mr = provider_->allocate(size, access);
    EXPECT_TRUE(mr.ok()) << mr.error().message;
    return mr.ok() ? std::move(mr.value()) : nullptr;
  }

  void connect() {
    auto pair = connect_pair(*provider_, *provider_);
    ASSERT_TRUE(pair.ok()) << pair.error().message;
    pair_ = std::move(pair.value());
  }

  // Writes `text` at `offset` of dst_ from the client.
  Errc write(std::uint64_t wr_id, std::size_t offset, const char* text) {
    const auto len = static_cast<std::uint32_t>(std::strlen(text));
    std::memcpy(src_->data() + offset, text, len);
    return pair_.client->post_write(wr_id, {src_.get(), offset, len},
                                    {pair_.server->expose(*dst_).value(), offset});
  }

  [[nodiscard]] std::string dst_text(std::size_t offset, std::size_t len) const {
    return {reinterpret_cast<const char*>(dst_->data() + offset), len};
  }

  std::shared_ptr<FaultInjector> faults_;
  std::unique_ptr<FaultProvider> provider_;
  std::unique_ptr<MemoryRegion> src_, dst_, recv_;
  EndpointPair pair_;
};

TEST_F(FaultProviderTest, SpecStringWrapsTheInnerProviderAndArmsItsDelays) {
  auto p = Provider::open("fault(connect_delay_ms=120):" + provider_spec());
  ASSERT_TRUE(p.ok()) << p.error().message;
  auto* fp = dynamic_cast<FaultProvider*>(p.value().get());
  ASSERT_NE(fp, nullptr);
  EXPECT_EQ(fp->name(), "fault:" + fp->inner().name());
  EXPECT_EQ(fp->faults().connect_delay_ns(), 120'000'000u);

  EXPECT_EQ(Provider::open("fault:").code(), Errc::invalid_argument);
  EXPECT_EQ(Provider::open("fault(connect_delay_ms=x):soft").code(), Errc::invalid_argument);
  EXPECT_EQ(Provider::open("fault(latency=3):soft").code(), Errc::invalid_argument);
  EXPECT_EQ(Provider::open("fault(connect_delay_ms=3:soft").code(), Errc::invalid_argument);
}

TEST_F(FaultProviderTest, ConnectDelayHoldsEachConnectAndTimesOutWhenLongerThanItsTimeout) {
  auto listener = provider_->listen(listen_address());
  ASSERT_TRUE(listener.ok()) << listener.error().message;
  const std::string addr = listener.value()->address();
  faults_->set_connect_delay(300ms);

  auto start = Clock::now();
  auto fut = std::async(std::launch::async, [&] { return provider_->connect(addr, {}, 5000ms); });
  auto accepted = listener.value()->accept(10000ms);
  auto connected = fut.get();
  const auto took = Clock::now() - start;
  ASSERT_TRUE(connected.ok()) << connected.error().message;
  ASSERT_TRUE(accepted.ok()) << accepted.error().message;
  EXPECT_GE(took, 300ms);
  EXPECT_EQ(connected.value()->state(), EndpointState::connected);

  start = Clock::now();
  auto too_slow = provider_->connect(addr, {}, 100ms);
  EXPECT_EQ(too_slow.code(), Errc::timeout);
  EXPECT_GE(Clock::now() - start, 100ms);
  EXPECT_EQ(faults_->counters().connects, 2u);
}

TEST_F(FaultProviderTest, AcceptDelayHandsOutTheEndpointOnlyAfterTheDelay) {
  auto listener = provider_->listen(listen_address());
  ASSERT_TRUE(listener.ok()) << listener.error().message;
  faults_->set_accept_delay(300ms);
  // verbs completes a connect only once the listener accepts (rdma_accept):
  // connect on another thread, as peers do.
  auto fut = std::async(std::launch::async,
                        [&] { return provider_->connect(listener.value()->address(), {}, 5000ms); });
  const auto start = Clock::now();
  Result<std::unique_ptr<Endpoint>> accepted = make_error(Errc::timeout, "");
  while ((accepted = listener.value()->accept(50ms)).code() == Errc::timeout &&
         Clock::now() - start < 5000ms) {
  }
  ASSERT_TRUE(accepted.ok()) << accepted.error().message;
  EXPECT_GE(Clock::now() - start, 300ms) << "handed out before the delay";
  auto connected = fut.get();
  ASSERT_TRUE(connected.ok()) << connected.error().message;
  EXPECT_EQ(faults_->counters().accepts, 1u);
}

TEST_F(FaultProviderTest, FailsExactlyTheNthPostAndForwardsTheOthers) {
  connect();
  faults_->fail_post(2, Errc::backpressure);
  EXPECT_EQ(write(1, 0, "one"), Errc::ok);
  EXPECT_EQ(write(2, 8, "two"), Errc::backpressure);
  EXPECT_EQ(write(3, 16, "three"), Errc::ok);
  EXPECT_EQ(wait_send(*pair_.client).wr_id, 1u);
  EXPECT_EQ(wait_send(*pair_.client).wr_id, 3u);
  EXPECT_EQ(dst_text(0, 3), "one");
  EXPECT_EQ(dst_text(8, 3), std::string(3, '\0')) << "a failed post must not reach the target";
  EXPECT_EQ(dst_text(16, 5), "three");
  EXPECT_EQ(faults_->counters().failed_posts, 1u);
}

TEST_F(FaultProviderTest, DroppedCompletionIsNeverReportedButItsWriteLanded) {
  connect();
  faults_->drop_completions(1);
  ASSERT_EQ(write(1, 0, "lost"), Errc::ok);
  ASSERT_EQ(write(2, 8, "kept"), Errc::ok);
  Completion c = wait_send(*pair_.client);
  EXPECT_EQ(c.wr_id, 2u);
  EXPECT_EQ(c.status, WcStatus::success);
  Completion none{};
  EXPECT_EQ(poll_until([&] { return pair_.client->poll_send(&none, 1); }, 1, 100ms), 0);
  EXPECT_EQ(dst_text(0, 4), "lost");
  EXPECT_EQ(dst_text(8, 4), "kept");
  EXPECT_EQ(faults_->counters().dropped_completions, 1u);
}

TEST_F(FaultProviderTest, DelayedCompletionsComeLateAndInOrder) {
  connect();
  faults_->set_completion_delay(200ms);
  ASSERT_EQ(pair_.server->post_recv(7, {recv_.get(), 0, 64}), Errc::ok);
  const auto start = Clock::now();
  ASSERT_EQ(write(1, 0, "first"), Errc::ok);
  std::memcpy(src_->data() + 100, "hello", 5);
  ASSERT_EQ(pair_.client->post_send(2, {src_.get(), 100, 5}), Errc::ok);
  Completion c[2];
  EXPECT_EQ(poll_until([&] { return pair_.client->poll_send(c, 2); }, 1, 100ms), 0) << "reported too early";
  EXPECT_EQ(poll_until([&] { return pair_.client->poll_send(c, 2); }, 2, 5000ms), 2);
  EXPECT_GE(Clock::now() - start, 200ms);
  EXPECT_EQ(c[0].wr_id, 1u);
  EXPECT_EQ(c[1].wr_id, 2u);
  Completion r = wait_recv(*pair_.server);
  EXPECT_EQ(r.wr_id, 7u);
  EXPECT_EQ(r.byte_len, 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(recv_->data()), 5), "hello");
  EXPECT_EQ(dst_text(0, 5), "first");
}

TEST_F(FaultProviderTest, SilentPeerSwallowsPostsAndAConnectToItTimesOut) {
  connect();
  ASSERT_EQ(pair_.server->post_recv(7, {recv_.get(), 0, 64}), Errc::ok);
  faults_->set_silent(true);
  ASSERT_EQ(write(1, 0, "nowhere"), Errc::ok);
  std::memcpy(src_->data() + 100, "hello", 5);
  ASSERT_EQ(pair_.client->post_send(2, {src_.get(), 100, 5}), Errc::ok);
  Completion c{};
  EXPECT_EQ(
      poll_until([&] { return pair_.client->poll_send(&c, 1) + pair_.server->poll_recv(&c, 1); }, 1, 200ms),
      0);
  EXPECT_EQ(dst_text(0, 7), std::string(7, '\0'));
  EXPECT_EQ(pair_.client->state(), EndpointState::connected) << "silence is not a disconnect";
  EXPECT_EQ(faults_->counters().swallowed_posts, 2u);

  // Lifted, it leaves the connection broken, as a reliable connection ends
  // when its retries run out: writes were lost, nothing may follow them.
  faults_->set_silent(false);
  EXPECT_EQ(pair_.client->state(), EndpointState::error);
  EXPECT_EQ(write(3, 0, "after"), Errc::ok);
  EXPECT_NE(wait_send(*pair_.client).status, WcStatus::success);
  EXPECT_EQ(dst_text(0, 5), std::string(5, '\0'));

  const std::string addr = pair_.listener->address();
  faults_->silence_peer(addr);
  const auto start = Clock::now();
  EXPECT_EQ(provider_->connect(addr, {}, 150ms).code(), Errc::timeout);
  EXPECT_GE(Clock::now() - start, 150ms);
  faults_->unsilence_peer(addr);
}

// A silence during which nothing was posted loses nothing: the endpoint
// carries on once it lifts.
TEST_F(FaultProviderTest, ASilenceThatSwallowedNothingLeavesTheEndpointWorking) {
  connect();
  faults_->set_silent(true);
  EXPECT_EQ(pair_.client->state(), EndpointState::connected);
  faults_->set_silent(false);
  ASSERT_EQ(write(3, 0, "again"), Errc::ok);
  EXPECT_EQ(wait_send(*pair_.client).wr_id, 3u);
  EXPECT_EQ(dst_text(0, 5), "again");
}

}  // namespace
}  // namespace catena::fabric::test
