// A partition's log (chain/src/partition_log.cpp, producer_state.cpp) at
// both ends of a chain link: a head taking frames a publisher wrote (as
// PublishServer::consume does: stage_frame(), the checks on the copy, the
// producer's sequence, append_staged()) and a replica validating the bytes
// its predecessor forwards (on_remote_data()), while segments roll, expire
// and are reused as time moves on. The publisher may send any frame (its
// own producer or another, any sequence, broken checksums, garbage); the
// predecessor is honest unless the input makes it lie (bytes scribbled into
// the replica's segments, any slot and end announced).
//
// Properties:
// - the head stores a producer's sequences once each, consecutively, and
//   reads back exactly the records it stored, at consecutive offsets;
// - while the predecessor is honest, every forward validates and the
//   replica reads back exactly what the head stored;
// - whatever the predecessor does, a replica serves only frames inside its
//   segments' memory, below what it validated, that pass check_frame(), at
//   consecutive offsets;
// - a log rebuilt from a replica's memory (recover_st, a restarted
//   process) keeps nothing at or past the commit it is given, and serves
//   what it kept under the same rules (exactly the head's records while the
//   predecessor was honest).
#include <cstdint>
#include <cstring>
#include <fuzzer/FuzzedDataProvider.h>
#include <map>
#include <vector>

#include <catena/chain/partition_log.hpp>
#include <catena/chain/producer_state.hpp>
#include <catena/fabric/clock.hpp>

#include "fuzz_check.hpp"

using namespace catena::chain;

namespace {

struct Memory {
  Memory(std::uint32_t slots, std::uint32_t bytes) : mem(slots, std::vector<std::byte>(bytes)) {}
  std::vector<std::span<std::byte>> spans() {
    std::vector<std::span<std::byte>> out;
    for (auto& m : mem) out.emplace_back(m);
    return out;
  }
  bool holds(const std::byte* p, std::size_t n) const {
    for (const auto& m : mem) {
      if (p >= m.data() && p + n <= m.data() + m.size()) return true;
    }
    return false;
  }
  std::vector<std::vector<std::byte>> mem;
};

constexpr std::uint32_t kFirstRecord = sizeof(SegmentHeader);

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  static constexpr std::uint32_t kSegments[] = {4096, 8192, 16384};
  LogConfig cfg;
  cfg.segment_bytes = kSegments[in.ConsumeIntegralInRange(0, 2)];
  cfg.ttl_ns = in.ConsumeIntegralInRange<std::uint64_t>(1, 5) * 1'000'000;
  cfg.grace_ns = 1'000'000;
  cfg.linger_ns = 0;
  const std::uint32_t slots = in.ConsumeIntegralInRange<std::uint32_t>(2, 5);
  catena::ManualClock clock;
  Memory head_mem(slots, cfg.segment_bytes), rep_mem(slots, cfg.segment_bytes);
  PartitionLog head(head_mem.spans(), cfg, clock);
  PartitionLog rep(rep_mem.spans(), cfg, clock);
  ProducerState producers, rep_producers;
  rep.track_producers(&rep_producers);

  std::map<std::uint64_t, std::vector<std::byte>> stored;  // offset -> the frame as stored (offset stamped)
  std::map<std::uint64_t, std::int64_t> last_seq;          // producer -> last sequence stored (this epoch: 1)
  bool honest = true;
  std::vector<std::byte> frame;

  // What PublishServer::consume does with one frame of the publisher's ring.
  auto publish = [&](std::uint64_t producer) {
    AppendStatus st = AppendStatus::ok;
    std::byte* copy = head.stage_frame(frame.data(), static_cast<std::uint32_t>(frame.size()), &st);
    if (st != AppendStatus::ok) {
      FUZZ_CHECK(copy == nullptr);
      return;
    }
    FUZZ_CHECK(head_mem.holds(copy, frame.size()));
    RecordHeader h{};
    if (check_frame(copy, frame.size(), &h) != FrameCheck::ok ||
        (h.flags & ~(kFlagAttributes | kFlagTrace)) != 0 || frame_size(h.length) != frame.size() ||
        h.producer_id != producer || h.producer_epoch != 1) {
      return;  // garbled: the session is dropped, nothing stored
    }
    DecodedRecord d;
    if (decode_record(h, {copy + sizeof h, h.length}, &d) != AttributesCheck::ok) return;
    std::uint64_t offset = 0;
    const SeqDecision decision = producers.decide(h.producer_id, h.producer_epoch, h.sequence, &offset);
    auto known = last_seq.find(producer);
    const std::int64_t last = known == last_seq.end() ? -1 : known->second;
    if (decision != SeqDecision::append) {
      FUZZ_CHECK(decision != SeqDecision::stale_epoch);
      FUZZ_CHECK(static_cast<std::int64_t>(h.sequence) != last + 1);
      if (decision == SeqDecision::duplicate) FUZZ_CHECK(stored.count(offset) == 1);
      return;
    }
    FUZZ_CHECK(static_cast<std::int64_t>(h.sequence) == last + 1);
    const std::uint64_t expected = head.end_offset();
    offset = head.append_staged(static_cast<std::uint32_t>(frame.size()));
    FUZZ_CHECK(offset == expected);
    producers.record(h.producer_id, h.producer_epoch, h.sequence, offset, clock.now_ns());
    last_seq[producer] = static_cast<std::int64_t>(h.sequence);
    std::vector<std::byte> as_stored(copy, copy + frame.size());
    stored[offset] = std::move(as_stored);
  };

