// The soft provider's kept memory (Provider::allocate_kept): regions that a
// restarted process finds again with their bytes, and everything else zeroed.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <string>

#include <catena/fabric/fabric.hpp>

#include "fabric_test_util.hpp"

namespace catena::fabric::test {
namespace {

using namespace std::chrono_literals;

constexpr std::uint32_t kRw = kLocalWrite | kRemoteWrite | kRemoteRead;

class SoftKept : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("catena-kept-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Provider> open(const std::string& spec = "soft") {
    auto p = Provider::open(spec, ProviderOptions{dir_.string()});
    EXPECT_TRUE(p.ok()) << p.error().message;
    return p.ok() ? std::move(p.value()) : nullptr;
  }

  static void fill(MemoryRegion& mr, std::uint8_t seed) {
    for (std::size_t i = 0; i < mr.size(); ++i)
      mr.data()[i] = std::byte(static_cast<std::uint8_t>(seed + i * 7));
  }
  static bool holds(const MemoryRegion& mr, std::uint8_t seed) {
    for (std::size_t i = 0; i < mr.size(); ++i) {
      if (mr.data()[i] != std::byte(static_cast<std::uint8_t>(seed + i * 7))) return false;
    }
    return true;
  }
  static bool zero(const MemoryRegion& mr) {
    for (std::size_t i = 0; i < mr.size(); ++i) {
      if (mr.data()[i] != std::byte{0}) return false;
    }
    return true;
  }

  std::filesystem::path dir_;
};

TEST_F(SoftKept, ANamedRegionKeepsItsBytesThroughARestartAndEverythingElseIsZeroed) {
  {
    auto p = open();
    ASSERT_TRUE(p);
    auto a = p->allocate_kept("chan#0#slot0", 64 << 10, kRw);
    ASSERT_TRUE(a.ok()) << a.error().message;
    EXPECT_FALSE(a.value().kept);
    EXPECT_TRUE(zero(*a.value().region));
    fill(*a.value().region, 3);
    auto b = p->allocate_kept("chan#0#slot1", 8 << 10, kRw);
    ASSERT_TRUE(b.ok());
    fill(*b.value().region, 9);
    auto plain = p->allocate(64 << 10, kRw);  // not kept: zero for whoever comes next
    ASSERT_TRUE(plain.ok());
    fill(*plain.value(), 5);
    // The process "crashes": the regions go without discard_kept.
  }
  auto p = open();
  ASSERT_TRUE(p);
  auto names = p->kept_names();
  ASSERT_EQ(names, (std::vector<std::string>{"chan#0#slot0", "chan#0#slot1"}));
  auto plain = p->allocate(64 << 10, kRw);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(zero(*plain.value()));
  auto a = p->allocate_kept("chan#0#slot0", 64 << 10, kRw);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_TRUE(a.value().kept);
  EXPECT_TRUE(holds(*a.value().region, 3));
  // Asked with another size: starts over, zeroed.
  auto b = p->allocate_kept("chan#0#slot1", 16 << 10, kRw);
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b.value().kept);
  EXPECT_TRUE(zero(*b.value().region));
}

// Kept regions are registered memory like any other; a fault provider
// reports what the provider it wraps registered.
TEST_F(SoftKept, KeptRegionsCountAsRegisteredAlsoThroughAFaultProvider) {
  for (const std::string spec : {"soft", "fault:soft"}) {
    auto p = open(spec);
    ASSERT_NE(p, nullptr) << spec;
    const std::int64_t before = p->registered_bytes();
    auto kept = p->allocate_kept("seg", 8192, kRw);
    ASSERT_TRUE(kept.ok()) << spec << ": " << kept.error().message;
    auto plain = p->allocate(4096, kRw);
    ASSERT_TRUE(plain.ok()) << spec << ": " << plain.error().message;
    const auto total = static_cast<std::int64_t>(kept.value().region->size() + plain.value()->size());
    EXPECT_EQ(p->registered_bytes(), before + total) << spec;
    kept.value().region.reset();
    plain.value().reset();
    EXPECT_EQ(p->registered_bytes(), before) << spec;
    p->discard_kept("seg");
  }
}

