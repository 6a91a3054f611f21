// The data-plane side of chain/limits.hpp: names exactly at the limits the
// controller accepts survive the wire whole, and a replica configured with
// anything longer is refused instead of truncating it on the wire.
#include <array>
#include <gtest/gtest.h>
#include <string>

#include <catena/chain/delivery.hpp>
#include <catena/chain/limits.hpp>
#include <catena/chain/publish.hpp>
#include <catena/chain/replica.hpp>
#include <catena/chain/wire.hpp>

namespace catena::chain {
namespace {

using namespace limits;

template <class T>
T round_trip(const T& msg) {
  std::array<std::byte, wire::kMaxMessage> buf{};
  const std::uint32_t len = wire::encode(buf.data(), msg);
  auto back = wire::decode<T>(buf.data(), len);
  EXPECT_TRUE(back.has_value());
  return back.value_or(T{});
}

TEST(Limits, NamesAtTheLimitCrossTheWireWhole) {
  const std::string channel(kMaxChannelNameLength, 'c');
  const std::string node(kMaxNodeIdLength, 'n');
  wire::ReplicaHello h{};
  h.ref.set(channel, 7, 3);
  wire::put_text(h.from_node, node);
  const auto back = round_trip(h);
  EXPECT_EQ(back.ref.name(), channel);
  EXPECT_EQ(back.ref.partition, 7u);
  EXPECT_EQ(wire::get_text(back.from_node), node);

  const std::string head(kMaxFabricAddressLength - 5, 'h');
  wire::PublisherWelcome w{};
  wire::put_text(w.head_hint, head + ":9000");
  EXPECT_EQ(wire::get_text(round_trip(w).head_hint), head + ":9000");
}

// A `moved` answer's hint (where the next range is served) crosses the wire
// whole in each message that carries it, at the longest address a route
// may name; a longer one is not sent cut short but not at all.
TEST(Limits, MovedHintsCrossTheWireWholeAtTheLimit) {
  const std::string head(kMaxFabricAddressLength, 'h');
  const auto hint = wire::NextChainHint::of(12, head);
  ASSERT_TRUE(hint.known());
  wire::PublisherWelcome w{};
  w.status = wire::Status::moved;
  w.next = hint;
  const auto w_back = round_trip(w);
  EXPECT_EQ(w_back.next.epoch, 12u);
  EXPECT_EQ(w_back.next.head_addr(), head);
  wire::SubscriberWelcome sw{};
  sw.next = wire::NextChainHint::of(13, "10.0.0.2:7000");
  EXPECT_EQ(round_trip(sw).next.head_addr(), "10.0.0.2:7000");
  EXPECT_EQ(round_trip(sw).next.epoch, 13u);
  wire::SubscriberNotice n{};
  n.status = wire::Status::moved;
  n.next_offset = 600;
  n.next = wire::NextChainHint::of(14, head);
  const auto n_back = round_trip(n);
  EXPECT_EQ(n_back.next_offset, 600u);
  EXPECT_EQ(n_back.next.epoch, 14u);
  EXPECT_EQ(n_back.next.head_addr(), head);

  EXPECT_FALSE(wire::NextChainHint::of(15, head + "x").known()) << "one over: not sent cut short";
  EXPECT_FALSE(wire::NextChainHint::of(15, "").known());
  EXPECT_FALSE(wire::NextChainHint::of(0, "10.0.0.2:7000").known()) << "epoch 0: not known";
  EXPECT_FALSE(wire::NextChainHint{}.known());
}

TEST(Limits, ShortNamesArePaddedNotPrefixed) {
  wire::ReplicaHello h{};
  wire::put_text(h.from_node, std::string(kMaxNodeIdLength, 'x'));
  wire::put_text(h.from_node, "node-1");  // a reused message keeps no tail of the old name
  EXPECT_EQ(wire::get_text(h.from_node), "node-1");
}

ReplicaConfig config_at_the_limits() {
  ReplicaConfig c;
  c.channel = std::string(kMaxChannelNameLength, 'c');
  c.node_id = std::string(kMaxNodeIdLength, 'a');
  c.predecessor_node = std::string(kMaxNodeIdLength, 'b');
  c.successor_node = std::string(kMaxNodeIdLength, 'd');
  c.head_addr = std::string(kMaxFabricAddressLength, 'h');
  c.log.segment_bytes = kMaxSegmentBytes;
  c.slot_count = kMaxSegmentSlots;
  return c;
}

TEST(Limits, ReplicaConfigAtTheLimitIsAccepted) {
  auto r = check_replica_config(config_at_the_limits());
  EXPECT_TRUE(r.ok()) << r.error().message;
  auto c = config_at_the_limits();
  c.log.segment_bytes = kMinSegmentBytes;
  c.slot_count = kMinSegmentSlots;
  EXPECT_TRUE(check_replica_config(c).ok());
}

TEST(Limits, ReplicaConfigOneOverIsRefusedSayingWhy) {
  auto expect_refused = [](const ReplicaConfig& c, const std::string& mentions) {
    auto r = check_replica_config(c);
    ASSERT_FALSE(r.ok()) << mentions;
    EXPECT_EQ(r.code(), fabric::Errc::invalid_argument);
    EXPECT_NE(r.error().message.find(mentions), std::string::npos) << r.error().message;
  };
  auto c = config_at_the_limits();
  c.channel += 'c';
  expect_refused(c, "channel name must be 1..128 characters, got 129");
  c = config_at_the_limits();
  c.predecessor_node += 'b';
  expect_refused(c, "is longer than 128 characters");
  c = config_at_the_limits();
  c.node_id += 'a';
  expect_refused(c, "is longer than 128 characters");
  c = config_at_the_limits();
  c.head_addr += 'h';
  expect_refused(c, "head address");
  c = config_at_the_limits();
  c.log.segment_bytes = kMaxSegmentBytes + kSegmentAlignment;
  expect_refused(c, "segment_bytes must be a multiple of 4096");
  c.log.segment_bytes = kMinSegmentBytes + 8;
  expect_refused(c, "segment_bytes must be a multiple of 4096");
  c = config_at_the_limits();
  c.slot_count = kMaxSegmentSlots + 1;
  expect_refused(c, "slot_count must be in [2, 32], got 33");
}

}  // namespace
}  // namespace catena::chain
