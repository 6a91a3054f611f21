#include <catena/chain/frame_ring.hpp>

namespace catena::chain {

std::string_view to_string(RingStatus s) noexcept {
  switch (s) {
    case RingStatus::ok:
      return "ok";
    case RingStatus::full:
      return "ring full: wait for credit";
    case RingStatus::pad_failed:
      return "the pad to the ring's end could not be written";
    case RingStatus::empty_frame:
      return "empty frame: a frame holds at least a record header";
    case RingStatus::bad_frame_size:
      return "frame size is not a multiple of 8 or shorter than a record header";
    case RingStatus::frame_too_large:
      return "frame larger than the ring takes";
  }
  return "unknown ring status";
}

RecordHeader make_pad(std::uint32_t pad_bytes) noexcept {
  RecordHeader pad{};
  pad.flags = kFlagPad;
  pad.length = pad_bytes - static_cast<std::uint32_t>(sizeof pad);
  pad.header_crc = header_checksum(pad);
  return pad;
}

RingRead FrameRingReader::next_st(RingFrame* out) noexcept {
  while (consumed_ < written_) {
    const std::uint32_t pos = static_cast<std::uint32_t>(consumed_ % ring_bytes_);
    const std::uint32_t to_end = ring_bytes_ - pos;
    if (to_end < sizeof(RecordHeader)) {  // implicit wrap
      // A writer's total never stops inside one (it places the wrap with
      // the frame after it): a doorbell there is a lie, and skipping the
      // wrap would take consumed past written (found by the frame ring's
      // fuzz target, tests/fuzz/).
      if (written_ - consumed_ < to_end) return RingRead::garbled;
      consumed_ += to_end;
      continue;
    }
    const std::uint64_t avail = std::min<std::uint64_t>(written_ - consumed_, to_end);
    // A writer rings the doorbell only for whole frames.
    if (avail < sizeof(RecordHeader)) return RingRead::garbled;
    RecordHeader h;
    std::memcpy(&h, ring_ + pos, sizeof h);
    if (h.header_crc != header_checksum(h) || (h.flags & ~kKnownFlags) != 0 || (h.flags & kFlagSeal) != 0 ||
        h.length > kMaxRecordPayload || frame_size(h.length) > avail) {
      return RingRead::garbled;
    }
    const auto bytes = static_cast<std::uint32_t>(frame_size(h.length));
    if (h.flags & kFlagPad) {
      consumed_ += bytes;
      continue;
    }
    *out = RingFrame{ring_ + pos, pos, bytes, h};
    return RingRead::frame;
  }
  return RingRead::empty;
}

}  // namespace catena::chain
