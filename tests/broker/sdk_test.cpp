// The client SDK as a program outside the tree uses it: only the public
// headers (<catena/client.hpp>), linked with libcatena.so (catena_sdk, whose
// internals are hidden). Against a local cluster of the built binaries
// (capi_cluster.sh passes CONTROLLER CHANNEL): catena::connect refuses a
// malformed controller list with invalid_argument; through connect(), a
// Publisher's records (with a key and headers) are acknowledged and a
// Subscriber reads exactly them back; catena::Admin creates, alters and
// deletes a channel.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <gtest/gtest.h>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <catena/client.hpp>

namespace {

std::string g_controller;
std::string g_channel;

std::span<const std::byte> bytes(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}
std::string text(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

TEST(Sdk, ConnectRefusesAMalformedControllerList) {
  for (const std::string bad : {"", "localhost", "h1:7400,", ",h1:7400", "h1:port", "h1:7400,,h2:7400",
                                "h1:70000", ":7400", "h1:0"}) {
    auto r = catena::connect(bad);
    ASSERT_FALSE(r.ok()) << "'" << bad << "' was accepted";
    EXPECT_EQ(r.error().code, catena::client::ErrorCode::invalid_argument) << bad;
    EXPECT_FALSE(r.error().retriable()) << bad;
    EXPECT_EQ(r.error().describe().rfind("invalid_argument: connect: ", 0), 0u) << r.error().describe();
    if (!bad.empty()) {
      EXPECT_NE(r.error().message.find("host:port[,host:port...]"), std::string::npos) << r.error().message;
    }
  }
  // A well-formed list connects lazily: no dial here, even to nobody.
  EXPECT_TRUE(catena::connect("127.0.0.1:1,[::1]:7400").ok());
}

TEST(Sdk, UnknownChannelIsAClientError) {
  auto routes = catena::connect(g_controller);
  ASSERT_TRUE(routes.ok()) << routes.error().describe();
  auto pub = catena::Publisher::create(**routes, "no-such-channel");
  ASSERT_FALSE(pub.ok());
  EXPECT_EQ(pub.error().code, catena::client::ErrorCode::unknown_channel) << pub.error().describe();
  catena::ConnectOptions quick;
  quick.connect_timeout = std::chrono::milliseconds(200);
  quick.rpc_timeout = std::chrono::milliseconds(500);
  auto dead = catena::connect("127.0.0.1:1", quick);  // nobody listens there
  ASSERT_TRUE(dead.ok());
  auto none = catena::Subscriber::create(**dead, g_channel);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, catena::client::ErrorCode::controller_unavailable) << none.error().describe();
  EXPECT_TRUE(none.error().retriable());
}

TEST(Sdk, PublishesAndSubscribesThroughConnect) {
  constexpr int kRecords = 200;
  catena::ConnectOptions co;
  co.client_name = "sdk-test";
  auto routes = catena::connect(g_controller, co);
  ASSERT_TRUE(routes.ok()) << routes.error().describe();

  auto created = catena::Publisher::create(**routes, g_channel);
  ASSERT_TRUE(created.ok()) << created.error().describe();
  catena::Publisher& pub = *created.value();
  ASSERT_EQ(pub.partitions(), 4u);  // capi_cluster.sh's channel

  std::map<std::string, catena::PublishResult> acks;  // payload -> result
  int failed = 0;
  for (int i = 0; i < kRecords; ++i) {
    const std::string key = "key-" + std::to_string(i % 8);
    const std::string payload = "sdk-" + std::to_string(i);
    const std::string trace = "trace-" + std::to_string(i);
    const catena::HeaderField headers[] = {{"trace", trace}, {"schema", "v1"}};
    const catena::Record record{bytes(key), headers, bytes(payload)};
    catena::client::ErrorCode e;
    while ((e = pub.publish(record, [&acks, &failed, payload](const catena::PublishResult& r) {
             if (r.status != catena::client::ErrorCode::ok) ++failed;
             acks[payload] = r;
           })) == catena::client::ErrorCode::backpressure) {
      pub.poll();
    }
    ASSERT_EQ(e, catena::client::ErrorCode::ok) << catena::client::to_string(e);
    pub.poll();
  }
  ASSERT_TRUE(pub.flush(std::chrono::seconds(30)));
  ASSERT_EQ(acks.size(), static_cast<std::size_t>(kRecords));
  EXPECT_EQ(failed, 0);
  // The future form too: its status is a client::ErrorCode.
  const auto last = pub.publish(bytes("key-0"), bytes("sdk-future")).get();
  EXPECT_EQ(last.status, catena::client::ErrorCode::ok) << catena::client::to_string(last.status);
  EXPECT_EQ(catena::PublishFuture().get().status, catena::client::ErrorCode::invalid_argument);

  std::set<std::pair<std::uint32_t, std::uint64_t>> positions;
  for (const auto& [payload, r] : acks) {
    EXPECT_EQ(r.status, catena::client::ErrorCode::ok) << payload;
    EXPECT_TRUE(positions.insert({r.partition, r.offset}).second)
        << "two records at " << r.partition << ":" << r.offset;
  }

  catena::SubscriberOptions so;
  so.start = catena::Start::earliest;
  auto sub = catena::Subscriber::create(**routes, g_channel, so);
  ASSERT_TRUE(sub.ok()) << sub.error().describe();
  std::map<std::string, std::pair<std::uint32_t, std::uint64_t>> got;  // payload -> partition, offset
  int bad_attributes = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (got.size() < static_cast<std::size_t>(kRecords + 1) && std::chrono::steady_clock::now() < deadline) {
    const int n = sub.value()->poll([&](const catena::Message& m) {
      const std::string payload = text(m.payload);
      got[payload] = {m.partition, m.offset};
      if (payload == "sdk-future") return;
      const int i = std::stoi(payload.substr(4));
      if (text(m.key) != "key-" + std::to_string(i % 8) || m.headers.size() != 2 ||
          m.headers.find("trace") != "trace-" + std::to_string(i) || m.headers.find("schema") != "v1") {
        ++bad_attributes;
      }
    });
    if (n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kRecords + 1));
  EXPECT_EQ(bad_attributes, 0);
  for (const auto& [payload, r] : acks) {
    ASSERT_TRUE(got.contains(payload)) << payload;
    EXPECT_EQ(got[payload].first, r.partition) << payload;
    EXPECT_EQ(got[payload].second, r.offset) << payload;
  }
}

}  // namespace

