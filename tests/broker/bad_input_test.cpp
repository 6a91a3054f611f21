// Bad input on the data plane: raw garbage on a broker's fabric port, a
// connection whose first message is not a hello, malformed hellos, a
// publisher that writes garbage frames into its ring, and writes with forged
// keys. Each must be refused without disturbing the broker or losing
// anything committed.
#include <unistd.h>

#include <algorithm>
#include <arpa/inet.h>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <optional>
#include <random>
#include <sys/socket.h>
#include <thread>

#include <catena/broker/broker.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/routes.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/chain/commit_watch.hpp>
#include <catena/chain/delivery.hpp>
#include <catena/chain/link.hpp>
#include <catena/chain/publish.hpp>
#include <catena/chain/wire.hpp>

#include "../test_env.hpp"

namespace catena {
namespace {

using test::bytes;
using test::provider_spec;

using namespace std::chrono_literals;
namespace wire = chain::wire;

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    broker::BrokerConfig cfg;
    cfg.node_id = "solo";
    cfg.provider = provider_spec();
    cfg.fabric_listen = test::listen_address();  // in the soft-RoCE VM: the rxe interface
    cfg.slot_count = 4;
    auto b = broker::Broker::start(cfg);
    ASSERT_TRUE(b.ok()) << b.error().message;
    broker_ = std::move(b.value());
    chain::ReplicaConfig rc;
    rc.channel = "c";
    rc.epoch = 1;
    rc.chain_length = 1;
    rc.head_addr = broker_->fabric_address();
    rc.log.segment_bytes = 256 << 10;
    ASSERT_EQ(broker_->configure(rc).status, broker::ConfigureStatus::applied);
    routes_.set(Route{"c", 0, 1, {{"solo", broker_->fabric_address()}}, 0, {}}, 1, 256 << 10);
    auto p = fabric::Provider::open(provider_spec());
    ASSERT_TRUE(p.ok());
    provider_ = std::move(p.value());
  }

  // Publishes `n` records and returns their offsets (all must be acked).
  std::vector<std::uint64_t> publish(int n, const std::string& prefix) {
    PublisherOptions po;
    po.provider = provider_spec();
    auto pub = Publisher::create(routes_, "c", po);
    EXPECT_TRUE(pub.ok());
    std::vector<std::uint64_t> offsets;
    for (int i = 0; i < n; ++i) {
      auto f = pub.value()->publish({}, bytes(prefix + std::to_string(i)));
      EXPECT_TRUE(pub.value()->flush(10s));
      auto r = f.get();
      EXPECT_EQ(r.status, PublishStatus::ok);
      offsets.push_back(r.offset);
    }
    return offsets;
  }

