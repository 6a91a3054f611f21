// Clients of one process share one fabric provider per spec
// (broker/client/src/shared_provider.hpp): one arena, one device context,
// one set of background threads, however many publishers and subscribers
// the process runs.
#include "../../broker/client/src/shared_provider.hpp"

#include <gtest/gtest.h>
#include <memory>
#include <string>

#include "chain_e2e_fixture.hpp"

namespace catena::test {
namespace {

using client_detail::shared_provider;

TEST(SharedProvider, OneProviderPerSpecUntilItsLastUserLetsGo) {
  auto a = shared_provider("soft:shm");
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto b = shared_provider("soft:shm");
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(a.value().get(), b.value().get());
  auto other = shared_provider("soft:tcp");
  ASSERT_TRUE(other.ok()) << other.error().message;
  EXPECT_NE(other.value().get(), a.value().get());

  // The registry does not keep a provider alive: once its users are gone,
  // its threads and memory are too.
  std::weak_ptr<fabric::Provider> watched = a.value();
  a.value().reset();
  EXPECT_FALSE(watched.expired());
  b.value().reset();
  EXPECT_TRUE(watched.expired());
  auto again = shared_provider("soft:shm");
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(again.value().use_count(), 1);
}

TEST(SharedProvider, ABadSpecIsAClearErrorAndNotRemembered) {
  auto bad = shared_provider("sofft");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, fabric::Errc::invalid_argument);
  EXPECT_NE(bad.error().message.find("unknown provider spec 'sofft'"), std::string::npos)
      << bad.error().message;
  EXPECT_FALSE(shared_provider("sofft").ok());
  EXPECT_TRUE(shared_provider("soft:shm").ok());
}

// Two publishers and a subscriber of one process: every ring they register
// is in the one provider the process has for their spec, and goes when
// they do.
TEST_F(ChainE2E, PublishersAndSubscribersOfAProcessRegisterInItsOneProvider) {
  configure("shp", 0, 1, {0, 1, 2}, 1);
  auto held = shared_provider(provider_spec());
  ASSERT_TRUE(held.ok()) << held.error().message;
  const auto& provider = held.value();
  const std::int64_t before = provider->registered_bytes();

  PublisherOptions po;
  po.provider = provider_spec();
  auto first = Publisher::create(routes_, "shp", po);
  ASSERT_TRUE(first.ok()) << first.error().message;
  auto second = Publisher::create(routes_, "shp", po);
  ASSERT_TRUE(second.ok()) << second.error().message;
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(first.value()->publish({}, bytes("a" + std::to_string(i))).get().status, PublishStatus::ok);
    ASSERT_EQ(second.value()->publish({}, bytes("b" + std::to_string(i))).get().status, PublishStatus::ok);
  }
  // A partition's ring comes with its first record: 64 KiB at least, each.
  const std::int64_t rings = 2 * std::int64_t{chain::kMinRingBytes};
  EXPECT_GE(provider->registered_bytes() - before, rings);

  SubscriberOptions so;
  so.provider = provider_spec();
  auto sub = Subscriber::create(routes_, "shp", so);
  ASSERT_TRUE(sub.ok()) << sub.error().message;
  std::vector<std::string> got;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (got.size() < 10 && std::chrono::steady_clock::now() < deadline) {
    sub.value()->poll([&](const Message& m) {
      got.emplace_back(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
    });
  }
  ASSERT_EQ(got.size(), 10u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(got[2 * i], "a" + std::to_string(i));
    EXPECT_EQ(got[2 * i + 1], "b" + std::to_string(i));
  }
  // The subscriber's ring: at least twice the channel's segment.
  EXPECT_GE(provider->registered_bytes() - before, rings + 2 * std::int64_t{kSegment});

  first.value().reset();
  second.value().reset();
  sub.value().reset();
  EXPECT_EQ(provider->registered_bytes(), before);
  EXPECT_EQ(provider.use_count(), 1);
}

}  // namespace
}  // namespace catena::test
