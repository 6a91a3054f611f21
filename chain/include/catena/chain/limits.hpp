// The limits every side of Catena checks, defined once: the controller
// validates requests against them (control/src/validation.cpp), the data-plane
// wire sizes its fields from them (static_asserts in wire.hpp), and replicas
// and clients refuse what exceeds them instead of truncating it.
//
// Pure definitions with no dependency: control/ links only this header of
// the chain layer (target catena_limits), so a limit changes in one edit.
#pragma once

#include <cstddef>
#include <cstdint>

namespace catena::chain::limits {

// Channel names and node ids: 1..N characters of [A-Za-z0-9._-]. Both travel
// in data-plane hellos, in fields of exactly this many bytes.
inline constexpr std::size_t kMaxChannelNameLength = 128;
inline constexpr std::size_t kMaxNodeIdLength = 128;
// A node's data-plane address as its fabric reports it (host:port); a head
// sends it as a redirect hint.
inline constexpr std::size_t kMaxFabricAddressLength = 64;

inline constexpr std::int32_t kMaxPartitions = 1024;
inline constexpr std::int32_t kMaxReplication = 7;  // chain length R

// Segments: a multiple of kSegmentAlignment in [kMinSegmentBytes,
// kMaxSegmentBytes]. The replica's forward immediate carries a segment end
// position / 8 in 27 bits, which caps a segment below 1 GiB.
inline constexpr std::uint32_t kSegmentAlignment = 4096;
inline constexpr std::uint32_t kMinSegmentBytes = 4096;
inline constexpr std::uint32_t kMaxSegmentBytes = 512u << 20;
static_assert(kMinSegmentBytes % kSegmentAlignment == 0 && kMaxSegmentBytes % kSegmentAlignment == 0,
              "segment size bounds must themselves be valid sizes");
// Segment slots per partition replica (one is open while another expires).
inline constexpr std::uint32_t kMinSegmentSlots = 2;
inline constexpr std::uint32_t kMaxSegmentSlots = 32;

// Largest payload of one record; a segment's own size may lower it further
// (the head's welcome says what it takes).
inline constexpr std::uint32_t kMaxRecordPayload = 16u << 20;

// A record's attributes (record.hpp, kFlagAttributes): an optional key and
// name/value headers (trace context, schema ids) carried ahead of the
// payload. Lengths travel in u16 fields; the block counts toward
// kMaxRecordPayload.
inline constexpr std::size_t kMaxRecordKeyBytes = 4096;
inline constexpr std::size_t kMaxRecordHeaders = 64;
inline constexpr std::size_t kMaxHeaderNameBytes = 256;
inline constexpr std::size_t kMaxHeaderValueBytes = 8192;

// A publisher's staging ring at the head, as requested and as granted.
inline constexpr std::uint32_t kMinPublisherRing = 64u << 10;
inline constexpr std::uint32_t kMaxPublisherRing = 256u << 20;

inline constexpr std::int64_t kMinTtlMs = 100;
// About 31 years; ttl_ms * 10^6 (the data plane's ns) must fit 64 bits.
inline constexpr std::int64_t kMaxTtlMs = 1'000'000'000'000;
// A tenant's publish rate on one node (TenantQuotas.max_publish_bytes_per_sec).
inline constexpr std::int64_t kMinPublishBytesPerSec = 4096;
inline constexpr std::int64_t kMaxPublishBytesPerSec = 10'000'000'000;  // 10 GB/s

// A tail with a joining successor starts counting it in its commit (the
// joining replica's sync, see replica.hpp) once it owes it at most this many
// bytes: the commit then waits at most one forwarding pass of this size.
[[nodiscard]] constexpr std::int64_t join_sync_backlog_bytes(std::int64_t segment_bytes) {
  return segment_bytes / 4 > (std::int64_t{1} << 20) ? segment_bytes / 4 : std::int64_t{1} << 20;
}

}  // namespace catena::chain::limits
