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
//                          kFlagAttributes: the payload region starts
//                          with an attributes block (key, headers; see
//                          below), then the application's payload
//   8  u64 offset          partition-wide position (set by the head)
//  16  u64 producer_id
//  24  u64 producer_epoch  issued by the controller on every publisher start
//  32  u64 sequence        per (producer epoch, partition), starts at 0;
//                          64 bits so it never wraps (2^32 records take
//                          35 minutes at 2 M/s)
//  40  u64 timestamp_ns    wall clock at the publisher
//  48  u32 payload_crc     CRC-32C of the payload, computed by the publisher:
//                          end-to-end integrity up to the subscriber
//  52  u32 header_crc      CRC-32C of bytes 0..51 (catches torn/garbage frames)
//  56  payload, then zero padding to the next multiple of 8
//
// The attributes block (kFlagAttributes), little-endian, unaligned:
//   u16 key_length, u16 header_count, key bytes, then per header
//   u16 name_length, u16 value_length, name bytes, value bytes;
// bounded by limits.hpp (kMaxRecordKeyBytes, kMaxRecordHeaders,
// kMaxHeaderNameBytes, kMaxHeaderValueBytes; a name is never empty).
// `length` and `payload_crc` cover the block and the payload together, so
// replicas carry it as opaque payload; the head and the subscriber decode it
// (decode_record) and refuse a malformed one. Frames without the flag are
// exactly as before it existed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>
#include <span>
#include <string_view>

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
// The payload region begins with an attributes block (see the top).
inline constexpr std::uint32_t kFlagAttributes = 1u << 3;
// Traced: every replica adds this record's age to its position's stage
// latency as the record reaches it (stage_latency.hpp). Set by a publisher
// with PublisherOptions::trace_stages; changes nothing else.
inline constexpr std::uint32_t kFlagTrace = 1u << 4;
inline constexpr std::uint32_t kKnownFlags =
    kFlagSeal | kFlagPad | kFlagMarker | kFlagAttributes | kFlagTrace;

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

// --- attributes: a record's key and headers ---------------------------------

// One header: a name (1..kMaxHeaderNameBytes bytes) and a value (up to
// kMaxHeaderValueBytes), both byte strings.
struct HeaderField {
  std::string_view name;
  std::string_view value;
  friend bool operator==(const HeaderField&, const HeaderField&) = default;
};

struct DecodedRecord;
enum class AttributesCheck : std::uint8_t;

// A decoded block's headers, read in place (no copy, no allocation): valid
// as long as the frame's bytes are. Only decode_record() makes a non-empty
// one, after validating every length.
class HeaderFields {
 public:
  class iterator {
   public:
    using value_type = HeaderField;
    using difference_type = std::ptrdiff_t;
    using pointer = const HeaderField*;
    using reference = const HeaderField&;
    using iterator_category = std::forward_iterator_tag;

    iterator() = default;
    reference operator*() const noexcept { return cur_; }
    pointer operator->() const noexcept { return &cur_; }
    iterator& operator++() noexcept {
      at_ += 4 + cur_.name.size() + cur_.value.size();
      --left_;
      load();
      return *this;
    }
    iterator operator++(int) noexcept {
      iterator was = *this;
      ++*this;
      return was;
    }
    friend bool operator==(const iterator& a, const iterator& b) noexcept { return a.left_ == b.left_; }

   private:
    friend class HeaderFields;
    iterator(const std::byte* at, std::uint16_t left) noexcept : at_(at), left_(left) { load(); }
    void load() noexcept {
      if (left_ == 0) return;
      std::uint16_t n = 0;
      std::uint16_t v = 0;
      std::memcpy(&n, at_, 2);
      std::memcpy(&v, at_ + 2, 2);
      const auto* text = reinterpret_cast<const char*>(at_ + 4);
      cur_ = HeaderField{{text, n}, {text + n, v}};
    }
    const std::byte* at_ = nullptr;
    std::uint16_t left_ = 0;
    HeaderField cur_{};
  };

  HeaderFields() = default;
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  // The first header's bytes in the block (the client's public Headers view
  // reads the same block: broker/record_views.hpp).
  [[nodiscard]] const std::byte* data() const noexcept { return at_; }
  [[nodiscard]] iterator begin() const noexcept { return {at_, count_}; }
  [[nodiscard]] iterator end() const noexcept { return {}; }
  // The value of the first header called `name`.
  [[nodiscard]] std::optional<std::string_view> find(std::string_view name) const noexcept {
    for (const HeaderField& f : *this)
      if (f.name == name) return f.value;
    return std::nullopt;
  }

 private:
  friend AttributesCheck decode_record(const RecordHeader& h, std::span<const std::byte> region,
                                       DecodedRecord* out) noexcept;
  HeaderFields(const std::byte* at, std::uint16_t count) noexcept : at_(at), count_(count) {}
  const std::byte* at_ = nullptr;
  std::uint16_t count_ = 0;
};

// What a publisher asks to carry ahead of a payload.
struct Attributes {
  std::span<const std::byte> key;
  std::span<const HeaderField> headers;
};

// A record's payload region, decoded: its key and headers (empty without
// kFlagAttributes) and the application's payload.
struct DecodedRecord {
  std::span<const std::byte> key;
  HeaderFields headers;
  std::span<const std::byte> payload;
};

enum class AttributesCheck : std::uint8_t {
  ok,
  truncated,              // the block runs past the payload region
  key_too_long,           // over kMaxRecordKeyBytes
  too_many_headers,       // over kMaxRecordHeaders
  empty_header_name,      // a header without a name
  header_name_too_long,   // over kMaxHeaderNameBytes
  header_value_too_long,  // over kMaxHeaderValueBytes
};
[[nodiscard]] const char* describe(AttributesCheck c) noexcept;

inline constexpr std::size_t kAttributesFixedBytes = 4;   // key length, header count
inline constexpr std::size_t kHeaderFieldFixedBytes = 4;  // name and value lengths

// The size of the block that carries `a`, or an error if it exceeds a limit.
[[nodiscard]] AttributesCheck attributes_size(const Attributes& a, std::size_t* out) noexcept;
// Writes the block for `a` (attributes_size() bytes, which must be ok) at `at`.
void encode_attributes(std::byte* at, const Attributes& a) noexcept;
// Splits a record's payload region (what check_frame validated): with
// kFlagAttributes, validates and decodes the block, the rest being the
// payload; without it, all of it is payload. On error *out is untouched.
[[nodiscard]] AttributesCheck decode_record(const RecordHeader& h, std::span<const std::byte> region,
                                            DecodedRecord* out) noexcept;
// The frame size of a record carrying `block` attribute bytes ahead of `payload`.
constexpr std::size_t frame_size_with(std::size_t block, std::size_t payload) {
  return sizeof(RecordHeader) + align_up(block + payload);
}
// Writes a complete frame carrying `a` (attributes_size() must be ok and,
// with the payload, fit within kMaxRecordPayload) and sets kFlagAttributes:
// the block and the payload are written in place, then checksummed there.
// Returns the frame size.
std::size_t write_frame(std::byte* at, RecordHeader h, const Attributes& a,
                        std::span<const std::byte> payload) noexcept;

}  // namespace catena::chain
