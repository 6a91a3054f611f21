// The frame ring: how a client's records travel through a buffer that one
// side writes remotely and the other side reads. Two rings use it: the
// publisher's staging ring at the head (publisher writes, head reads) and a
// subscriber's delivery ring (a replica writes, the subscriber reads).
//
// The rules, all of them here:
// - The ring holds record frames (record.hpp), each 8-byte aligned and never
//   split at the ring's end.
// - A frame that does not fit before the end is preceded by a **pad**: a
//   frame with kFlagPad whose length runs to the end, or, when fewer than a
//   header's bytes remain, nothing at all (the **implicit wrap**). The reader
//   skips both; the frame goes to offset 0.
// - Both sides count 64-bit running totals: **written** (bytes the writer
//   placed, pads included), **flushed** (bytes the writer handed to the
//   fabric) and **consumed** (bytes the reader is done with). A WRITE WITH
//   IMMEDIATE rings the doorbell with written / 8 mod 2^32; the reader
//   rebuilds the 64-bit total from it (advance_ring_total).
// - The reader returns space as **credit**: its consumed total, which the
//   writer accepts if it moves forward and stays within what it wrote.
//
// Threading: a writer or a reader belongs to the thread that owns its
// session (all _st functions); neither allocates, locks or calls the kernel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include <catena/chain/limits.hpp>
#include <catena/chain/record.hpp>

namespace catena::chain {

// A ring's size is a multiple of the frame alignment, which is also the unit
// of the doorbell immediate.
inline constexpr std::uint32_t kRingAlign = kRecordAlign;
// Staging rings the head grants (and a delivery ring's minimum).
inline constexpr std::uint32_t kMinRingBytes = limits::kMinPublisherRing;
inline constexpr std::uint32_t kMaxRingBytes = limits::kMaxPublisherRing;
static_assert(kMinRingBytes % kRingAlign == 0 && kMaxRingBytes % kRingAlign == 0);
static_assert(kMinRingBytes >= 2 * sizeof(RecordHeader));
// The immediate counts kRingAlign units mod 2^32. A writer is never more than
// a ring ahead of its reader, and any 32-bit ring size is below half the
// immediate's range, so the 64-bit total is rebuilt without ambiguity.
static_assert(std::uint64_t{0xffffffffu} < (std::uint64_t{1} << 32) * kRingAlign / 2);

// The staging ring a publisher asks for, as the head grants it.
constexpr std::uint32_t clamp_ring_bytes(std::uint32_t want) {
  return std::clamp(want, kMinRingBytes, kMaxRingBytes) & ~(kRingAlign - 1);
}

// Rounds a ring size down to the alignment (delivery rings are not clamped).
constexpr std::uint32_t align_ring_bytes(std::uint32_t want) {
  return want & ~(kRingAlign - 1);
}

// The doorbell immediate for a written total.
constexpr std::uint32_t ring_immediate(std::uint64_t written) {
  return static_cast<std::uint32_t>(written / kRingAlign);
}

// Rebuilds the 64-bit written total from a doorbell immediate.
constexpr std::uint64_t advance_ring_total(std::uint64_t total, std::uint32_t imm) {
  const std::uint32_t low = ring_immediate(total);
  return total + static_cast<std::uint64_t>(static_cast<std::uint32_t>(imm - low)) * kRingAlign;
}

enum class RingStatus : std::uint8_t {
  ok,
  full,             // not enough free bytes until the reader returns credit
  pad_failed,       // the pad could not be written (send queue full): retry
  empty_frame,      // a frame of 0 bytes
  bad_frame_size,   // shorter than a record header or not a multiple of kRingAlign
  frame_too_large,  // larger than the writer's largest frame
};

[[nodiscard]] std::string_view to_string(RingStatus s) noexcept;

// The pad header that fills `pad_bytes` (at least a header) to the ring's end.
RecordHeader make_pad(std::uint32_t pad_bytes) noexcept;

// The writing side of a frame ring. The ring's memory is the caller's (a
// local image that is flushed, or frames written straight from elsewhere):
// the writer decides where each frame goes and keeps the totals.
//
// Lifecycle: built with the ring's size once the ring is known; reset_st()
// when a new, empty ring replaces it (a reconnect).
class FrameRingWriter {
 public:
  // A contiguous run of written bytes not yet flushed.
  struct Chunk {
    std::uint32_t pos = 0;
    std::uint32_t bytes = 0;
    bool last = false;  // ends at the written total: ring the doorbell with it
  };