  // Reads everything committed from `log`; `exact`: it must be what the head stored.
  auto read_back = [&](const PartitionLog& log, const Memory& mem, bool exact) {
    const std::uint64_t from = log.start_offset();
    Cursor c = log.seek(from);
    if (!c.valid) return;
    std::uint64_t next = from;
    for (int guard = 0; guard < 100'000; ++guard) {
      const ReadResult r = log.read(c);
      if (r.status != ReadStatus::record) break;
      FUZZ_CHECK(r.header.offset == next);
      FUZZ_CHECK(mem.holds(r.frame, r.frame_bytes));
      FUZZ_CHECK(r.frame_bytes == frame_size(r.header.length));
      FUZZ_CHECK(r.header.offset < log.commit_offset());
      ++next;
      FUZZ_CHECK((r.header.flags & kFlagSeal) == 0);  // a seal is never read as a record
      if (!exact) continue;
      RecordHeader again{};
      FUZZ_CHECK(check_frame(r.frame, r.frame_bytes, &again) == FrameCheck::ok);
      auto it = stored.find(r.header.offset);
      if ((r.header.flags & kFlagMarker) != 0) continue;
      FUZZ_CHECK(it != stored.end());
      FUZZ_CHECK(it->second.size() == r.frame_bytes);
      FUZZ_CHECK(std::memcmp(it->second.data(), r.frame, r.frame_bytes) == 0);
    }
  };

  // Forwards what the replica lacks, oldest segment first, as Replica::forward_st.
  auto forward = [&](bool all) {
    for (const std::uint32_t s : head.slots_in_order()) {
      const SlotInfo& h = head.slot_info(s);
      const SlotInfo& r = rep.slot_info(s);
      const bool same_segment = r.state != SlotState::free && r.generation == h.generation;
      const std::uint32_t from = same_segment ? r.valid_end : 0;
      if (same_segment && from >= h.valid_end) continue;
      // A chunk ends at a frame boundary: all of it, or the next frame.
      std::uint32_t end = h.valid_end;
      if (!all && from >= kFirstRecord) {
        RecordHeader fh{};
        if (check_frame(head_mem.mem[s].data() + from, h.valid_end - from, &fh) == FrameCheck::ok) {
          end = from + static_cast<std::uint32_t>(frame_size(fh.length));
        }
      }
      if (end < kFirstRecord) return;
      std::memcpy(rep_mem.mem[s].data() + from, head_mem.mem[s].data() + from, end - from);
      const ValidateStatus v = rep.on_remote_data(s, end);
      if (honest) FUZZ_CHECK(v == ValidateStatus::ok);
      return;  // one chunk per call
    }
  };

