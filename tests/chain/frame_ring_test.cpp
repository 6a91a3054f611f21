// The frame ring (frame_ring.hpp) as a specification: where frames and pads
// land, what the reader skips, how credit returns space and how the 64-bit
// totals survive 32-bit doorbell immediates. Writer and reader share one
// local buffer here, standing in for the remote ring.
#include <cstring>
#include <gtest/gtest.h>
#include <string>
#include <vector>

#include <catena/chain/bounded_fifo.hpp>
#include <catena/chain/frame_ring.hpp>
#include <catena/chain/record.hpp>

namespace catena::chain {
namespace {

// Payload bytes that make a frame of exactly `frame_bytes`.
std::uint32_t payload_for(std::uint32_t frame_bytes) {
  return frame_bytes - static_cast<std::uint32_t>(sizeof(RecordHeader));
}

struct Ring {
  explicit Ring(std::uint32_t ring_bytes, std::uint32_t max_frame = ~0u)
      : words(ring_bytes / 8), writer(ring_bytes, max_frame), reader(bytes(), ring_bytes) {}

  std::byte* bytes() { return reinterpret_cast<std::byte*>(words.data()); }

  // Places and writes a frame of `frame_bytes` whose sequence is `seq`.
  RingStatus write(std::uint32_t frame_bytes, std::uint64_t seq, std::uint32_t* pos) {
    const RingStatus st = writer.place_st(
        frame_bytes,
        [&](std::uint32_t at, const RecordHeader& pad) {
          pad_writes.push_back(at);
          std::memcpy(bytes() + at, &pad, sizeof pad);
          return true;
        },
        pos);
    if (st != RingStatus::ok) return st;
    std::vector<std::byte> payload(payload_for(frame_bytes), std::byte{static_cast<unsigned char>(seq)});
    RecordHeader h{};
    h.sequence = seq;
    EXPECT_EQ(write_frame(bytes() + *pos, h, payload), frame_bytes);
    return st;
  }
  // What a WRITE WITH IMMEDIATE of everything written tells the reader.
  void ring_doorbell() {
    reader.on_immediate_st(writer.immediate());
    writer.flushed_st(writer.written());
  }
  // Reads one frame and consumes it.
  RingFrame read() {
    RingFrame f;
    EXPECT_EQ(reader.next_st(&f), RingRead::frame);
    reader.consume_st(f);
    return f;
  }