  FrameRingWriter() = default;
  // `max_frame_bytes` is the largest frame this writer takes (at most the ring).
  FrameRingWriter(std::uint32_t ring_bytes, std::uint32_t max_frame_bytes) noexcept
      : ring_bytes_(ring_bytes), max_frame_(std::min(max_frame_bytes, ring_bytes)) {}

  // Whether a frame of this size could ever be placed.
  [[nodiscard]] RingStatus check_size(std::uint32_t frame_bytes) const noexcept {
    if (frame_bytes == 0) return RingStatus::empty_frame;
    if (frame_bytes < sizeof(RecordHeader) || frame_bytes % kRingAlign != 0)
      return RingStatus::bad_frame_size;
    if (frame_bytes > max_frame_) return RingStatus::frame_too_large;
    return RingStatus::ok;
  }

  // Places a frame: on ok, *pos is the ring offset to write its bytes at and
  // `written` includes them. A frame that does not fit before the end is
  // preceded by a pad, placed as soon as the bytes to the end are free (so a
  // frame as large as the ring is placed once the reader has caught up);
  // `write_pad(pos, header)` writes the pad's header when at least a header's
  // bytes remain and returns false if it could not (then nothing moves). The
  // pad may be placed even when the frame then finds the ring full.
  template <class WritePad>
  [[nodiscard]] RingStatus place_st(std::uint32_t frame_bytes, WritePad&& write_pad, std::uint32_t* pos) {
    const RingStatus size = check_size(frame_bytes);
    if (size != RingStatus::ok) return size;
    const std::uint32_t to_end = ring_bytes_ - position();
    if (frame_bytes > to_end) {
      if (to_end > free_bytes()) return RingStatus::full;
      if (to_end >= sizeof(RecordHeader) && !write_pad(position(), make_pad(to_end)))
        return RingStatus::pad_failed;
      written_ += to_end;
    }
    if (frame_bytes > free_bytes()) return RingStatus::full;
    *pos = position();
    written_ += frame_bytes;
    return RingStatus::ok;
  }

  // Bytes that can be placed at position() without a pad.
  [[nodiscard]] std::uint32_t contiguous_free() const noexcept {
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(ring_bytes_ - position(), free_bytes()));
  }

  // The next run of bytes to hand to the fabric (bytes 0 if none).
  [[nodiscard]] Chunk next_chunk() const noexcept {
    const std::uint32_t pos = static_cast<std::uint32_t>(flushed_ % ring_bytes_);
    const std::uint64_t bytes = std::min<std::uint64_t>(written_ - flushed_, ring_bytes_ - pos);
    return Chunk{pos, static_cast<std::uint32_t>(bytes), flushed_ + bytes == written_};
  }
  // The fabric took everything up to this total (flushed <= total <= written).
  void flushed_st(std::uint64_t total) noexcept { flushed_ = std::clamp(total, flushed_, written_); }
  // Forgets what was placed after this total and never flushed.
  void rewind_st(std::uint64_t total) noexcept { written_ = std::clamp(total, flushed_, written_); }

  // The reader's consumed total: taken if it moves forward and stays within
  // what was written. False (ignored) otherwise.
  bool credit_st(std::uint64_t consumed) noexcept {
    if (consumed <= consumed_ || consumed > written_) return false;
    consumed_ = consumed;
    return true;
  }

  // A new, empty ring of the same size.
  void reset_st() noexcept { written_ = flushed_ = consumed_ = 0; }

