// Tenants on the data plane, with real processes: a controller and three
// brokers (LocalCluster), two tenants, each with a channel. Tenant B's
// client cannot use tenant A's channel: not through the controller (its
// routes are A's alone), and not around it either. Knowing the brokers'
// addresses and A's channel (a route as the admin sees it, without its
// access secret), or carrying the secret of B's own partition, its
// publisher and subscriber are refused by A's replicas as unauthenticated,
// and A's data is unchanged. A's own client, with A's token, publishes and
// reads as usual. Rotating a token revokes the secrets given out before.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <gtest/gtest.h>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <vector>

#include <catena/broker/controller_routes.hpp>
#include <catena/broker/local_cluster.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/chain/domain.hpp>
#include <catena/chain/link.hpp>
#include <catena/chain/publish.hpp>
#include <catena/control/controller_client.hpp>

namespace catena {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::span<const std::byte> as_bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

control::ControllerClient::Options controller_as(const std::string& address, const std::string& token) {
  control::ControllerClient::Options co;
  co.address = address;
  co.token = token;
  return co;
}

// A route as the admin is given it, less the access secret.
Route without_secret(const control::idl::PartitionRoute& r) {
  Route out = broker::ControllerRoutes::to_route(r);
  out.access_secret = {};
  return out;
}

// Publishes one record; its result.
PublishResult publish_one(RouteSource& routes, const std::string& channel, const std::string& payload) {
  PublisherOptions po;
  po.retry_timeout = 5s;
  auto pub = Publisher::create(routes, channel, po);
  if (!pub) {
    PublishResult r;
    r.status = PublishStatus::invalid_argument;
    return r;
  }
  auto f = pub.value()->publish({}, as_bytes_of(payload));
  (void)pub.value()->flush(10s);
  return f.get();
}

// Reads partition 0 from the start for up to `wait`: the payloads, and the
// first notice's status (ok if none).
std::pair<std::vector<std::string>, client::ErrorCode> read_all(RouteSource& routes,
                                                                const std::string& channel,
                                                                std::size_t expect,
                                                                std::chrono::milliseconds wait) {
  std::vector<std::string> got;
  client::ErrorCode notice = client::ErrorCode::ok;
  auto sub = Subscriber::create(routes, channel, {});
  if (!sub) return {got, client::ErrorCode::invalid_argument};
  sub.value()->on_notice([&](const Notice& n) {
    if (notice == client::ErrorCode::ok) notice = n.status;
  });
  const auto deadline = Clock::now() + wait;
  while (Clock::now() < deadline && got.size() < expect && notice == client::ErrorCode::ok) {
    if (sub.value()->poll([&](const Message& m) {
          got.emplace_back(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
        }) == 0) {
      std::this_thread::sleep_for(1ms);
    }
  }
  return {got, notice};
}

// A publisher hello for the route's partition carrying the route's access
// secret, sent over a connection of protection domain `domain` to the
// head: the head's answer (bad_request if nothing came back).
chain::wire::Status hello_over_domain(fabric::Provider& provider, const Route& r, fabric::DomainId domain) {
  fabric::EndpointConfig cfg;
  cfg.domain = domain;
  auto ep = provider.connect(r.replicas.front().fabric_addr, cfg, 5s);
  if (!ep) return chain::wire::Status::unavailable;
  chain::wire::PublisherHello h{};
  h.ref.set(r.channel, r.partition, r.epoch);
  h.producer_id = 0x5eed;
  h.producer_epoch = 1;
  h.ring_bytes = 1 << 16;
  std::memcpy(h.access_secret, r.access_secret.data(), sizeof h.access_secret);
  auto d = chain::Link::Dialing<chain::wire::PublisherWelcome>::start_on(provider, std::move(ep.value()), h);
  const auto deadline = Clock::now() + 5s;
  while (d.poll() == chain::Link::DialState::waiting && Clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  auto out = d.take();
  return out.welcome ? out.welcome->status : chain::wire::Status::bad_request;
}

TEST(TenantDataPlane, AnotherTenantsClientIsRefusedByTheReplicasEvenWithTheRoute) {
  ClusterOptions o;
  o.nodes = 3;
  o.dir = "tenant-data-test";
  o.quiet = true;
  LocalCluster cluster(o);
  std::string err;
  ASSERT_TRUE(cluster.start(&err)) << err;
  const std::string address = cluster.controller_address();

  // An open cluster (no admin token): the admin is whoever does not
  // authenticate; a client that authenticates as a tenant is held to it.
  control::ControllerClient admin(controller_as(address, ""));
  auto token_a = admin.create_tenant("acme", {});
  auto token_b = admin.create_tenant("bravo", {});
  ASSERT_TRUE(token_a.ok()) << token_a.error().describe();
  ASSERT_TRUE(token_b.ok()) << token_b.error().describe();
  for (const auto& [name, token] :
       {std::pair{"acme.orders", *token_a}, std::pair{"bravo.orders", *token_b}}) {
    control::ControllerClient as_tenant(controller_as(address, token));
    control::idl::ChannelConfig cfg;
    cfg.name = name;
    cfg.partitions = 1;
    cfg.replication = 3;
    cfg.segment_bytes = 1 << 20;
    cfg.ttl_ms = 600000;
    auto ch = as_tenant.create_channel(cfg);
    ASSERT_TRUE(ch.ok()) << name << ": " << ch.error().describe();
  }

  // A's client, with A's token: the controller's route carries the secret.
  broker::ControllerRoutes routes_a(controller_as(address, *token_a), "tenant-a");
  const auto a_first = publish_one(routes_a, "acme.orders", "a-0");
  ASSERT_EQ(a_first.status, PublishStatus::ok);

  // B through the controller: no route of A's channel.
  broker::ControllerRoutes routes_b(controller_as(address, *token_b), "tenant-b");
  auto refused_route = routes_b.route("acme.orders", 0, 0);
  ASSERT_FALSE(refused_route.ok());
  EXPECT_EQ(refused_route.error().code, client::ErrorCode::unauthenticated) << refused_route.error().message;

  // B around the controller: A's route as the admin sees it (every broker
  // address is in it), without the secret, or with B's own partition's.
  auto a_route = admin.get_route("acme.orders", 0, 0);
  auto b_route = control::ControllerClient(controller_as(address, *token_b)).get_route("bravo.orders", 0, 0);
  ASSERT_TRUE(a_route.ok() && b_route.ok());
  ASSERT_EQ(a_route->access_secret.size(), 16u);
  ASSERT_NE(a_route->access_secret, b_route->access_secret);
  Route forged = without_secret(*a_route);
  Route stolen = forged;
  std::memcpy(stolen.access_secret.data(), b_route->access_secret.data(), stolen.access_secret.size());
  for (const Route* r : {&forged, &stolen}) {
    const char* what = r == &forged ? "no secret" : "bravo's secret";
    StaticRoutes by_hand;
    by_hand.set(*r, 1, 1 << 20);
    const auto res = publish_one(by_hand, "acme.orders", "b-intruder");
    EXPECT_EQ(res.status, PublishStatus::unauthenticated) << what;
    const auto [got, notice] = read_all(by_hand, "acme.orders", 1, 3s);
    EXPECT_TRUE(got.empty()) << what << ": read " << got.size() << " of acme's records";
    EXPECT_EQ(notice, client::ErrorCode::unauthenticated) << what;
  }

  // A's real secret, stolen, on a connection of B's protection domain (or
  // the default one): refused, as such a connection could not reach A's
  // memory anyway (chain/domain.hpp). On A's own domain the same hello is
  // taken, so the refusal is the domain's doing.
  auto provider = fabric::Provider::open("soft");
  ASSERT_TRUE(provider.ok()) << provider.error().message;
  const Route real = broker::ControllerRoutes::to_route(*a_route);
  EXPECT_EQ(hello_over_domain(*provider.value(), real, chain::domain_of_channel("bravo.orders")),
            chain::wire::Status::unauthenticated);
  EXPECT_EQ(hello_over_domain(*provider.value(), real, fabric::kDefaultDomain),
            chain::wire::Status::unauthenticated);
  EXPECT_EQ(hello_over_domain(*provider.value(), real, chain::domain_of_channel("acme.orders")),
            chain::wire::Status::ok);

  // A's data is A's: its one record, then the next at the next offset.
  const auto a_second = publish_one(routes_a, "acme.orders", "a-1");
  ASSERT_EQ(a_second.status, PublishStatus::ok);
  EXPECT_EQ(a_second.offset, a_first.offset + 1) << "a refused publisher stored something";
  const auto [got, notice] = read_all(routes_a, "acme.orders", 2, 10s);
  EXPECT_EQ(notice, client::ErrorCode::ok);
  EXPECT_EQ(got, (std::vector<std::string>{"a-0", "a-1"}));
}

// A stolen route (its access secret included) works until the tenant's
// token is rotated: then the replicas take a new secret, a session opened
// with the old one is closed, and a new one is refused. The tenant's own
// client with the new token goes on where the data was.
TEST(TenantDataPlane, RotatingATenantsTokenRevokesTheAccessSecretsGivenOutBefore) {
  ClusterOptions o;
  o.nodes = 3;
  o.dir = "tenant-rotate-test";
  o.quiet = true;
  LocalCluster cluster(o);
  std::string err;
  ASSERT_TRUE(cluster.start(&err)) << err;
  const std::string address = cluster.controller_address();
  control::ControllerClient admin(controller_as(address, ""));
  auto token = admin.create_tenant("acme", {});
  ASSERT_TRUE(token.ok()) << token.error().describe();
  {
    control::ControllerClient as_tenant(controller_as(address, *token));
    control::idl::ChannelConfig cfg;
    cfg.name = "acme.orders";
    cfg.partitions = 1;
    cfg.replication = 3;
    cfg.segment_bytes = 1 << 20;
    cfg.ttl_ms = 600000;
    auto ch = as_tenant.create_channel(cfg);
    ASSERT_TRUE(ch.ok()) << ch.error().describe();
  }
  broker::ControllerRoutes routes_old(controller_as(address, *token), "tenant-old");
  const auto first = publish_one(routes_old, "acme.orders", "a-0");
  ASSERT_EQ(first.status, PublishStatus::ok);

  // The route as the tenant was given it, secret and all, kept by someone
  // it leaked to; it works now.
  auto given = control::ControllerClient(controller_as(address, *token)).get_route("acme.orders", 0, 0);
  ASSERT_TRUE(given.ok()) << given.error().describe();
  StaticRoutes stolen;
  stolen.set(broker::ControllerRoutes::to_route(*given), 1, 1 << 20);
  auto thief = Subscriber::create(stolen, "acme.orders", {});
  ASSERT_TRUE(thief.ok());
  std::vector<std::string> thief_got;
  client::ErrorCode thief_notice = client::ErrorCode::ok;
  thief.value()->on_notice([&](const Notice& n) {
    if (thief_notice == client::ErrorCode::ok) thief_notice = n.status;
  });
  auto thief_poll = [&] {
    return thief.value()->poll([&](const Message& m) {
      thief_got.emplace_back(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
    });
  };
  for (auto deadline = Clock::now() + 10s; Clock::now() < deadline && thief_got.empty();) {
    if (thief_poll() == 0) std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(thief_got, std::vector<std::string>{"a-0"}) << "the stolen route did not work before rotation";

  auto rotated = admin.rotate_tenant_token("acme");
  ASSERT_TRUE(rotated.ok()) << rotated.error().describe();

  // The open session is closed and its reconnection refused.
  for (auto deadline = Clock::now() + 10s;
       Clock::now() < deadline && thief_notice == client::ErrorCode::ok;) {
    if (thief_poll() == 0) std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(thief_notice, client::ErrorCode::unauthenticated)
      << "the session opened before rotation lives on";
  EXPECT_EQ(publish_one(stolen, "acme.orders", "intruder").status, PublishStatus::unauthenticated);
  auto old_route = control::ControllerClient(controller_as(address, *token)).get_route("acme.orders", 0, 0);
  ASSERT_FALSE(old_route.ok());
  EXPECT_EQ(old_route.error().code, control::idl::ErrorCode::UNAUTHENTICATED);

  // The tenant, with its new token, goes on at the next offset.
  broker::ControllerRoutes routes_new(controller_as(address, *rotated), "tenant-new");
  const auto second = publish_one(routes_new, "acme.orders", "a-1");
  ASSERT_EQ(second.status, PublishStatus::ok);
  EXPECT_EQ(second.offset, first.offset + 1) << "the refused publisher stored something";
  for (int i = 0; i < 200; ++i) (void)thief_poll();
  EXPECT_EQ(thief_got, std::vector<std::string>{"a-0"}) << "the stolen route read past the rotation";
  const auto [got, notice] = read_all(routes_new, "acme.orders", 2, 10s);
  EXPECT_EQ(notice, client::ErrorCode::ok);
  EXPECT_EQ(got, (std::vector<std::string>{"a-0", "a-1"}));
}

// A tenant's publish rate per node (TenantQuotas.max_publish_bytes_per_sec):
// its publisher, flat out beside another tenant's, gets no more than the
// rate acknowledged, the other is not held back, and nothing is lost. The
// limit lifted with `alterTenant` reaches the brokers, and what waited in
// the ring goes in.
TEST(TenantDataPlane, ATenantsPublishRateHoldsItBackAloneAndLosesNothing) {
  ClusterOptions o;
  o.nodes = 3;
  o.dir = "tenant-rate-test";
  o.quiet = true;
  LocalCluster cluster(o);
  std::string err;
  ASSERT_TRUE(cluster.start(&err)) << err;
  const std::string address = cluster.controller_address();
  control::ControllerClient admin(controller_as(address, ""));
  constexpr std::int64_t kRate = 64 << 10;
  control::idl::TenantQuotas slow_quotas;
  slow_quotas.__set_max_publish_bytes_per_sec(kRate);
  auto token_slow = admin.create_tenant("slow", slow_quotas);
  auto token_fast = admin.create_tenant("fast", {});
  ASSERT_TRUE(token_slow.ok() && token_fast.ok());
  for (const auto& [name, token] :
       {std::pair{"slow.feed", *token_slow}, std::pair{"fast.feed", *token_fast}}) {
    control::ControllerClient as_tenant(controller_as(address, token));
    control::idl::ChannelConfig cfg;
    cfg.name = name;
    cfg.partitions = 1;
    cfg.replication = 2;
    cfg.segment_bytes = 4 << 20;
    cfg.ttl_ms = 600000;
    auto ch = as_tenant.create_channel(cfg);
    ASSERT_TRUE(ch.ok()) << name << ": " << ch.error().describe();
  }
  broker::ControllerRoutes routes_slow(controller_as(address, *token_slow), "slow");
  broker::ControllerRoutes routes_fast(controller_as(address, *token_fast), "fast");
  const std::string payload(1024, 'r');
  struct Count {
    std::uint64_t acked = 0;
    std::uint64_t failed = 0;
  };
  Count slow_n, fast_n;  // before the publishers: callbacks may run as they go
  PublisherOptions po;
  po.retry_timeout = 10s;
  auto slow = Publisher::create(routes_slow, "slow.feed", po);
  auto fast = Publisher::create(routes_fast, "fast.feed", po);
  ASSERT_TRUE(slow.ok() && fast.ok());

  const auto counter = [](Count& c) {
    return [&c](const PublishResult& r) { ++(r.status == PublishStatus::ok ? c.acked : c.failed); };
  };
  // The fast one stops at 8 MiB, well inside its channel's retention (8
  // slots of 4 MiB, reused only after the TTL): a full log would hold it
  // back too.
  constexpr std::uint64_t kFastRecords = 8192;
  std::uint64_t fast_queued = 0;
  const auto start = Clock::now();
  while (Clock::now() - start < 2s) {
    int queued = 0;
    if (slow.value()->publish({}, as_bytes_of(payload), counter(slow_n)) == client::ErrorCode::ok) ++queued;
    if (fast_queued < kFastRecords &&
        fast.value()->publish({}, as_bytes_of(payload), counter(fast_n)) == client::ErrorCode::ok) {
      ++queued;
      ++fast_queued;
    }
    (void)slow.value()->poll();
    (void)fast.value()->poll();
    if (queued == 0) std::this_thread::sleep_for(100us);
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  const auto slow_bytes = static_cast<double>(slow_n.acked * payload.size());
  const auto fast_bytes = static_cast<double>(fast_n.acked * payload.size());
  std::printf("in %.2f s: slow %.0f bytes acknowledged (rate %lld/s), fast %.0f\n", secs, slow_bytes,
              static_cast<long long>(kRate), fast_bytes);
  EXPECT_GT(slow_n.acked, 0u);
  // The rate, plus a bucket's tenth of a second and a frame's header each.
  EXPECT_LE(slow_bytes, static_cast<double>(kRate) * (secs + 0.5)) << "the rate did not hold";
  EXPECT_GT(fast_bytes, 4 * slow_bytes) << "the other tenant was held back too";

  // Lifted: what waits in the slow publisher's ring goes in.
  ASSERT_TRUE(admin.alter_tenant("slow", {}).ok());
  EXPECT_TRUE(slow.value()->flush(20s)) << "the limit did not lift";
  EXPECT_TRUE(fast.value()->flush(20s));
  EXPECT_EQ(slow_n.failed, 0u);
  EXPECT_EQ(fast_n.failed, 0u);
  const auto [got, notice] = read_all(routes_slow, "slow.feed", slow_n.acked, 20s);
  EXPECT_EQ(notice, client::ErrorCode::ok);
  EXPECT_EQ(got.size(), slow_n.acked) << "every acknowledged record, once";
}

// Isolation through the recovery levels (issue 13): tenant A's chain (zones
// a and b) loses a broker that comes back with its kept memory (process
// level), then one that does not, and is repaired inside A's zones (zone
// level). After each, every replica of A's chain refuses tenant B's client
// (no secret, or B's own) on the data plane, A's chain is on nodes of its
// zones only, and A reads all its records, once, in order.
TEST(TenantDataPlane, IsolationHoldsThroughEveryRecoveryOfTheChain) {
  ClusterOptions o;
  o.nodes = 4;  // zones a, b, c, a (LocalCluster's round-robin): A may use nodes 0, 1 and 3
  o.dir = "tenant-recovery-test";
  o.quiet = true;
  o.keep_root = "/dev/shm/catena-test-" + std::to_string(getpid()) + "-tenant-recovery";
  LocalCluster cluster(o);
  std::string err;
  ASSERT_TRUE(cluster.start(&err)) << err;
  const std::string address = cluster.controller_address();
  control::ControllerClient admin(controller_as(address, ""));
  control::idl::TenantQuotas zoned;
  zoned.__set_zones({"zone-a", "zone-b"});
  auto token_a = admin.create_tenant("acme", zoned);
  auto token_b = admin.create_tenant("bravo", {});
  ASSERT_TRUE(token_a.ok() && token_b.ok());
  for (const auto& [name, token] :
       {std::pair{"acme.orders", *token_a}, std::pair{"bravo.orders", *token_b}}) {
    control::ControllerClient as_tenant(controller_as(address, token));
    control::idl::ChannelConfig cfg;
    cfg.name = name;
    cfg.partitions = 1;
    cfg.replication = 2;
    cfg.segment_bytes = 1 << 20;
    cfg.ttl_ms = 600000;
    auto ch = as_tenant.create_channel(cfg);
    ASSERT_TRUE(ch.ok()) << name << ": " << ch.error().describe();
  }
  broker::ControllerRoutes routes_a(controller_as(address, *token_a), "tenant-a");
  std::vector<std::string> written;
  const auto publish_some = [&](int n) {
    PublisherOptions po;
    po.retry_timeout = 20s;
    auto pub = Publisher::create(routes_a, "acme.orders", po);
    ASSERT_TRUE(pub.ok());
    std::vector<PublishFuture> acks;
    for (int i = 0; i < n; ++i) {
      written.push_back("a-" + std::to_string(written.size()));
      acks.push_back(pub.value()->publish({}, as_bytes_of(written.back())));
    }
    ASSERT_TRUE(pub.value()->flush(20s));
    for (auto& f : acks) ASSERT_EQ(f.get().status, PublishStatus::ok);
  };
  const auto index_of = [&](const std::string& node_id) {
    for (std::size_t i = 0; i < cluster.nodes().size(); ++i) {
      if (cluster.nodes()[i].node_id == node_id) return static_cast<int>(i);
    }
    return -1;
  };
  auto b_route = control::ControllerClient(controller_as(address, *token_b)).get_route("bravo.orders", 0, 0);
  ASSERT_TRUE(b_route.ok());
  const auto chain_of_a = [&] {
    auto r = admin.get_route("acme.orders", 0, 0);
    return r.ok() ? *r : control::idl::PartitionRoute{};
  };
  const auto check = [&](const char* level) {
    SCOPED_TRACE(level);
    const auto route = chain_of_a();
    ASSERT_EQ(route.replicas.size(), 2u);
    std::printf("%s: acme's chain at epoch %lld: %s -> %s\n", level, static_cast<long long>(route.epoch),
                route.replicas[0].node_id.c_str(), route.replicas[1].node_id.c_str());
    for (const auto& r : route.replicas) {
      EXPECT_NE(index_of(r.node_id) % 3, 2) << r.node_id << " is in zone-c, outside acme's zones";
      // B at this replica alone: without the secret, and with its own.
      control::idl::PartitionRoute only = route;
      only.replicas = {r};
      Route forged = without_secret(only);
      Route stolen = forged;
      std::memcpy(stolen.access_secret.data(), b_route->access_secret.data(), stolen.access_secret.size());
      for (const Route* by : {&forged, &stolen}) {
        StaticRoutes by_hand;
        by_hand.set(*by, 1, 1 << 20);
        const auto [got, notice] = read_all(by_hand, "acme.orders", 1, 3s);
        EXPECT_TRUE(got.empty()) << r.node_id << ": bravo read " << got.size() << " of acme's records";
        EXPECT_EQ(notice, client::ErrorCode::unauthenticated) << r.node_id;
      }
    }
    StaticRoutes at_head;
    at_head.set(without_secret(route), 1, 1 << 20);
    EXPECT_EQ(publish_one(at_head, "acme.orders", "b-intruder").status, PublishStatus::unauthenticated);
    const auto [got, notice] = read_all(routes_a, "acme.orders", written.size(), 20s);
    EXPECT_EQ(notice, client::ErrorCode::ok);
    EXPECT_EQ(got, written) << "acme's records, once, in order";
  };
  publish_some(50);
  check("before any failure");

  // Process level: the tail is killed and started again with its kept
  // memory (it rejoins, or its copy is dropped if a replacement was quicker).
  const auto first = chain_of_a();
  ASSERT_EQ(first.replicas.size(), 2u);
  const std::string tail_id = first.replicas.back().node_id;
  const int tail = index_of(tail_id);
  ASSERT_GE(tail, 0);
  ASSERT_TRUE(cluster.signal_node(static_cast<std::size_t>(tail), SIGKILL));
  ASSERT_TRUE(cluster.restart_node(static_cast<std::size_t>(tail), &err)) << err;
  const auto back = Clock::now() + 30s;
  while (Clock::now() < back) {
    const auto r = chain_of_a();
    if (r.epoch > first.epoch && r.replicas.size() == 2 && r.joining.empty()) break;
    std::this_thread::sleep_for(50ms);
  }
  publish_some(50);
  check("process level");

  // Zone level: the head is killed for good; the chain is repaired with a
  // node of acme's zones (never zone-c's), however long that takes.
  const auto second = chain_of_a();
  const std::string head_id = second.replicas.front().node_id;
  ASSERT_TRUE(cluster.signal_node(static_cast<std::size_t>(index_of(head_id)), SIGKILL));
  const auto repaired = Clock::now() + 40s;
  bool done = false;
  while (!done && Clock::now() < repaired) {
    const auto r = chain_of_a();
    done = r.replicas.size() == 2 && r.joining.empty() &&
           std::none_of(r.replicas.begin(), r.replicas.end(),
                        [&](const control::idl::Replica& x) { return x.node_id == head_id; });
    if (!done) std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(done) << "acme's chain was not repaired inside its zones";
  publish_some(50);
  check("zone level");
  cluster.stop();
  std::error_code ec;
  std::filesystem::remove_all(o.keep_root, ec);
}

// `catena cluster up --secure` (LocalCluster::secure): a new admin token in
// <dir>/admin.token that only its owner can read, required by the
// controller, used by the brokers (they registered), named in cluster.env
// for the CLI; data flows for a client that has it.
TEST(TenantDataPlane, ASecureLocalClusterRequiresItsOwnAdminToken) {
  ClusterOptions o;
  o.nodes = 2;
  o.dir = "tenant-secure-test";
  o.quiet = true;
  o.secure = true;
  LocalCluster cluster(o);
  std::string err;
  ASSERT_TRUE(cluster.start(&err)) << err;
  const std::string token = cluster.admin_token();
  ASSERT_EQ(token.size(), 64u);
  struct stat st {};
  ASSERT_EQ(::stat((o.dir + "/admin.token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(recorded_admin_token(o.dir), token);
  const std::string address = cluster.controller_address();

  auto anonymous = control::ControllerClient(controller_as(address, "")).list_channels();
  ASSERT_FALSE(anonymous.ok());
  EXPECT_EQ(anonymous.error().code, control::idl::ErrorCode::UNAUTHENTICATED);
  auto wrong = control::ControllerClient(controller_as(address, std::string(64, '0'))).list_channels();
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().code, control::idl::ErrorCode::UNAUTHENTICATED);

  control::ControllerClient admin(controller_as(address, token));
  control::idl::ChannelConfig cfg;
  cfg.name = "secure.feed";
  cfg.partitions = 1;
  cfg.replication = 2;  // both brokers registered, with the token
  cfg.segment_bytes = 1 << 20;
  cfg.ttl_ms = 600000;
  auto ch = admin.create_channel(cfg);
  ASSERT_TRUE(ch.ok()) << ch.error().describe();
  broker::ControllerRoutes routes(controller_as(address, token), "secure-client");
  ASSERT_EQ(publish_one(routes, "secure.feed", "s-0").status, PublishStatus::ok);
  const auto [got, notice] = read_all(routes, "secure.feed", 1, 10s);
  EXPECT_EQ(notice, client::ErrorCode::ok);
  EXPECT_EQ(got, std::vector<std::string>{"s-0"});

  // A second start writes a new token: the old one is refused.
  cluster.stop();
  LocalCluster again(o);
  ASSERT_TRUE(again.start(&err)) << err;
  EXPECT_NE(again.admin_token(), token);
  auto old = control::ControllerClient(controller_as(again.controller_address(), token)).list_channels();
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.error().code, control::idl::ErrorCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace catena
