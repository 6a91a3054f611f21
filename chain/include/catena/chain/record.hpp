// The record frame: how one message sits in a segment, in a publisher's
// staging ring and in a subscriber's delivery ring. 8-byte aligned so a
// replica can walk frames that a remote NIC wrote, validating each before it
// forwards, commits or serves it.
//
//   0  u32 length          payload bytes
//   4  u32 flags           kFlagSeal: end of segment, no payload;
//                          kFlagPad: ring padding up to the ring's end;
//                          kFlagMarker: a channel alter's marker (a control
//                          record: producer_id 0, sequence = the
//                          channel generation it brings in, no payload)
//   8  u64 offset          partition-wide position (set by the head)
//  16  u64 producer_id
//  24  u64 producer_epoch  issued by the controller on every publisher start
//  32  u64 sequence        per (producer epoch, partition), starts at 0;
//                          64 bits so it never wraps (2^32 records take
//                          35 minutes at 2 M/s)
//  40  u64 timestamp_ns    wall clock at the publisher
//  48  u32 payload_crc     XXH32 of the payload, computed by the publisher:
//                          end-to-end integrity up to the subscriber
//  52  u32 header_crc      XXH32 of bytes 0..51 (catches torn/garbage frames)
//  56  payload, then zero padding to the next multiple of 8
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include <catena/chain/limits.hpp>

namespace catena::chain {

struct RecordHeader {
  std::uint32_t length;
  std::uint32_t flags;
  std::uint64_t offset;
  std::uint64_t producer_id;
  std::uint64_t producer_epoch;
  std::uint64_t sequence;
  std::uint64_t timestamp_ns;
  std::uint32_t payload_crc;
  std::uint32_t header_crc;
};
static_assert(sizeof(RecordHeader) == 56);
static_assert(alignof(RecordHeader) == 8);

inline constexpr std::uint32_t kFlagSeal = 1u << 0;
// Ring padding (publisher and subscriber rings only, never in a segment):
// skip `length` bytes to the end of the ring. Its payload is not checked.
inline constexpr std::uint32_t kFlagPad = 1u << 1;
// A marker (channel alter, see ChannelGeneration in catena.thrift): appended
// by the head itself, replicated and delivered like any record; subscribers
// show it only to applications that ask for control records.
inline constexpr std::uint32_t kFlagMarker = 1u << 2;
inline constexpr std::uint32_t kKnownFlags = kFlagSeal | kFlagPad | kFlagMarker;

// What a marker says: its sequence is the generation it opens; its payload
// (kMarkerPayload bytes, little-endian u32s) the partition counts the
// channel goes from and to, so that a head can tell a publisher the new
// count and a subscriber which partitions feed which (key_map.hpp) without
// asking the controller.
struct MarkerSpec {
  std::uint64_t generation = 0;
  std::uint32_t from_partitions = 0;
  std::uint32_t to_partitions = 0;
  friend bool operator==(const MarkerSpec&, const MarkerSpec&) = default;
};
inline constexpr std::size_t kMarkerPayload = 8;
void encode_marker(const MarkerSpec& m, std::span<std::byte, kMarkerPayload> out) noexcept;
// False if `payload` is not a marker's (wrong size, a zero count).
[[nodiscard]] bool decode_marker(const RecordHeader& h, std::span<const std::byte> payload,
                                 MarkerSpec* out) noexcept;
inline constexpr std::size_t kRecordAlign = 8;
// Largest payload a record may carry (a segment must hold at least one).
using limits::kMaxRecordPayload;

constexpr std::size_t align_up(std::size_t n, std::size_t a = kRecordAlign) {
  return (n + a - 1) & ~(a - 1);
}
constexpr std::size_t frame_size(std::uint32_t payload) {
  return sizeof(RecordHeader) + align_up(payload);
}

std::uint32_t payload_checksum(std::span<const std::byte> payload) noexcept;
std::uint32_t header_checksum(const RecordHeader& h) noexcept;

enum class FrameCheck : std::uint8_t {
  ok,
  truncated,    // header or payload runs past the end of the valid range
  bad_header,   // header checksum mismatch, unknown flags, oversized length
  bad_payload,  // payload checksum mismatch
};

// Validates the frame at `at` within `valid` bytes. On ok, *out holds a copy
// of the header (read once: the memory may be written by a remote NIC).
FrameCheck check_frame(const std::byte* at, std::size_t valid, RecordHeader* out) noexcept;

// Writes a complete frame (header with checksums, payload, padding) at `at`.
// Returns the frame size.
std::size_t write_frame(std::byte* at, RecordHeader h, std::span<const std::byte> payload) noexcept;

// Re-stamps the offset of a frame that already holds a valid payload crc and
// recomputes the header checksum (used by the head when it copies a
// publisher's frame into the segment).
void restamp_offset(std::byte* at, std::uint64_t offset) noexcept;

// Re-numbers a frame the publisher built and the head never stored (the
// publisher resynchronises with the head's next sequence) and recomputes the
// header checksum.
void restamp_sequence(std::byte* at, std::uint64_t sequence) noexcept;

}  // namespace catena::chain
