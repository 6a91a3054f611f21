// The frame ring (chain/src/frame_ring.cpp): a reader over memory a remote
// writer fills, told how far with doorbell immediates. The input drives a
// writer that places frames honestly (FrameRingWriter, checksummed frames,
// pads) and, interleaved, a writer that lies: bytes scribbled anywhere in
// the ring, doorbells with any immediate, credit the reader never gave.
//
// Properties, whatever the writer does: every frame the reader hands out
// lies inside the ring and inside what was written, its header is one that
// checks, and consumed never passes written. While the writer has not lied,
// the reader hands out exactly the frames placed, in order, each once, and
// never reports the ring garbled.
#include <cstdint>
#include <cstring>
#include <deque>
#include <fuzzer/FuzzedDataProvider.h>
#include <vector>

#include <catena/chain/frame_ring.hpp>

#include "fuzz_check.hpp"

using namespace catena::chain;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const std::uint32_t ring_bytes = in.ConsumeIntegralInRange<std::uint32_t>(8, 512) * kRingAlign;
  const std::uint32_t max_frame =
      in.ConsumeIntegralInRange<std::uint32_t>(sizeof(RecordHeader), ring_bytes) & ~(kRingAlign - 1);
  std::vector<std::byte> ring(ring_bytes);  // exactly the ring: ASan sees a read past its end
  FrameRingWriter writer(ring_bytes, max_frame);
  FrameRingReader reader(ring.data(), ring_bytes);
  std::deque<std::uint64_t> placed;  // sequences of the frames placed and not yet read
  std::uint64_t next_sequence = 1;
  bool honest = true;
  bool garbled = false;

  auto write_pad = [&](std::uint32_t pos, const RecordHeader& pad) {
    std::memcpy(ring.data() + pos, &pad, sizeof pad);
    return true;
  };
  auto read_all = [&] {
    for (int guard = 0; guard < 4096; ++guard) {
      RingFrame f;
      const RingRead r = reader.next_st(&f);
      FUZZ_CHECK(reader.consumed() <= reader.written());
      if (r == RingRead::empty) return;
      if (r == RingRead::garbled) {
        FUZZ_CHECK(!honest);
        garbled = true;  // the session would be dropped here
        return;
      }
      FUZZ_CHECK(f.pos < ring_bytes && f.bytes <= ring_bytes - f.pos);
      FUZZ_CHECK(f.at == ring.data() + f.pos);
      FUZZ_CHECK(f.bytes == frame_size(f.header.length) && f.bytes >= sizeof(RecordHeader));
      FUZZ_CHECK(f.bytes <= reader.written() - reader.consumed());
      FUZZ_CHECK(f.header.header_crc == header_checksum(f.header));
      FUZZ_CHECK((f.header.flags & (kFlagPad | kFlagSeal)) == 0);
      FUZZ_CHECK(f.payload().size() == f.header.length);
      if (honest) {
        FUZZ_CHECK(!placed.empty() && placed.front() == f.header.sequence);
        placed.pop_front();
        RecordHeader again{};
        FUZZ_CHECK(check_frame(f.at, f.bytes, &again) == FrameCheck::ok);
      }
      reader.consume_st(f);
    }
    FUZZ_CHECK(false && "the reader handed out more frames than the ring can hold");
  };

  // As the servers do (PublishServer::consume, DeliveryClient::do_work), a
  // session whose writer claims more than the ring holds ends at once.
  while (in.remaining_bytes() > 0 && !garbled) {
    switch (in.ConsumeIntegralInRange(0, 7)) {
      case 0:
      case 1:
      case 2: {  // place a frame honestly and ring the doorbell
        const std::uint32_t payload = in.ConsumeIntegralInRange<std::uint32_t>(0, max_frame);
        const std::uint32_t bytes = static_cast<std::uint32_t>(frame_size(payload));
        std::uint32_t pos = 0;
        if (writer.place_st(bytes, write_pad, &pos) != RingStatus::ok) break;
        FUZZ_CHECK(pos + bytes <= ring_bytes);
        std::vector<std::byte> body(payload, std::byte{static_cast<std::uint8_t>(next_sequence)});
        RecordHeader h{};
        h.sequence = next_sequence;
        h.flags = in.ConsumeBool() ? kFlagTrace : 0;
        write_frame(ring.data() + pos, h, body);
        placed.push_back(next_sequence++);
        reader.on_immediate_st(writer.immediate());
        writer.flushed_st(writer.written());
        if (reader.overrun()) {  // a reader ahead of the writer (a lie before) may be pushed past it
          FUZZ_CHECK(!honest);
          garbled = true;
        }
        break;
      }
      case 3:
        read_all();
        break;
      case 4:  // the reader's credit reaches the writer
        if (reader.credit_due()) {
          const bool took = writer.credit_st(reader.consumed());
          if (honest) FUZZ_CHECK(took || reader.consumed() == writer.consumed());
          reader.credited_st();
        }
        break;
      case 5: {  // a doorbell with any immediate
        reader.on_immediate_st(in.ConsumeIntegral<std::uint32_t>());
        honest = honest && reader.written() == writer.written();
        if (reader.overrun()) {
          FUZZ_CHECK(!honest);
          garbled = true;  // what a server does with an overrun: drop the session
        }
        break;
      }
      case 6: {  // scribble over the ring
        const std::uint32_t at = in.ConsumeIntegralInRange<std::uint32_t>(0, ring_bytes - 1);
        const std::vector<std::uint8_t> junk = in.ConsumeBytes<std::uint8_t>(ring_bytes - at);
        if (!junk.empty()) {
          std::memcpy(ring.data() + at, junk.data(), junk.size());
          honest = false;
        }
        break;
      }
      default: {  // credit from nowhere: the writer must not take what was not written
        const std::uint64_t c = in.ConsumeIntegral<std::uint64_t>();
        const std::uint64_t before = writer.consumed();
        if (writer.credit_st(c)) {
          FUZZ_CHECK(c > before && c <= writer.written());
          honest = honest && c <= reader.consumed();
        }
        break;
      }
    }
  }
  if (!garbled) read_all();
  if (honest && !garbled) FUZZ_CHECK(placed.empty());
  return 0;
}
