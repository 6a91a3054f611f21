// Small control messages exchanged with SEND/RECV on data-plane endpoints:
// hellos that set up replica links, publisher and subscriber sessions, and
// acknowledgements. Bulk data never travels in these: records move with
// one-sided writes into registered rings and segments.
//
// Every message starts with a WireHeader; decode() checks magic, version,
// kind and length against what actually arrived, so garbage on a data-plane
// connection is refused without being interpreted.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include <catena/chain/limits.hpp>
#include <catena/fabric/fabric.hpp>

namespace catena::chain::wire {

inline constexpr std::uint32_t kMagic = 0x43544e41;  // "CTNA"
// 2: 64-bit producer epochs and sequences; 3: node ids of limits::kMaxNodeIdLength;
// 4: RemoteRegion without an address (keys per connection, region-relative offsets);
// 5: `moved` answers say where the next range is served (NextChainHint);
// 6: a publisher's hello names the channel generation it maps keys by, and
// a `remap` ack carries the head's newest marker (generation, partitions);
// 7: a connected publisher switches its session's generation in band
// (PublisherGeneration) instead of reconnecting;
// 8: a successor's welcome exposes only the slots that hold a segment, and
// the predecessor asks for each segment it opens (ReplicaSlotRequest /
// ReplicaSlotGrant): segment memory is taken as segments open;
// 9: record frames carry CRC-32C checksums (record.hpp), where they carried
// XXH32, and segments open in any slot (partition_log.hpp)
inline constexpr std::uint16_t kVersion = 9;
inline constexpr std::uint32_t kMaxSlots = limits::kMaxSegmentSlots;
// Every control message fits in one receive buffer of this size.
inline constexpr std::uint32_t kMaxMessage = 2048;

enum class Kind : std::uint16_t {
  replica_hello = 1,
  replica_welcome = 2,
  publisher_hello = 3,
  publisher_welcome = 4,
  publish_ack = 5,
  subscriber_hello = 6,
  subscriber_welcome = 7,
  subscriber_credit = 8,
  subscriber_notice = 9,
  commit_watch_hello = 10,
  commit_watch_welcome = 11,
  publisher_generation = 12,
  replica_slot_request = 13,
  replica_slot_grant = 14,
  publish_held = 15,  // added within version 9: a receiver that does not know it ignores it
};

// Status codes carried on the wire (stable numbers).
enum class Status : std::uint16_t {
  ok = 0,
  unknown_channel = 1,
  stale_epoch = 2,       // caller is behind: refresh the route (epoch field says the current one)
  not_head = 3,          // publish to a node that is not the head: redirect
  sequence_gap = 4,      // idempotent producer skipped a sequence number
  producer_fenced = 5,   // a newer epoch of this producer exists
  too_large = 6,         // record larger than the segment allows
  log_full = 7,          // retention full: back-pressure
  corrupt = 8,           // frame failed validation
  position_expired = 9,  // subscriber position no longer retained
  bad_request = 10,
  not_ready = 11,           // partition not configured here yet: retry
  unavailable = 12,         // client side: partition unreachable past the retry timeout
  not_tail = 13,            // a commit watch opened on a node that is not the tail
  data_lost = 14,           // client side: every replica holding these offsets failed; the
                            // partition was rebuilt above them (Notice says which were lost)
  resource_exhausted = 15,  // the replica is at a session or producer limit: retry later
  unauthenticated = 16,     // a replica hello without the route epoch's link secret, or a client
                            // hello without the partition's access secret
  moved = 17,               // the partition moved on: this chain takes no appends (sealed) or serves
                            // no offsets at or above its range's end; refresh the route and go on
                            // at the chain that serves the offset (nothing was stored)
  remap = 18,               // the channel was altered: this head's marker opens a newer generation than the
                            // publisher maps keys by; nothing of the run was stored (the ack says the
                            // marker's generation and partition count: map the keys again)
};

[[nodiscard]] std::string_view to_string(Status s) noexcept;

struct WireHeader {
  std::uint32_t magic;
  std::uint16_t version;
  Kind kind;
  std::uint32_t length;  // whole message, header included
  std::uint32_t reserved;
};
static_assert(sizeof(WireHeader) == 16);

// Text fields hold up to their whole size: NUL-padded, not NUL-terminated
// when full, so a field of N bytes carries a name of the N-character limit.
// Callers check the limit first (Replica::create, Publisher and Subscriber
// create); a longer string is cut, never written past the field.
template <std::size_t N>
void put_text(char (&field)[N], std::string_view text) {
  std::memset(field, 0, N);
  std::memcpy(field, text.data(), std::min(text.size(), N));
}
template <std::size_t N>
[[nodiscard]] std::string_view get_text(const char (&field)[N]) {
  return {field, strnlen(field, N)};
}

struct ChannelRef {
  char channel[limits::kMaxChannelNameLength];
  std::uint32_t partition;
  std::uint32_t reserved;
  std::uint64_t epoch;

