// Google Benchmark of the frame ring's hot path (chain/frame_ring.hpp), one
// thread playing writer and reader over one local buffer: placing a frame
// (with the occasional pad), writing it, ringing the doorbell, reading and
// validating it, and returning credit. What the publisher, the head and a
// subscriber each spend per record on the ring itself, without the fabric.
//   catena-frame-ring-bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <cstring>
#include <vector>

#include <catena/chain/frame_ring.hpp>
#include <catena/chain/record.hpp>

namespace catena::chain {
namespace {

constexpr std::uint32_t kRingBytes = 4u << 20;

struct Bench {
  Bench() : words(kRingBytes / 8), writer(kRingBytes, kRingBytes / 2), reader(bytes(), kRingBytes) {}
  std::byte* bytes() { return reinterpret_cast<std::byte*>(words.data()); }

  std::vector<std::uint64_t> words;
  FrameRingWriter writer;
  FrameRingReader reader;
};

// Writer and reader in step, `batch` frames per doorbell; the frame size is
// chosen so the ring's end falls mid-frame and pads happen.
void BM_FrameRingWriteRead(benchmark::State& state) {
  const auto payload_bytes = static_cast<std::uint32_t>(state.range(0));
  const auto batch = static_cast<std::uint32_t>(state.range(1));
  std::vector<std::byte> payload(payload_bytes, std::byte{0x5a});
  const auto fbytes = static_cast<std::uint32_t>(frame_size(payload_bytes));
  Bench b;
  RecordHeader h{};
  h.producer_id = 7;
  auto pad_into_ring = [&](std::uint32_t at, const RecordHeader& pad) {
    std::memcpy(b.bytes() + at, &pad, sizeof pad);
    return true;
  };
  std::uint64_t seq = 0;
  for (auto _ : state) {
    for (std::uint32_t i = 0; i < batch; ++i) {
      std::uint32_t pos = 0;
      if (b.writer.place_st(fbytes, pad_into_ring, &pos) != RingStatus::ok) {
        state.SkipWithError("ring refused a frame");
        return;
      }
      h.sequence = seq++;
      write_frame(b.bytes() + pos, h, payload);
    }
    b.reader.on_immediate_st(b.writer.immediate());
    b.writer.flushed_st(b.writer.written());
    RingFrame f;
    while (b.reader.next_st(&f) == RingRead::frame) {
      if (f.header.payload_crc != payload_checksum(f.payload())) {
        state.SkipWithError("payload checksum");
        return;
      }
      benchmark::DoNotOptimize(f.header.sequence);
      b.reader.consume_st(f);
    }
    if (b.reader.credit_due()) {
      (void)b.writer.credit_st(b.reader.consumed());
      b.reader.credited_st();
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(seq));
  state.SetBytesProcessed(static_cast<std::int64_t>(seq) * payload_bytes);
}
BENCHMARK(BM_FrameRingWriteRead)
    ->ArgNames({"payload", "batch"})
    ->Args({64, 1})
    ->Args({64, 32})
    ->Args({1000, 1})
    ->Args({1000, 32})
    ->Args({16000, 8});

// The ring's bookkeeping alone: placement, doorbell, header check, credit;
// the frames' bytes were written once up front.
void BM_FrameRingBookkeeping(benchmark::State& state) {
  const auto fbytes = static_cast<std::uint32_t>(frame_size(static_cast<std::uint32_t>(state.range(0))));
  Bench b;
  // Every frame position holds a valid frame of this size: lay them out once
  // over a whole lap of the ring, pads included.
  {
    std::vector<std::byte> payload(static_cast<std::size_t>(state.range(0)));
    FrameRingWriter lay(kRingBytes, kRingBytes / 2);
    auto pad = [&](std::uint32_t at, const RecordHeader& p) {
      std::memcpy(b.bytes() + at, &p, sizeof p);
      return true;
    };
    std::uint32_t pos = 0;
    while (lay.place_st(fbytes, pad, &pos) == RingStatus::ok)
      write_frame(b.bytes() + pos, RecordHeader{}, payload);
  }
  auto no_pad = [](std::uint32_t, const RecordHeader&) { return true; };
  std::uint64_t frames = 0;
  for (auto _ : state) {
    std::uint32_t pos = 0;
    if (b.writer.place_st(fbytes, no_pad, &pos) != RingStatus::ok) {
      state.SkipWithError("ring refused a frame");
      return;
    }
    b.reader.on_immediate_st(b.writer.immediate());
    RingFrame f;
    if (b.reader.next_st(&f) != RingRead::frame) {
      state.SkipWithError("reader found no frame");
      return;
    }
    b.reader.consume_st(f);
    (void)b.writer.credit_st(b.reader.consumed());
    ++frames;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(frames));
}
BENCHMARK(BM_FrameRingBookkeeping)->ArgName("payload")->Arg(64)->Arg(1000)->Arg(16000);

}  // namespace
}  // namespace catena::chain

BENCHMARK_MAIN();
