#include <xxhash.h>

#include <catena/chain/record.hpp>

namespace catena::chain {

std::uint32_t payload_checksum(std::span<const std::byte> payload) noexcept {
  return XXH32(payload.data(), payload.size(), 0x43415445u);
}

std::uint32_t header_checksum(const RecordHeader& h) noexcept {
  return XXH32(&h, offsetof(RecordHeader, header_crc), 0x4e414843u);
}

FrameCheck check_frame(const std::byte* at, std::size_t valid, RecordHeader* out) noexcept {
  if (valid < sizeof(RecordHeader)) return FrameCheck::truncated;
  RecordHeader h;
  std::memcpy(&h, at, sizeof h);
  if (h.header_crc != header_checksum(h) || (h.flags & ~kKnownFlags) != 0 || h.length > kMaxRecordPayload) {
    return FrameCheck::bad_header;
  }
  if (frame_size(h.length) > valid) return FrameCheck::truncated;
  if (h.flags & kFlagPad) {
    *out = h;
    return FrameCheck::ok;
  }
  if (h.payload_crc != payload_checksum({at + sizeof h, h.length})) return FrameCheck::bad_payload;
  *out = h;
  return FrameCheck::ok;
}

std::size_t write_frame(std::byte* at, RecordHeader h, std::span<const std::byte> payload) noexcept {
  h.length = static_cast<std::uint32_t>(payload.size());
  h.payload_crc = payload_checksum(payload);
  h.header_crc = header_checksum(h);
  std::memcpy(at, &h, sizeof h);
  if (!payload.empty()) std::memcpy(at + sizeof h, payload.data(), payload.size());
  std::size_t pad = align_up(payload.size()) - payload.size();
  if (pad) std::memset(at + sizeof h + payload.size(), 0, pad);
  return sizeof h + payload.size() + pad;
}

void restamp_offset(std::byte* at, std::uint64_t offset) noexcept {
  RecordHeader h;
  std::memcpy(&h, at, sizeof h);
  h.offset = offset;
  h.header_crc = header_checksum(h);
  std::memcpy(at, &h, sizeof h);
}

void restamp_sequence(std::byte* at, std::uint64_t sequence) noexcept {
  RecordHeader h;
  std::memcpy(&h, at, sizeof h);
  h.sequence = sequence;
  h.header_crc = header_checksum(h);
  std::memcpy(at, &h, sizeof h);
}

void encode_marker(const MarkerSpec& m, std::span<std::byte, kMarkerPayload> out) noexcept {
  std::memcpy(out.data(), &m.from_partitions, 4);  // little-endian hosts only, as every frame
  std::memcpy(out.data() + 4, &m.to_partitions, 4);
}

bool decode_marker(const RecordHeader& h, std::span<const std::byte> payload, MarkerSpec* out) noexcept {
  if ((h.flags & kFlagMarker) == 0 || payload.size() != kMarkerPayload) return false;
  MarkerSpec m;
  m.generation = h.sequence;
  std::memcpy(&m.from_partitions, payload.data(), 4);
  std::memcpy(&m.to_partitions, payload.data() + 4, 4);
  if (m.from_partitions == 0 || m.to_partitions == 0) return false;
  *out = m;
  return true;
}

}  // namespace catena::chain