TEST_F(SoftKept, ADiscardedNameIsGoneAfterARestart) {
  {
    auto p = open();
    ASSERT_TRUE(p);
    auto a = p->allocate_kept("a", 4096, kRw);
    ASSERT_TRUE(a.ok());
    fill(*a.value().region, 1);
    a.value().region.reset();
    p->discard_kept("a");
    p->discard_kept("never-there");  // ignored
    EXPECT_TRUE(p->kept_names().empty());
  }
  auto p = open();
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->kept_names().empty());
  auto a = p->allocate_kept("a", 4096, kRw);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a.value().kept);
  EXPECT_TRUE(zero(*a.value().region));
}

TEST_F(SoftKept, APeerWritesIntoAKeptRegionAndTheBytesSurviveTheTargetsRestart) {
  const std::string text = "acknowledged, so kept";
  {
    auto target = open("soft:shm");
    ASSERT_TRUE(target);
    auto writer = Provider::open("soft:shm");
    ASSERT_TRUE(writer.ok());
    auto kept = target->allocate_kept("seg", 4096, kRw);
    ASSERT_TRUE(kept.ok());
    auto pair = connect_pair(*writer.value(), *target);
    ASSERT_TRUE(pair.ok()) << pair.error().message;
    auto grant = pair.value().server->expose(*kept.value().region);
    ASSERT_TRUE(grant.ok()) << grant.error().message;
    auto src = writer.value()->allocate(4096, kRw);
    ASSERT_TRUE(src.ok());
    std::memcpy(src.value()->data(), text.data(), text.size());
    ASSERT_EQ(pair.value().client->post_write(
                  1, {src.value().get(), 0, static_cast<std::uint32_t>(text.size())}, {grant.value(), 128}),
              Errc::ok);
    EXPECT_EQ(wait_send(*pair.value().client).status, WcStatus::success);
  }
  auto target = open("soft:shm");
  ASSERT_TRUE(target);
  auto kept = target->allocate_kept("seg", 4096, kRw);
  ASSERT_TRUE(kept.ok());
  ASSERT_TRUE(kept.value().kept);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(kept.value().region->data()) + 128, text.size()), text);
}

TEST_F(SoftKept, OneProcessAtATimeAndBadRequestsAreRefusedClearly) {
  auto p = open();
  ASSERT_TRUE(p);
  auto second = Provider::open("soft", ProviderOptions{dir_.string()});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code, Errc::refused);
  EXPECT_NE(second.error().message.find("in use"), std::string::npos) << second.error().message;

  auto bad = p->allocate_kept("has space", 4096, kRw);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, Errc::invalid_argument);
  auto empty = p->allocate_kept("", 4096, kRw);
  EXPECT_FALSE(empty.ok());
  auto zero_size = p->allocate_kept("z", 0, kRw);
  EXPECT_FALSE(zero_size.ok());

  auto plain = Provider::open("soft");
  ASSERT_TRUE(plain.ok());
  auto none = plain.value()->allocate_kept("a", 4096, kRw);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, Errc::invalid_argument);

  // Only the soft provider keeps memory: asking another is refused at open.
  auto verbs = Provider::open("verbs:nodev", ProviderOptions{(dir_ / "other").string()});
  ASSERT_FALSE(verbs.ok());
  EXPECT_EQ(verbs.error().code, Errc::invalid_argument);
}

TEST_F(SoftKept, ACorruptDirectoryIsRefusedNamingTheFile) {
  {
    auto p = open();
    ASSERT_TRUE(p);
    ASSERT_TRUE(p->allocate_kept("a", 4096, kRw).ok());
  }
  {
    std::ofstream out(dir_ / "regions", std::ios::app);
    out << "12 4096 overlapping-the-header\n";
  }
  auto p = Provider::open("soft", ProviderOptions{dir_.string()});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code, Errc::invalid_argument);
  EXPECT_NE(p.error().message.find("regions:2"), std::string::npos) << p.error().message;
}

}  // namespace
}  // namespace catena::fabric::test