// catena::Admin: a channel's life through the SDK, with its chains.
TEST(Sdk, AdminCreatesDescribesAltersAndDeletesAChannel) {
  auto bad = catena::Admin::connect("h1:port");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, catena::client::ErrorCode::invalid_argument);
  EXPECT_EQ(bad.error().describe().rfind("invalid_argument: admin: ", 0), 0u) << bad.error().describe();

  auto made = catena::Admin::connect(g_controller);
  ASSERT_TRUE(made.ok()) << made.error().describe();
  catena::Admin& admin = *made.value();
  catena::ChannelSettings settings;
  settings.name = "sdk-admin";
  settings.partitions = 2;
  settings.replication = 2;
  settings.segment_bytes = 1 << 20;
  settings.ttl_ms = 30'000;
  auto ch = admin.create_channel(settings);
  ASSERT_TRUE(ch.ok()) << ch.error().describe();
  EXPECT_EQ(ch->settings.name, "sdk-admin");
  EXPECT_EQ(ch->settings.partitions, 2);
  EXPECT_EQ(ch->settings.replication, 2);
  EXPECT_EQ(ch->settings.segment_bytes, 1 << 20);
  EXPECT_EQ(ch->settings.ttl_ms, 30'000);
  EXPECT_FALSE(ch->altering);
  ASSERT_EQ(ch->partitions.size(), 2u);
  for (std::uint32_t p = 0; p < 2; ++p) {
    const catena::PartitionChain& c = ch->partitions[p];
    EXPECT_EQ(c.partition, p);
    EXPECT_GT(c.epoch, 0u);
    ASSERT_EQ(c.chain.size(), 2u) << "partition " << p;
    EXPECT_NE(c.chain[0], c.chain[1]) << "partition " << p << ": one node twice in its chain";
  }

  auto again = admin.create_channel(settings);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, catena::client::ErrorCode::invalid_argument);
  EXPECT_NE(again.error().message.find("exists"), std::string::npos) << again.error().describe();

  auto listed = admin.list_channels();
  ASSERT_TRUE(listed.ok()) << listed.error().describe();
  std::set<std::string> names;
  for (const auto& c : *listed) names.insert(c.settings.name);
  EXPECT_TRUE(names.count("sdk-admin") == 1 && names.count(g_channel) == 1);

  auto grown = admin.alter_partitions("sdk-admin", 3);
  ASSERT_TRUE(grown.ok()) << grown.error().describe();
  EXPECT_EQ(grown->settings.partitions, 3);
  EXPECT_EQ(grown->partitions.size(), 3u);
  EXPECT_FALSE(grown->altering);
  auto kept = admin.alter_retention("sdk-admin", 90'000);
  ASSERT_TRUE(kept.ok()) << kept.error().describe();
  EXPECT_EQ(kept->settings.ttl_ms, 90'000);
  auto described = admin.describe_channel("sdk-admin");
  ASSERT_TRUE(described.ok()) << described.error().describe();
  EXPECT_EQ(described->settings.partitions, 3);
  EXPECT_EQ(described->settings.ttl_ms, 90'000);

  ASSERT_TRUE(admin.delete_channel("sdk-admin").ok());
  auto gone = admin.describe_channel("sdk-admin");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code, catena::client::ErrorCode::unknown_channel);
}

// catena::Admin's tenant calls, and a tenant's own Admin held to its
// namespace and quota.
TEST(Sdk, AdminManagesTenantsAndATenantStaysInItsNamespace) {
  auto made = catena::Admin::connect(g_controller);
  ASSERT_TRUE(made.ok()) << made.error().describe();
  catena::Admin& admin = *made.value();
  catena::TenantQuotas quotas;
  quotas.max_channels = 1;
  auto token = admin.create_tenant("sdkt", quotas);
  ASSERT_TRUE(token.ok()) << token.error().describe();
  EXPECT_EQ(token->size(), 64u) << *token;

  auto as_tenant = [&](const std::string& t) {
    catena::ConnectOptions co;
    co.token = t;
    auto a = catena::Admin::connect(g_controller, co);
    EXPECT_TRUE(a.ok()) << a.error().describe();
    return std::move(a.value());
  };
  auto tenant = as_tenant(*token);
  catena::ChannelSettings s;
  s.name = "sdkt.orders";
  s.replication = 1;
  ASSERT_TRUE(tenant->create_channel(s).ok());
  s.name = "sdkt.more";
  auto over = tenant->create_channel(s);  // its quota: one channel
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.error().message.find("max_channels"), std::string::npos) << over.error().describe();
  s.name = "elsewhere";
  auto outside = tenant->create_channel(s);
  ASSERT_FALSE(outside.ok());
  EXPECT_EQ(outside.error().code, catena::client::ErrorCode::unauthenticated) << outside.error().describe();
  auto own = tenant->list_channels();
  ASSERT_TRUE(own.ok()) << own.error().describe();
  ASSERT_EQ(own->size(), 1u);
  EXPECT_EQ(own->front().settings.name, "sdkt.orders");

  auto listed = admin.list_tenants();
  ASSERT_TRUE(listed.ok()) << listed.error().describe();
  auto it = std::find_if(listed->begin(), listed->end(), [](const auto& t) { return t.name == "sdkt"; });
  ASSERT_NE(it, listed->end());
  EXPECT_EQ(it->quotas.max_channels, 1);
  EXPECT_EQ(it->quotas.max_partitions, -1);
  EXPECT_EQ(it->channels, 1);
  EXPECT_GT(it->created_at_ms, 0);

  quotas.max_channels = 2;
  ASSERT_TRUE(admin.alter_tenant("sdkt", quotas).ok());
  s.name = "sdkt.more";
  EXPECT_TRUE(tenant->create_channel(s).ok());

  auto rotated = admin.rotate_tenant_token("sdkt");
  ASSERT_TRUE(rotated.ok()) << rotated.error().describe();
  EXPECT_NE(*rotated, *token);
  auto stale = tenant->describe_channel("sdkt.orders");  // the old token's connection
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.error().code, catena::client::ErrorCode::unauthenticated) << stale.error().describe();
  auto renewed = as_tenant(*rotated);
  EXPECT_TRUE(renewed->describe_channel("sdkt.orders").ok());

  EXPECT_FALSE(admin.delete_tenant("sdkt").ok());  // it owns channels
  ASSERT_TRUE(renewed->delete_channel("sdkt.orders").ok());
  ASSERT_TRUE(renewed->delete_channel("sdkt.more").ok());
  ASSERT_TRUE(admin.delete_tenant("sdkt").ok());
  auto after = admin.list_tenants();
  ASSERT_TRUE(after.ok()) << after.error().describe();
  EXPECT_TRUE(std::none_of(after->begin(), after->end(), [](const auto& t) { return t.name == "sdkt"; }));
}

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CONTROLLER CHANNEL (capi_cluster.sh passes them)\n", argv[0]);
    return 2;
  }
  g_controller = argv[1];
  g_channel = argv[2];
  return RUN_ALL_TESTS();
}