  void set(std::string_view name, std::uint32_t p, std::uint64_t e) {
    put_text(channel, name);
    partition = p;
    reserved = 0;
    epoch = e;
  }
  [[nodiscard]] std::string_view name() const { return get_text(channel); }
};

// Where a partition's next offset range is served (partition handoff), as a
// replica that answers `moved` knows it from the route its controller
// pushed: the route epoch to name in a hello there and the fabric address
// of that chain's head (which takes appends, and serves reads like any
// replica). epoch 0: not known (yet); ask the controller.
struct NextChainHint {
  std::uint64_t epoch;
  char head[limits::kMaxFabricAddressLength];

  static NextChainHint of(std::uint64_t epoch, std::string_view head_addr) {
    NextChainHint h{};
    if (head_addr.empty() || head_addr.size() > sizeof(h.head)) return h;  // not known
    h.epoch = epoch;
    put_text(h.head, head_addr);
    return h;
  }
  [[nodiscard]] bool known() const { return epoch != 0 && head[0] != '\0'; }
  [[nodiscard]] std::string_view head_addr() const { return get_text(head); }
};

static_assert(sizeof(ChannelRef::channel) == limits::kMaxChannelNameLength,
              "a channel name of the controller's maximum length must fit the wire");

// A predecessor's hello names its node and incarnation (node epoch); the
// successor accepts it only if its route names that very incarnation as its
// predecessor, and answers with its own, which the predecessor checks too.
//
// It also carries the route epoch's link secret, which the controller gives
// only to the route's members: whoever merely knows the route (any client
// can read it) cannot pose as the predecessor.
inline constexpr std::size_t kLinkSecretBytes = 16;

// A client's hello (publisher, subscriber, commit watch) carries the
// partition's access secret, which the controller gives with the route to
// whoever may use the channel (ChainAssignment.access_secret,
// PartitionRoute.access_secret); a replica configured with one refuses
// hellos without it (unauthenticated). All zero on a replica: not checked.
inline constexpr std::size_t kAccessSecretBytes = 16;
using AccessSecret = std::array<std::uint8_t, kAccessSecretBytes>;

// Whether a hello's secret is the replica's (constant time: the answer does
// not tell how much matched); true when the replica has none.
[[nodiscard]] inline bool access_allowed(const std::uint8_t (&hello)[kAccessSecretBytes],
                                         const AccessSecret& mine) noexcept {
  std::uint8_t differ = 0, any = 0;
  for (std::size_t i = 0; i < kAccessSecretBytes; ++i) {
    differ |= static_cast<std::uint8_t>(hello[i] ^ mine[i]);
    any |= mine[i];
  }
  return any == 0 || differ == 0;
}

struct ReplicaHello {
  ChannelRef ref;
  char from_node[limits::kMaxNodeIdLength];
  fabric::RemoteRegion commit_word;  // where the successor writes commit offsets
  std::uint64_t from_node_epoch;
  std::uint8_t link_secret[kLinkSecretBytes];
};
static_assert(sizeof(ReplicaHello::from_node) == limits::kMaxNodeIdLength,
              "a node id of the controller's maximum length must fit the wire, or the node is refused as "
              "a predecessor");

struct SlotState {
  fabric::RemoteRegion region;
  std::uint64_t generation;
  std::uint32_t valid_end;
  std::uint32_t reserved;
};

// What a welcome says of each slot. `region` is exposed only for a slot
// that holds a segment (generation != 0) in memory: the predecessor may go
// on writing that generation there. Every other generation it writes into a
// slot, it asks for first (ReplicaSlotRequest).
struct ReplicaWelcome {
  Status status;
  std::uint16_t reserved0;
  std::uint32_t slot_count;
  std::uint64_t epoch;  // the successor's current epoch
  std::uint32_t segment_bytes;
  std::uint32_t reserved1;
  std::uint64_t end_offset;  // first offset the successor does not hold
  std::uint64_t node_epoch;  // the successor's incarnation
  SlotState slots[kMaxSlots];
};

// Segment memory is taken as segments open (PartitionLog: SlotMemory) and
// given back when they expire. Before a predecessor writes the first byte of
// a new segment (generation) into slot `slot`, it asks its successor for it;
// the successor takes memory of that size for the slot if it has none (the
// node's segment budget), exposes it on this link, and answers. The grant holds until the
// successor has that generation sealed and expired: it never gives the
// memory back while a newer generation than the one it holds was granted.
// status: ok; resource_exhausted (the node's segment budget is spent: ask
// again later); bad_request (a slot out of range, or an older generation
// than the slot holds: the predecessor is confused, the link is dropped).
// `bytes`: the segment's size (segments are sized by need, partition_log.hpp);
// a slot whose memory is of another size gets memory of this one, and what
// it held goes.
struct ReplicaSlotRequest {
  std::uint32_t slot;
  std::uint32_t bytes;
  std::uint64_t generation;
};

struct ReplicaSlotGrant {
  Status status;
  std::uint16_t reserved0;
  std::uint32_t slot;
  std::uint64_t generation;
  std::uint32_t bytes;
  std::uint32_t reserved1;
  fabric::RemoteRegion region;
};

// PublisherHello, PublisherWelcome, PublishAck: publish.hpp, with the protocol.
static_assert(limits::kMaxPartitions > 0, "partition numbers are 32-bit on the wire");

// CommitWatchHello, CommitWatchWelcome: commit_watch.hpp, with the protocol.

// SubscriberHello, SubscriberWelcome, SubscriberCredit, SubscriberNotice:
// delivery.hpp, with the protocol.

template <class T>
constexpr Kind kind_of();
template <>
constexpr Kind kind_of<ReplicaHello>() {
  return Kind::replica_hello;
}
template <>
constexpr Kind kind_of<ReplicaWelcome>() {
  return Kind::replica_welcome;
}
template <>
constexpr Kind kind_of<ReplicaSlotRequest>() {
  return Kind::replica_slot_request;
}
template <>
constexpr Kind kind_of<ReplicaSlotGrant>() {
  return Kind::replica_slot_grant;
}
// Writes header + body into `out` (at least kMaxMessage bytes); returns length.
template <class T>
std::uint32_t encode(std::byte* out, const T& body) {
  static_assert(std::is_trivially_copyable_v<T>);
  static_assert(sizeof(WireHeader) + sizeof(T) <= kMaxMessage);
  WireHeader h{kMagic, kVersion, kind_of<T>(), static_cast<std::uint32_t>(sizeof(WireHeader) + sizeof(T)), 0};
  std::memcpy(out, &h, sizeof h);
  std::memcpy(out + sizeof h, &body, sizeof body);
  return h.length;
}

// Kind of a received message, or nullopt if it is not a well-formed message.
std::optional<Kind> peek(const std::byte* in, std::uint32_t len);

// Decodes a message of kind T; nullopt if malformed or of another kind.
template <class T>
std::optional<T> decode(const std::byte* in, std::uint32_t len) {
  auto k = peek(in, len);
  if (!k || *k != kind_of<T>() || len != sizeof(WireHeader) + sizeof(T)) return std::nullopt;
  T body;
  std::memcpy(&body, in + sizeof(WireHeader), sizeof body);
  return body;
}

}  // namespace catena::chain::wire