  [[nodiscard]] std::uint32_t ring_bytes() const noexcept { return ring_bytes_; }
  [[nodiscard]] std::uint32_t max_frame_bytes() const noexcept { return max_frame_; }
  [[nodiscard]] std::uint64_t written() const noexcept { return written_; }
  [[nodiscard]] std::uint64_t flushed() const noexcept { return flushed_; }
  [[nodiscard]] std::uint64_t consumed() const noexcept { return consumed_; }
  [[nodiscard]] std::uint32_t immediate() const noexcept { return ring_immediate(written_); }
  [[nodiscard]] std::uint32_t position() const noexcept {
    return static_cast<std::uint32_t>(written_ % ring_bytes_);
  }
  [[nodiscard]] std::uint64_t free_bytes() const noexcept { return ring_bytes_ - (written_ - consumed_); }

 private:
  std::uint32_t ring_bytes_ = 0;
  std::uint32_t max_frame_ = 0;
  std::uint64_t written_ = 0;
  std::uint64_t flushed_ = 0;
  std::uint64_t consumed_ = 0;
};

// One frame as the reader found it: the header was read once (the writer's
// NIC may rewrite the memory) and checked; the payload checksum is the
// caller's to verify where it matters.
struct RingFrame {
  const std::byte* at = nullptr;
  std::uint32_t pos = 0;
  std::uint32_t bytes = 0;
  RecordHeader header{};

  [[nodiscard]] std::span<const std::byte> payload() const noexcept {
    return {at + sizeof(RecordHeader), header.length};
  }
};

enum class RingRead : std::uint8_t {
  frame,    // a frame to take: consume_st() it once done
  empty,    // nothing written beyond what was consumed
  garbled,  // not a frame where one must be: a protocol error, drop the session
};

// The reading side of a frame ring over local memory that the writer fills
// remotely. Lifecycle: built once the ring is allocated; reset_st() when a
// new writer starts over (a reconnect).
class FrameRingReader {
 public:
  FrameRingReader() = default;
  FrameRingReader(const std::byte* ring, std::uint32_t ring_bytes) noexcept
      : ring_(ring), ring_bytes_(ring_bytes) {}

  // A doorbell: the immediate of a WRITE WITH IMMEDIATE.
  void on_immediate_st(std::uint32_t imm) noexcept { written_ = advance_ring_total(written_, imm); }
  // The writer claims more than the ring holds: a protocol error.
  [[nodiscard]] bool overrun() const noexcept { return written_ - consumed_ > ring_bytes_; }

  // The next frame, skipping pads and implicit wraps (which count as
  // consumed). Checks the header, its flags (no seal: segments only) and
  // that the frame lies within what was written, not the payload.
  [[nodiscard]] RingRead next_st(RingFrame* out) noexcept;
  void consume_st(const RingFrame& f) noexcept { consumed_ += f.bytes; }

  // Credit is worth sending once a quarter of the ring or all that was
  // written has been consumed since the last.
  [[nodiscard]] bool credit_due() const noexcept {
    return consumed_ > credited_ && (consumed_ - credited_ >= ring_bytes_ / 4 || consumed_ == written_);
  }
  void credited_st() noexcept { credited_ = consumed_; }

  void reset_st() noexcept { written_ = consumed_ = credited_ = 0; }

  [[nodiscard]] std::uint32_t ring_bytes() const noexcept { return ring_bytes_; }
  [[nodiscard]] std::uint64_t written() const noexcept { return written_; }
  [[nodiscard]] std::uint64_t consumed() const noexcept { return consumed_; }
  [[nodiscard]] std::uint64_t credited() const noexcept { return credited_; }

 private:
  const std::byte* ring_ = nullptr;
  std::uint32_t ring_bytes_ = 0;
  std::uint64_t written_ = 0;
  std::uint64_t consumed_ = 0;
  std::uint64_t credited_ = 0;
};

}  // namespace catena::chain