  std::vector<std::uint64_t> words;  // 8-byte aligned, as registered memory is
  FrameRingWriter writer;
  FrameRingReader reader;
  std::vector<std::uint32_t> pad_writes;
};

TEST(FrameRing, FramesThatEndExactlyAtTheEndWrapWithoutAPad) {
  Ring r(1024);
  std::uint32_t pos = ~0u;
  for (std::uint32_t i = 0; i < 4; ++i) {
    ASSERT_EQ(r.write(256, i, &pos), RingStatus::ok);
    EXPECT_EQ(pos, i * 256);
  }
  EXPECT_EQ(r.writer.written(), 1024u);
  EXPECT_EQ(r.writer.position(), 0u);
  r.ring_doorbell();
  for (std::uint32_t i = 0; i < 4; ++i) {
    const RingFrame f = r.read();
    EXPECT_EQ(f.pos, i * 256);
    EXPECT_EQ(f.bytes, 256u);
    EXPECT_EQ(f.header.sequence, i);
    EXPECT_EQ(f.payload().size(), 200u);
    EXPECT_EQ(f.payload()[0], std::byte{static_cast<unsigned char>(i)});
  }
  ASSERT_TRUE(r.writer.credit_st(r.reader.consumed()));
  ASSERT_EQ(r.write(256, 4, &pos), RingStatus::ok);
  EXPECT_EQ(pos, 0u);
  EXPECT_TRUE(r.pad_writes.empty());
  EXPECT_EQ(r.writer.written(), 1280u);
}

TEST(FrameRing, AFrameThatDoesNotFitBeforeTheEndIsPaddedAndWraps) {
  Ring r(1024);
  std::uint32_t pos = 0;
  ASSERT_EQ(r.write(384, 0, &pos), RingStatus::ok);
  ASSERT_EQ(r.write(384, 1, &pos), RingStatus::ok);
  EXPECT_EQ(pos, 384u);
  r.ring_doorbell();
  (void)r.read();
  ASSERT_TRUE(r.writer.credit_st(r.reader.consumed()));  // 384 bytes free at the start
  ASSERT_EQ(r.write(384, 2, &pos), RingStatus::ok);
  EXPECT_EQ(pos, 0u);
  ASSERT_EQ(r.pad_writes, std::vector<std::uint32_t>{768});
  RecordHeader pad;
  std::memcpy(&pad, r.bytes() + 768, sizeof pad);
  EXPECT_EQ(pad.flags, kFlagPad);
  EXPECT_EQ(pad.length, 256u - sizeof(RecordHeader));
  EXPECT_EQ(pad.header_crc, header_checksum(pad));
  EXPECT_EQ(r.writer.written(), 768u + 256u + 384u);
}

TEST(FrameRing, ReaderSkipsPadsAndCountsThemConsumed) {
  Ring r(1024);
  std::uint32_t pos = 0;
  ASSERT_EQ(r.write(384, 0, &pos), RingStatus::ok);
  ASSERT_EQ(r.write(384, 1, &pos), RingStatus::ok);
  r.ring_doorbell();
  (void)r.read();
  (void)r.read();
  ASSERT_TRUE(r.writer.credit_st(r.reader.consumed()));
  ASSERT_EQ(r.write(384, 2, &pos), RingStatus::ok);  // pad at 768, frame at 0
  r.ring_doorbell();
  const RingFrame f = r.read();
  EXPECT_EQ(f.pos, 0u);
  EXPECT_EQ(f.header.sequence, 2u);
  EXPECT_EQ(r.reader.consumed(), 1024u + 384u);
  RingFrame none;
  EXPECT_EQ(r.reader.next_st(&none), RingRead::empty);
}

TEST(FrameRing, FewerBytesThanAHeaderBeforeTheEndWrapImplicitly) {
  Ring r(1024);
  std::uint32_t pos = 0;
  ASSERT_EQ(r.write(504, 0, &pos), RingStatus::ok);
  ASSERT_EQ(r.write(504, 1, &pos), RingStatus::ok);  // 16 bytes left before the end
  r.ring_doorbell();
  (void)r.read();
  ASSERT_TRUE(r.writer.credit_st(r.reader.consumed()));
  ASSERT_EQ(r.write(64, 2, &pos), RingStatus::ok);
  EXPECT_EQ(pos, 0u);
  EXPECT_TRUE(r.pad_writes.empty());  // no header fits: nothing written there
  EXPECT_EQ(r.writer.written(), 1024u + 64u);
  r.ring_doorbell();
  EXPECT_EQ(r.read().header.sequence, 1u);
  const RingFrame f = r.read();
  EXPECT_EQ(f.pos, 0u);
  EXPECT_EQ(f.header.sequence, 2u);
  EXPECT_EQ(r.reader.consumed(), r.writer.written());
}

// Found by tests/fuzz/frame_ring_fuzz.cpp: a doorbell whose total stops
// inside the implicit wrap (which no writer rings: it places the wrap with
// the frame after it) made the reader skip the wrap anyway and count more
// consumed than was written.
TEST(FrameRing, ADoorbellInsideTheImplicitWrapIsGarbled) {
  Ring r(1024);
  std::uint32_t pos = 0;
  ASSERT_EQ(r.write(504, 0, &pos), RingStatus::ok);
  ASSERT_EQ(r.write(504, 1, &pos), RingStatus::ok);  // 16 bytes left before the end
  r.ring_doorbell();
  (void)r.read();
  (void)r.read();
  r.reader.on_immediate_st(ring_immediate(1008 + 8));  // 8 of the 16 wrap bytes
  RingFrame f;
  EXPECT_EQ(r.reader.next_st(&f), RingRead::garbled);
  EXPECT_LE(r.reader.consumed(), r.reader.written());
}

TEST(FrameRing, AFullRingRefusesUntilCreditReturnsSpace) {
  Ring r(1024);
  std::uint32_t pos = 0;
  for (std::uint64_t i = 0; i < 4; ++i) ASSERT_EQ(r.write(256, i, &pos), RingStatus::ok);
  EXPECT_EQ(r.writer.free_bytes(), 0u);
  EXPECT_EQ(r.write(64, 4, &pos), RingStatus::full);
  EXPECT_EQ(r.writer.written(), 1024u);
  r.ring_doorbell();
  (void)r.read();
  EXPECT_EQ(r.write(64, 4, &pos), RingStatus::full);  // consumed, not yet credited
  ASSERT_TRUE(r.writer.credit_st(r.reader.consumed()));
  EXPECT_EQ(r.writer.free_bytes(), 256u);
  EXPECT_EQ(r.write(320, 4, &pos), RingStatus::full);
  ASSERT_EQ(r.write(256, 4, &pos), RingStatus::ok);
  EXPECT_EQ(pos, 0u);
}

TEST(FrameRing, CreditMustMoveForwardAndStayWithinWhatWasWritten) {
  Ring r(1024);
  std::uint32_t pos = 0;
  ASSERT_EQ(r.write(256, 0, &pos), RingStatus::ok);
  EXPECT_FALSE(r.writer.credit_st(0));
  EXPECT_FALSE(r.writer.credit_st(264));  // beyond what was written
  EXPECT_TRUE(r.writer.credit_st(256));
  EXPECT_FALSE(r.writer.credit_st(128));  // backwards
  EXPECT_EQ(r.writer.consumed(), 256u);
}

TEST(FrameRing, APadIsPlacedWhenItsBytesAreFreeEvenIfTheFrameMustWait) {
  Ring r(1024);
  std::uint32_t pos = 0;
  ASSERT_EQ(r.write(768, 0, &pos), RingStatus::ok);
  ASSERT_TRUE(r.writer.credit_st(768));
  ASSERT_EQ(r.write(128, 1, &pos), RingStatus::ok);  // 768..896
  ASSERT_TRUE(r.writer.credit_st(896));
  // 128 bytes to the end, all of them free: the pad goes in; the 1024-byte
  // frame needs the whole ring and waits until the reader has passed the pad.
  EXPECT_EQ(r.write(1024, 2, &pos), RingStatus::full);
  EXPECT_EQ(r.pad_writes, std::vector<std::uint32_t>{896});
  EXPECT_EQ(r.writer.written(), 1024u);
  ASSERT_TRUE(r.writer.credit_st(1024));
  ASSERT_EQ(r.write(1024, 2, &pos), RingStatus::ok);  // as large as the ring
  EXPECT_EQ(pos, 0u);
}

TEST(FrameRing, AFailedPadWriteMovesNothing) {
  Ring r(1024);
  std::uint32_t pos = 0;
  ASSERT_EQ(r.write(768, 0, &pos), RingStatus::ok);
  ASSERT_TRUE(r.writer.credit_st(768));
  pos = 12345;
  EXPECT_EQ(r.writer.place_st(
                512, [](std::uint32_t, const RecordHeader&) { return false; }, &pos),
            RingStatus::pad_failed);
  EXPECT_EQ(r.writer.written(), 768u);
  EXPECT_EQ(pos, 12345u);
}

TEST(FrameRing, EmptyMisalignedAndOversizedFramesAreRefused) {
  Ring r(1024, 512);
  std::uint32_t pos = 0;
  EXPECT_EQ(r.write(0, 0, &pos), RingStatus::empty_frame);
  EXPECT_EQ(r.writer.check_size(0), RingStatus::empty_frame);
  EXPECT_EQ(r.writer.check_size(sizeof(RecordHeader) - 8), RingStatus::bad_frame_size);
  EXPECT_EQ(r.writer.check_size(sizeof(RecordHeader) + 4), RingStatus::bad_frame_size);
  EXPECT_EQ(r.writer.check_size(520), RingStatus::frame_too_large);
  EXPECT_EQ(r.writer.check_size(512), RingStatus::ok);
  EXPECT_EQ(r.writer.written(), 0u);
  EXPECT_EQ(to_string(RingStatus::frame_too_large), "frame larger than the ring takes");
  EXPECT_EQ(to_string(RingStatus::empty_frame), "empty frame: a frame holds at least a record header");
  // A writer never takes a frame larger than its ring.
  EXPECT_EQ(FrameRingWriter(1024, 4096).max_frame_bytes(), 1024u);
}

TEST(FrameRing, ImmediatesRebuildThe64BitTotalsAcrossThe32BitWrap) {
  // The immediate counts 8-byte units: it wraps every 32 GiB.
  const std::uint64_t wrap = (std::uint64_t{1} << 32) * kRingAlign;
  const std::uint64_t before = wrap - 256;
  EXPECT_EQ(ring_immediate(before), 0xffffffe0u);
  EXPECT_EQ(ring_immediate(wrap + 512), 64u);
  EXPECT_EQ(advance_ring_total(before, ring_immediate(wrap + 512)), wrap + 512);
  EXPECT_EQ(advance_ring_total(wrap * 3 - 8, ring_immediate(wrap * 3 + 1024)), wrap * 3 + 1024);
  EXPECT_EQ(advance_ring_total(before, ring_immediate(before)), before);  // a repeated doorbell
  // A reader that follows a writer's doorbells across many wraps of the
  // immediate, a ring at a time.
  FrameRingReader reader(nullptr, 256u << 20);
  std::uint64_t total = 0;
  for (int i = 0; i < 300; ++i) {
    total += 256u << 20;
    reader.on_immediate_st(ring_immediate(total));
    ASSERT_EQ(reader.written(), total);
  }
  EXPECT_GT(total, 2 * wrap);
}

TEST(FrameRing, WriterAndReaderAgreeOverManyLapsOfTheRing) {
  Ring r(4096);
  std::uint32_t pos = 0;
  std::uint64_t next_read = 0;
  for (std::uint64_t seq = 0; seq < 5000; ++seq) {
    const std::uint32_t frame = 64 + static_cast<std::uint32_t>((seq * 40) % 1200);
    RingStatus st = r.write(frame, seq, &pos);
    while (st == RingStatus::full) {
      r.ring_doorbell();
      RingFrame f;
      ASSERT_EQ(r.reader.next_st(&f), RingRead::frame);
      ASSERT_EQ(f.header.sequence, next_read++);
      ASSERT_EQ(f.header.payload_crc, payload_checksum(f.payload()));
      r.reader.consume_st(f);
      ASSERT_TRUE(r.writer.credit_st(r.reader.consumed()));
      st = r.write(frame, seq, &pos);
    }
    ASSERT_EQ(st, RingStatus::ok);
    ASSERT_EQ(pos % 8, 0u);
    ASSERT_LE(pos + frame, 4096u);
  }
  EXPECT_GT(r.writer.written(), 100u * 4096);
}

TEST(FrameRing, GarbledFramesAndOverrunsAreProtocolErrors) {
  Ring r(1024);
  std::uint32_t pos = 0;
  ASSERT_EQ(r.write(256, 0, &pos), RingStatus::ok);
  r.ring_doorbell();
  r.bytes()[3] ^= std::byte{1};  // the length, under the header checksum
  RingFrame f;
  EXPECT_EQ(r.reader.next_st(&f), RingRead::garbled);
  r.bytes()[3] ^= std::byte{1};
  EXPECT_EQ(r.reader.next_st(&f), RingRead::frame);

  // A seal belongs in segments only.
  Ring s(1024);
  RecordHeader seal{};
  seal.flags = kFlagSeal;
  write_frame(s.bytes(), seal, {});
  s.reader.on_immediate_st(ring_immediate(sizeof(RecordHeader)));
  EXPECT_EQ(s.reader.next_st(&f), RingRead::garbled);

  // A doorbell for part of a header.
  Ring t(1024);
  t.reader.on_immediate_st(ring_immediate(16));
  EXPECT_EQ(t.reader.next_st(&f), RingRead::garbled);

  FrameRingReader over(nullptr, 1024);
  over.on_immediate_st(ring_immediate(1032));
  EXPECT_TRUE(over.overrun());
}

TEST(FrameRing, ChunksToFlushStopAtTheRingsEnd) {
  Ring r(1024);
  std::uint32_t pos = 0;
  ASSERT_EQ(r.write(768, 0, &pos), RingStatus::ok);
  r.ring_doorbell();
  (void)r.read();
  ASSERT_TRUE(r.writer.credit_st(r.reader.consumed()));
  ASSERT_EQ(r.write(128, 1, &pos), RingStatus::ok);  // 768..896
  ASSERT_EQ(r.write(256, 2, &pos), RingStatus::ok);  // pad 896..1024, frame 0..256
  auto c = r.writer.next_chunk();
  EXPECT_EQ(c.pos, 768u);
  EXPECT_EQ(c.bytes, 256u);
  EXPECT_FALSE(c.last);
  r.writer.flushed_st(r.writer.flushed() + c.bytes);
  c = r.writer.next_chunk();
  EXPECT_EQ(c.pos, 0u);
  EXPECT_EQ(c.bytes, 256u);
  EXPECT_TRUE(c.last);
  r.writer.flushed_st(r.writer.flushed() + c.bytes);
  EXPECT_EQ(r.writer.next_chunk().bytes, 0u);
  // What was placed and never flushed can be taken back; what was flushed cannot.
  ASSERT_EQ(r.write(64, 3, &pos), RingStatus::ok);
  r.writer.rewind_st(0);
  EXPECT_EQ(r.writer.written(), r.writer.flushed());
}

TEST(FrameRing, CreditIsDueAfterAQuarterOfTheRingOrEverything) {
  Ring r(1024);
  std::uint32_t pos = 0;
  ASSERT_EQ(r.write(128, 0, &pos), RingStatus::ok);
  ASSERT_EQ(r.write(128, 1, &pos), RingStatus::ok);
  ASSERT_EQ(r.write(128, 2, &pos), RingStatus::ok);
  r.ring_doorbell();
  EXPECT_FALSE(r.reader.credit_due());
  (void)r.read();
  EXPECT_FALSE(r.reader.credit_due());  // 128 < 256, more to read
  (void)r.read();
  EXPECT_TRUE(r.reader.credit_due());
  r.reader.credited_st();
  EXPECT_FALSE(r.reader.credit_due());
  (void)r.read();
  EXPECT_TRUE(r.reader.credit_due());  // everything written is consumed
}

TEST(BoundedFifo, KeepsOrderAcrossItsEndAndRefusesNothingItDoesNotHold) {
  BoundedFifo<int> q(3);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.back(), nullptr);
  for (int round = 0; round < 5; ++round) {
    q.push_back(round * 10);
    q.push_back(round * 10 + 1);
    EXPECT_EQ(q.size(), 2u);
    EXPECT_EQ(q.front(), round * 10);
    EXPECT_EQ(*q.back(), round * 10 + 1);
    EXPECT_EQ(q[1], round * 10 + 1);
    q.pop_front();
    q.pop_front();
  }
  q.push_back(1);
  q.push_back(2);
  q.push_back(3);
  EXPECT_TRUE(q.full());
  EXPECT_EQ(q.capacity(), 3u);
}

// Slots are constructed when first pushed into, and every constructed one is
// destroyed once, also across moves of the queue.
TEST(BoundedFifo, ConstructsASlotOnItsFirstUseAndDestroysEachOnce) {
  static int alive = 0;
  struct Counted {
    std::string text;
    explicit Counted(std::string t) : text(std::move(t)) { ++alive; }
    Counted(Counted&& o) noexcept : text(std::move(o.text)) { ++alive; }
    Counted& operator=(Counted&& o) noexcept {
      text = std::move(o.text);
      return *this;
    }
    ~Counted() { --alive; }
  };
  {
    BoundedFifo<Counted> q(1000);
    EXPECT_EQ(alive, 0);  // nothing is constructed up front
    for (int i = 0; i < 5; ++i) q.push_back(Counted("r" + std::to_string(i)));
    EXPECT_EQ(alive, 5);  // the five slots (each argument is gone again)
    q.pop_front();
    q.pop_front();
    EXPECT_EQ(q.front().text, "r2");
    BoundedFifo<Counted> moved(std::move(q));
    EXPECT_EQ(alive, 5);
    EXPECT_EQ(moved.size(), 3u);
    EXPECT_EQ(moved[2].text, "r4");
    EXPECT_EQ(q.capacity(), 0u);  // NOLINT(bugprone-use-after-move): a moved-from queue is empty
    BoundedFifo<Counted> small(2);
    small.push_back(Counted("a"));
    small.pop_front();
    small.push_back(Counted("b"));
    small.pop_front();
    small.push_back(Counted("c"));  // wraps into slot 0: assigned, not constructed again
    EXPECT_EQ(alive, 7);
    EXPECT_EQ(small.front().text, "c");
    small = std::move(moved);  // small's two slots are destroyed
    EXPECT_EQ(alive, 5);
    EXPECT_EQ(small[0].text, "r2");
  }
  EXPECT_EQ(alive, 0);
}

}  // namespace
}  // namespace catena::chain