  while (in.remaining_bytes() > 0) {
    switch (in.ConsumeIntegralInRange(0, 12)) {
      case 0:
      case 1:
      case 2: {  // a publisher's record, well formed unless the input breaks it
        const std::uint64_t producer = in.ConsumeIntegralInRange<std::uint64_t>(1, 3);
        RecordHeader h{};
        h.producer_id =
            in.ConsumeIntegralInRange(0, 15) == 0 ? in.ConsumeIntegral<std::uint64_t>() : producer;
        h.producer_epoch =
            in.ConsumeIntegralInRange(0, 15) == 0 ? in.ConsumeIntegralInRange<std::uint64_t>(0, 2) : 1;
        auto known = last_seq.find(producer);
        const std::int64_t last = known == last_seq.end() ? -1 : known->second;
        h.sequence = in.ConsumeBool()
                         ? static_cast<std::uint64_t>(last + 1)
                         : static_cast<std::uint64_t>(last + in.ConsumeIntegralInRange<std::int64_t>(-3, 3));
        h.timestamp_ns = clock.now_ns();
        h.flags = in.ConsumeBool() ? kFlagTrace : 0;
        const std::vector<std::uint8_t> payload =
            in.ConsumeBytes<std::uint8_t>(in.ConsumeIntegralInRange<std::size_t>(0, cfg.segment_bytes / 2));
        const std::string key = in.ConsumeBool() ? in.ConsumeRandomLengthString(40) : std::string();
        if (!key.empty()) {
          const Attributes a{std::as_bytes(std::span(key)), {}};
          std::size_t block = 0;
          (void)attributes_size(a, &block);
          frame.assign(frame_size_with(block, payload.size()), std::byte{0});
          write_frame(frame.data(), h, a, std::as_bytes(std::span(payload)));
        } else {
          frame.assign(frame_size(static_cast<std::uint32_t>(payload.size())), std::byte{0});
          write_frame(frame.data(), h, std::as_bytes(std::span(payload)));
        }
        if (in.ConsumeIntegralInRange(0, 7) == 0) {  // broken in the publisher's ring
          const std::size_t at = in.ConsumeIntegralInRange<std::size_t>(0, frame.size() - 1);
          frame[at] ^= std::byte{static_cast<std::uint8_t>(in.ConsumeIntegralInRange(1, 255))};
        }
        publish(producer);
        break;
      }
      case 3: {  // a garbage frame
        const std::size_t n = in.ConsumeIntegralInRange<std::size_t>(7, 64) * 8;
        std::vector<std::uint8_t> junk = in.ConsumeBytes<std::uint8_t>(n);
        junk.resize(n);
        frame.assign(reinterpret_cast<const std::byte*>(junk.data()),
                     reinterpret_cast<const std::byte*>(junk.data()) + n);
        publish(1);
        break;
      }
      case 4:
      case 5:
        forward(in.ConsumeBool());
        break;
      case 6: {  // time passes: segments roll, expire, go
        clock.advance(std::chrono::microseconds(in.ConsumeIntegralInRange(0, 3000)));
        rep.set_commit_offset(rep.end_offset());
        head.set_commit_offset(rep.end_offset());
        (void)head.roll_if_aged();
        (void)head.tick();
        (void)rep.tick();
        break;
      }
      case 7:
        head.seal_open();
        break;
      case 8:
        read_back(head, head_mem, true);
        read_back(rep, rep_mem, honest);
        break;
      case 9: {  // the predecessor scribbles into the replica's memory
        const std::uint32_t s = in.ConsumeIntegralInRange<std::uint32_t>(0, slots - 1);
        const std::uint32_t at = in.ConsumeIntegralInRange<std::uint32_t>(0, cfg.segment_bytes - 1);
        const std::vector<std::uint8_t> junk = in.ConsumeBytes<std::uint8_t>(cfg.segment_bytes - at);
        if (!junk.empty()) {
          std::memcpy(rep_mem.mem[s].data() + at, junk.data(), junk.size());
          honest = false;
        }
        break;
      }
      case 10: {  // the predecessor announces any slot and end
        const std::uint32_t s = in.ConsumeIntegralInRange<std::uint32_t>(0, slots);
        const std::uint32_t end = in.ConsumeIntegral<std::uint32_t>() % (cfg.segment_bytes + 64);
        const std::uint64_t before = rep.end_offset();
        if (rep.on_remote_data(s, end) == ValidateStatus::ok && rep.end_offset() != before) honest = false;
        break;
      }
      case 11: {  // the replica's process ends; a new one rebuilds the log from the memory it kept
        Memory kept = rep_mem;
        PartitionLog again(kept.spans(), cfg, clock);
        ProducerState again_producers;
        again.track_producers(&again_producers);
        const std::uint64_t commit =
            in.ConsumeBool() ? rep.commit_offset() : in.ConsumeIntegral<std::uint64_t>();
        const PartitionLog::Recovered r = again.recover_st(commit);
        FUZZ_CHECK(r.end <= commit || r.end == 0);
        FUZZ_CHECK(r.start <= r.end);
        FUZZ_CHECK(again.end_offset() == r.end || r.end == 0);
        read_back(again, kept, honest && commit == rep.commit_offset());
        break;
      }
      default:
        rep.set_commit_offset(rep.end_offset());
        head.set_commit_offset(rep.end_offset());
        break;
    }
    FUZZ_CHECK(rep.end_offset() <= head.end_offset() || !honest);
  }
  rep.set_commit_offset(rep.end_offset());
  head.set_commit_offset(rep.end_offset());
  read_back(head, head_mem, true);
  read_back(rep, rep_mem, honest);
  return 0;
}