  // Reads everything committed from the start.
  std::vector<std::string> read_all(std::size_t expect) {
    SubscriberOptions so;
    so.provider = provider_spec();
    auto sub = Subscriber::create(routes_, "c", so);
    EXPECT_TRUE(sub.ok());
    std::vector<std::string> out;
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (out.size() < expect && std::chrono::steady_clock::now() < deadline) {
      sub.value()->poll([&](const Message& m) {
        out.emplace_back(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
      });
    }
    return out;
  }

  std::unique_ptr<broker::Broker> broker_;
  StaticRoutes routes_;
  std::unique_ptr<fabric::Provider> provider_;
};

TEST_F(BadInput, RawGarbageOnTheFabricPortIsDropped) {
  publish(5, "before-");
  const std::string addr = broker_->fabric_address();
  const auto colon = addr.rfind(':');
  const std::string host = addr.substr(0, colon);
  std::mt19937 rng(7);
  auto send_junk = [&](int type, std::uint16_t port) {
    int fd = socket(AF_INET, type, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    std::vector<char> junk(1 + rng() % 4096);
    for (auto& c : junk) c = static_cast<char>(rng());
    (void)!write(fd, junk.data(), junk.size());
    close(fd);
  };
  if (provider_spec().rfind("soft", 0) == 0) {
    // The soft provider's fabric port is a TCP listener: junk streams.
    for (int round = 0; round < 20; ++round)
      send_junk(SOCK_STREAM, static_cast<std::uint16_t>(std::stoi(addr.substr(colon + 1))));
  } else {
    // On verbs the fabric port lives in rdma_cm's port space; the device
    // itself takes RoCEv2 packets on UDP 4791: junk datagrams there.
    constexpr std::uint16_t kRoceV2Port = 4791;
    for (int round = 0; round < 20; ++round) send_junk(SOCK_DGRAM, kRoceV2Port);
  }
  // Every provider: fabric connections that hang up at once, or whose first
  // message is random bytes of random length (longer than any wire message
  // too: the broker's receive then fails).
  auto junk = provider_->allocate(8192, fabric::kLocalWrite);
  ASSERT_TRUE(junk.ok()) << junk.error().message;
  for (std::size_t i = 0; i < junk.value()->size(); ++i) junk.value()->data()[i] = std::byte(rng() & 0xff);
  for (int round = 0; round < 9; ++round) {
    auto ep = provider_->connect(addr);
    ASSERT_TRUE(ep.ok()) << ep.error().message;
    if (round % 3 == 0) continue;  // hang up without a word
    const auto len = static_cast<std::uint32_t>(
        1 + rng() % std::min<std::uint32_t>(8192, ep.value()->caps().max_send_size));
    ASSERT_EQ(ep.value()->post_send(1, {junk.value().get(), 0, len}), fabric::Errc::ok);
    fabric::Completion c{};
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (ep.value()->poll_send(&c, 1) == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
  }
  publish(5, "after-");
  auto all = read_all(10);
  ASSERT_EQ(all.size(), 10u);
  EXPECT_EQ(all[0], "before-0");
  EXPECT_EQ(all[9], "after-4");
}

TEST_F(BadInput, NonHelloAndMalformedHellosAreRefused) {
  publish(3, "x");
  for (int variant = 0; variant < 3; ++variant) {
    auto ep = provider_->connect(broker_->fabric_address());
    ASSERT_TRUE(ep.ok()) << ep.error().message;
    auto link = chain::Link::create(*provider_, std::move(ep.value()));
    ASSERT_TRUE(link.ok());
    std::byte buf[wire::kMaxMessage];
    if (variant == 0) {
      // A well-formed message, but not a hello.
      ASSERT_EQ(link.value()->send(wire::SubscriberCredit{42}), fabric::Errc::ok);
    } else if (variant == 1) {
      // A hello for a channel that does not exist.
      wire::PublisherHello h{};
      h.ref.set("nope", 0, 1);
      ASSERT_EQ(link.value()->send(h), fabric::Errc::ok);
      auto w = wire::decode<wire::PublisherWelcome>(buf, link.value()->wait_message(buf, 5s));
      ASSERT_TRUE(w);
      EXPECT_EQ(w->status, wire::Status::unknown_channel);
    } else {
      // A subscriber asking for a position beyond the end.
      auto ring = provider_->allocate(1 << 20, fabric::kLocalWrite | fabric::kRemoteWrite);
      wire::SubscriberHello h{};
      h.ref.set("c", 0, 0);
      h.mode = wire::StartMode::offset;
      h.start_offset = 1'000'000;
      h.ring_bytes = 1 << 20;
      ASSERT_TRUE(chain::expose_into(link.value()->ep(), *ring.value(), h.ring).ok());
      ASSERT_EQ(link.value()->send(h), fabric::Errc::ok);
      auto w = wire::decode<wire::SubscriberWelcome>(buf, link.value()->wait_message(buf, 5s));
      ASSERT_TRUE(w);
      EXPECT_EQ(w->status, wire::Status::bad_request);
    }
  }
  publish(2, "y");
  EXPECT_EQ(read_all(5).size(), 5u);
}

TEST_F(BadInput, PublisherWritingGarbageFramesIsCutOffAndNothingIsStored) {
  publish(4, "good-");
  auto ep = provider_->connect(broker_->fabric_address());
  ASSERT_TRUE(ep.ok());
  auto link = chain::Link::create(*provider_, std::move(ep.value()));
  ASSERT_TRUE(link.ok());
  wire::PublisherHello h{};
  h.ref.set("c", 0, 1);
  h.producer_id = 666;
  h.producer_epoch = 1;
  h.ring_bytes = 64 << 10;
  ASSERT_EQ(link.value()->send(h), fabric::Errc::ok);
  std::byte buf[wire::kMaxMessage];
  auto w = wire::decode<wire::PublisherWelcome>(buf, link.value()->wait_message(buf, 5s));
  ASSERT_TRUE(w);
  ASSERT_EQ(w->status, wire::Status::ok);
  auto junk = provider_->allocate(4096, fabric::kLocalWrite);
  ASSERT_TRUE(junk.ok());
  std::mt19937 rng(11);
  for (std::size_t i = 0; i < 4096; ++i)
    junk.value()->data()[i] = std::byte(static_cast<std::uint8_t>(rng()));
  ASSERT_EQ(link.value()->ep().post_write_imm(1, {junk.value().get(), 0, 4096}, {w->ring, 0}, 4096 / 8),
            fabric::Errc::ok);
  // The broker drops the session.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (link.value()->connected() && std::chrono::steady_clock::now() < deadline) {
    link.value()->poll_send();
    link.value()->poll_events();
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_FALSE(link.value()->connected()) << "broker kept a publisher that wrote garbage";
  publish(2, "later-");
  auto all = read_all(6);
  ASSERT_EQ(all.size(), 6u);
  EXPECT_EQ(all[3], "good-3");
  EXPECT_EQ(all[4], "later-0");
  EXPECT_GE(broker_->stats().partitions[0].replica.corrupt_frames, 1u);
}

// A replica the controller configured with an access secret
// (ChainAssignment.access_secret) takes client hellos only with it: a
// publisher, a subscriber or a commit watch without it (a route read by
// someone the controller did not give it to) or with another partition's is
// refused as unauthenticated, and nothing it sent is stored. With it, all
// three work. The controller hands the secret out with routes
// (PartitionRoute.access_secret); `Tenants*` tests that it does so only to
// those who may use the channel.
TEST_F(BadInput, ClientHellosWithoutThePartitionsAccessSecretAreRefused) {
  wire::AccessSecret secret{};
  for (std::size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<std::uint8_t>(0xa0 + i);
  wire::AccessSecret other = secret;
  other[7] ^= 0x01;
  chain::ReplicaConfig rc;
  rc.channel = "locked";
  rc.epoch = 1;
  rc.chain_length = 1;
  rc.head_addr = broker_->fabric_address();
  rc.log.segment_bytes = 256 << 10;
  rc.access_secret = secret;
  ASSERT_EQ(broker_->configure(rc).status, broker::ConfigureStatus::applied);

  // Raw hellos, each on its own connection: the welcome's status.
  auto answer = [&](auto hello, auto welcome_type) -> std::optional<wire::Status> {
    auto ep = provider_->connect(broker_->fabric_address());
    if (!ep.ok()) return std::nullopt;
    auto link = chain::Link::create(*provider_, std::move(ep.value()));
    if (!link.ok() || link.value()->send(hello) != fabric::Errc::ok) return std::nullopt;
    std::byte buf[wire::kMaxMessage];
    auto w = wire::decode<decltype(welcome_type)>(buf, link.value()->wait_message(buf, 5s));
    if (!w) return std::nullopt;
    return w->status;
  };
  auto carry = [](auto& hello, const wire::AccessSecret* s) {
    if (s != nullptr) std::memcpy(hello.access_secret, s->data(), sizeof hello.access_secret);
  };
  const std::array<const wire::AccessSecret*, 2> refused_secrets = {nullptr, &other};
  for (const wire::AccessSecret* carried : refused_secrets) {
    const char* what = carried == nullptr ? "no secret" : "another partition's secret";
    wire::PublisherHello ph = chain::PublishClient::hello("locked", 0, 1, 777, 1, 64 << 10, 0);
    carry(ph, carried);
    EXPECT_EQ(answer(ph, wire::PublisherWelcome{}), wire::Status::unauthenticated) << what;
    wire::CommitWatchHello wh = chain::CommitWatchClient::hello("locked", 0, 1, 777, 1);
    carry(wh, carried);
    EXPECT_EQ(answer(wh, wire::CommitWatchWelcome{}), wire::Status::unauthenticated) << what;
  }
  wire::PublisherHello ph = chain::PublishClient::hello("locked", 0, 1, 777, 1, 64 << 10, 0);
  carry(ph, &secret);
  EXPECT_EQ(answer(ph, wire::PublisherWelcome{}), wire::Status::ok);

  // Through the client library: the route's secret goes into every hello.
  auto publish_with = [&](const wire::AccessSecret& carried, const std::string& payload) {
    StaticRoutes routes;
    Route route{"locked", 0, 1, {{"solo", broker_->fabric_address()}}, 0, {}};
    route.access_secret = carried;
    routes.set(route, 1, 256 << 10);
    PublisherOptions po;
    po.provider = provider_spec();
    po.retry_timeout = 5s;
    auto pub = Publisher::create(routes, "locked", po);
    EXPECT_TRUE(pub.ok());
    auto f = pub.value()->publish({}, bytes(payload));
    (void)pub.value()->flush(10s);
    return f.get();
  };
  auto read_with = [&](const wire::AccessSecret& carried, std::vector<std::string>* out,
                       std::vector<client::ErrorCode>* notices) {
    StaticRoutes routes;
    Route route{"locked", 0, 1, {{"solo", broker_->fabric_address()}}, 0, {}};
    route.access_secret = carried;
    routes.set(route, 1, 256 << 10);
    SubscriberOptions so;
    so.provider = provider_spec();
    auto sub = Subscriber::create(routes, "locked", so);
    ASSERT_TRUE(sub.ok());
    sub.value()->on_notice([&](const Notice& n) { notices->push_back(n.status); });
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    while (std::chrono::steady_clock::now() < deadline && out->empty() && notices->empty()) {
      sub.value()->poll([&](const Message& m) {
        out->emplace_back(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
      });
    }
  };
  const auto refused = publish_with(wire::AccessSecret{}, "without");
  EXPECT_EQ(refused.status, PublishStatus::unauthenticated);
  EXPECT_EQ(refused.error(), client::ErrorCode::unauthenticated);
  EXPECT_FALSE(client::retriable(refused.error()));
  EXPECT_EQ(publish_with(other, "forged").status, PublishStatus::unauthenticated);
  const auto taken = publish_with(secret, "with");
  ASSERT_EQ(taken.status, PublishStatus::ok);
  EXPECT_EQ(taken.offset, 0u) << "a refused publisher stored something";

  std::vector<std::string> got;
  std::vector<client::ErrorCode> notices;
  read_with(wire::AccessSecret{}, &got, &notices);
  EXPECT_TRUE(got.empty());
  ASSERT_FALSE(notices.empty());
  EXPECT_EQ(notices.front(), client::ErrorCode::unauthenticated);
  got.clear();
  notices.clear();
  read_with(secret, &got, &notices);
  EXPECT_TRUE(notices.empty());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "with");
}

TEST_F(BadInput, ForgedKeysCannotWriteIntoTheBroker) {
  publish(3, "safe-");
  auto ep = provider_->connect(broker_->fabric_address());
  ASSERT_TRUE(ep.ok());
  auto link = chain::Link::create(*provider_, std::move(ep.value()));
  ASSERT_TRUE(link.ok());
  wire::PublisherHello h{};
  h.ref.set("c", 0, 1);
  h.producer_id = 777;
  h.producer_epoch = 1;
  h.ring_bytes = 64 << 10;
  ASSERT_EQ(link.value()->send(h), fabric::Errc::ok);
  std::byte buf[wire::kMaxMessage];
  auto w = wire::decode<wire::PublisherWelcome>(buf, link.value()->wait_message(buf, 5s));
  ASSERT_TRUE(w && w->status == wire::Status::ok);
  auto src = provider_->allocate(4096, fabric::kLocalWrite);
  fabric::RemoteRegion forged = w->ring;
  forged.rkey ^= 0x1234567u;
  ASSERT_EQ(link.value()->ep().post_write(1, {src.value().get(), 0, 64}, {forged, 0}), fabric::Errc::ok);
  fabric::Completion c{};
  for (int i = 0; i < 100000 && link.value()->ep().poll_send(&c, 1) == 0; ++i)
    std::this_thread::sleep_for(10us);
  EXPECT_EQ(c.status, fabric::WcStatus::remote_access_error);
  publish(2, "still-");
  auto all = read_all(5);
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all[0], "safe-0");
  EXPECT_EQ(all[4], "still-1");
}

// A client cannot exhaust a broker: sessions per partition and publishers'
// ring memory per node are capped, refused with resource_exhausted, and
// released when the session goes.
TEST_F(BadInput, SessionsAndRingMemoryAreCappedAndReleased) {
  broker::BrokerConfig cfg;
  cfg.node_id = "capped";
  cfg.provider = provider_spec();
  cfg.fabric_listen = test::listen_address();
  cfg.slot_count = 2;
  cfg.limits.max_publishers = 3;
  cfg.limits.max_subscribers = 2;
  cfg.limits.max_producers = 4;
  cfg.session_memory_bytes = 3 * (64 << 10);  // three rings of the smallest size
  auto b = broker::Broker::start(cfg);
  ASSERT_TRUE(b.ok()) << b.error().message;
  auto& capped = *b.value();
  for (const char* name : {"x", "y"}) {
    chain::ReplicaConfig rc;
    rc.channel = name;
    rc.epoch = 1;
    rc.chain_length = 1;
    rc.head_addr = capped.fabric_address();
    rc.log.segment_bytes = 64 << 10;
    ASSERT_EQ(capped.configure(rc).status, broker::ConfigureStatus::applied);
  }
  auto hello = [&](const char* channel, std::uint64_t producer, std::uint32_t ring_bytes) {
    wire::PublisherHello h{};
    h.ref.set(channel, 0, 1);
    h.producer_id = producer;
    h.producer_epoch = 1;
    h.ring_bytes = ring_bytes;
    return chain::Link::dial<wire::PublisherWelcome>(*provider_, capped.fabric_address(), h, 5s);
  };
  // Ring memory is per node: two sessions on x and one on y use it all.
  std::vector<chain::Link::Dialed<wire::PublisherWelcome>> held;
  for (auto [ch, id] : {std::pair{"x", 1}, std::pair{"x", 2}, std::pair{"y", 3}}) {
    held.push_back(hello(ch, static_cast<std::uint64_t>(id), 64 << 10));
    ASSERT_TRUE(held.back().welcome.has_value()) << held.back().error.message;
    EXPECT_EQ(held.back().welcome->status, wire::Status::ok);
  }
  auto over_memory = hello("y", 4, 64 << 10);
  ASSERT_TRUE(over_memory.welcome.has_value());
  EXPECT_EQ(over_memory.welcome->status, wire::Status::resource_exhausted);
  auto huge = hello("y", 5, 256u << 20);  // the largest ring a hello may ask for
  ASSERT_TRUE(huge.welcome.has_value());
  EXPECT_EQ(huge.welcome->status, wire::Status::resource_exhausted);
  // A session that goes returns its memory.
  held.pop_back();
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  wire::Status again = wire::Status::resource_exhausted;
  while (again != wire::Status::ok && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
    auto d = hello("y", 6, 64 << 10);
    if (d.welcome) again = d.welcome->status;
    if (again == wire::Status::ok) held.push_back(std::move(d));
  }
  EXPECT_EQ(again, wire::Status::ok);

  // Subscribers per partition replica.
  std::vector<chain::Link::Dialed<wire::SubscriberWelcome>> subs;
  std::vector<std::unique_ptr<fabric::MemoryRegion>> rings;
  for (int i = 0; i < 3; ++i) {
    auto ring = provider_->allocate(64 << 10, fabric::kLocalWrite | fabric::kRemoteWrite);
    ASSERT_TRUE(ring.ok());
    wire::SubscriberHello h{};
    h.ref.set("x", 0, 0);
    h.mode = wire::StartMode::earliest;
    h.ring_bytes = 64 << 10;
    const fabric::MemoryRegion& region = *ring.value();
    rings.push_back(std::move(ring.value()));
    subs.push_back(chain::Link::dial<wire::SubscriberWelcome>(
        *provider_, capped.fabric_address(), h, 5s, [&](fabric::Endpoint& ep, wire::SubscriberHello& hh) {
          return chain::expose_into(ep, region, hh.ring);
        }));
    ASSERT_TRUE(subs.back().welcome.has_value()) << subs.back().error.message;
    EXPECT_EQ(subs.back().welcome->status, i < 2 ? wire::Status::ok : wire::Status::resource_exhausted) << i;
  }
  capped.stop();
}

}  // namespace
}  // namespace catena
