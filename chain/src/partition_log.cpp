#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>

#include <catena/chain/partition_log.hpp>
#include <catena/chain/producer_state.hpp>

namespace catena::chain {
namespace {

std::uint32_t segment_header_crc(const SegmentHeader& h) {
  return XXH32(&h, offsetof(SegmentHeader, header_crc), 0x53454748u);
}

constexpr std::uint32_t kFirstRecord = sizeof(SegmentHeader);

}  // namespace

PartitionLog::PartitionLog(std::vector<std::span<std::byte>> slots, LogConfig cfg, const Clock& clock)
    : slots_(std::move(slots)), info_(slots_.size()), foreign_(slots_.size(), 1), cfg_(cfg), clock_(clock) {
  if (slots_.size() < 2) throw std::invalid_argument("a partition needs at least 2 segment slots");
  for (auto& s : slots_) {
    if (!s.empty() && s.size() != cfg_.segment_bytes)
      throw std::invalid_argument("segment slot size mismatch");
  }
  if (cfg_.segment_bytes < limits::kMinSegmentBytes || cfg_.segment_bytes % kRecordAlign != 0) {
    throw std::invalid_argument("segment_bytes must be >= " + std::to_string(limits::kMinSegmentBytes) +
                                " and a multiple of 8");
  }
  if (cfg_.min_segment_bytes != 0) {
    cfg_.min_segment_bytes = std::clamp(cfg_.min_segment_bytes, limits::kMinSegmentBytes, cfg_.segment_bytes);
    cfg_.min_segment_bytes -= cfg_.min_segment_bytes % kRecordAlign;
  }
  next_bytes_ = cfg_.min_segment_bytes != 0 ? cfg_.min_segment_bytes : cfg_.segment_bytes;
}

std::uint32_t PartitionLog::room_st(std::uint32_t s) const {
  const std::uint32_t size = info_[s].bytes;
  std::uint32_t used = info_[s].valid_end + static_cast<std::uint32_t>(sizeof(RecordHeader));
  return used >= size ? 0 : size - used;
}

std::uint32_t PartitionLog::next_size_st(std::uint32_t need) const {
  if (memory_ == nullptr || cfg_.min_segment_bytes == 0) return cfg_.segment_bytes;
  // The frame and a seal after the segment header.
  const std::uint64_t fit = std::uint64_t{need} + kFirstRecord + sizeof(RecordHeader);
  std::uint64_t want = next_bytes_;
  while (want < fit && want < cfg_.segment_bytes) want *= 2;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(want, cfg_.segment_bytes));
}

void PartitionLog::seal_full_st(std::uint32_t s) {
  seal_st(s);
  size_next_st(s, /*full=*/true);
}

void PartitionLog::size_next_st(std::uint32_t s, bool full) {
  if (cfg_.min_segment_bytes == 0) return;
  const SlotInfo& in = info_[s];
  const double open_ns = static_cast<double>(std::max<std::uint64_t>(in.sealed_ns - in.opened_ns, 1000));
  const double per_ttl = static_cast<double>(in.valid_end) * static_cast<double>(cfg_.ttl_ns) / open_ns;
  double want = 2 * std::min(per_ttl, static_cast<double>(cfg_.segment_bytes));
  if (full) want = std::max(want, 2.0 * static_cast<double>(in.bytes));
  std::uint64_t size = cfg_.min_segment_bytes;
  while (static_cast<double>(size) < want && size < cfg_.segment_bytes) size *= 2;
  // Rolled by age, a segment within [3/4, 2] of that size stays the size:
  // only a rate that moved by more than about 2x resizes. Without the band
  // a rate near a boundary flipped sizes every roll, and every flip gave a
  // warm slot back and faulted fresh pages into another (where the segment
  // would have been reused in place).
  if (!full && in.bytes >= cfg_.min_segment_bytes && in.bytes <= cfg_.segment_bytes &&
      static_cast<double>(in.bytes) >= 0.75 * want && static_cast<double>(in.bytes) <= 2 * want) {
    size = in.bytes;
  }
  next_bytes_ = static_cast<std::uint32_t>(std::min<std::uint64_t>(size, cfg_.segment_bytes));
}

bool PartitionLog::ensure_memory_st(std::uint32_t s, std::uint32_t bytes) {
  if (bytes == 0) bytes = cfg_.segment_bytes;
  if (!slots_[s].empty() && (slots_[s].size() == bytes || (memory_ == nullptr && slots_[s].size() >= bytes)))
    return true;
  if (memory_ == nullptr || open_ == static_cast<int>(s)) return false;
  if (!slots_[s].empty()) {
    // Memory of another size: what the slot held goes with it (a newer
    // segment is about to be written there).
    if (!memory_->release(s, ~0ull)) return false;
    slots_[s] = {};
    foreign_[s] = 1;
    info_[s] = SlotInfo{};
  }
  bool zeroed = false;
  const std::span<std::byte> m = memory_->acquire(s, bytes, &zeroed);
  if (m.empty()) return false;
  if (m.size() != bytes) throw std::invalid_argument("segment slot size mismatch");
  slots_[s] = m;
  foreign_[s] = zeroed ? 0 : 1;
  return true;
}

int PartitionLog::pick_slot_st(std::uint32_t bytes) const {
  const std::uint64_t now = clock_.now_ns();
  // Reuse only once the segment expired, its grace period passed, and
  // every record in it is committed: a record the tail does not hold yet
  // (commits stalled by a dead successor) may still be acknowledged, and
  // this slot may be its only copy.
  auto may_go = [&](const SlotInfo& in) {
    if (in.state == SlotState::free) return true;
    return in.state == SlotState::sealed && now >= in.sealed_ns + cfg_.ttl_ns + cfg_.grace_ns &&
           in.next_offset <= commit_offset_;
  };
  // First the oldest slot whose memory fits: reused in place, with no
  // allocation, registration or page faults, so a partition cycles through
  // as many slots as its rate fills in a ttl and the rest give their memory
  // back. Then the oldest whose memory is larger, up to twice the size (the
  // segment takes the slot's size: open_next_st). Then a slot without
  // memory (in ring order from the last one opened), then one whose memory
  // is of another size.
  int warm = -1, larger = -1, empty = -1, other = -1;
  auto older = [&](int pick, std::uint32_t s) {
    return pick < 0 || info_[s].generation < info_[static_cast<std::uint32_t>(pick)].generation;
  };
  for (std::uint32_t i = 0; i < slot_count(); ++i) {
    const std::uint32_t s = (next_slot_ + i) % slot_count();
    const SlotInfo& in = info_[s];
    if (!may_go(in)) continue;
    if (slots_[s].empty()) {
      if (empty < 0) empty = static_cast<int>(s);
    } else if (slots_[s].size() == bytes || memory_ == nullptr) {
      if (older(warm, s)) warm = static_cast<int>(s);
    } else if (warm_and_larger_st(s, bytes)) {
      if (older(larger, s)) larger = static_cast<int>(s);
    } else if (other < 0) {
      other = static_cast<int>(s);
    }
  }
  return warm >= 0 ? warm : larger >= 0 ? larger : empty >= 0 ? empty : other;
}

AppendStatus PartitionLog::open_next_st(std::uint64_t epoch, std::uint32_t need) {
  std::uint32_t bytes = next_size_st(need);
  const int pick = pick_slot_st(bytes);
  if (pick < 0) return AppendStatus::log_full;
  const auto s = static_cast<std::uint32_t>(pick);
  // A warm slot up to twice the size: the segment is the slot's size.
  if (warm_and_larger_st(s, bytes)) bytes = static_cast<std::uint32_t>(slots_[s].size());
  SlotInfo& in = info_[s];
  // Memory of another size than this segment's goes (the segment in it
  // expired past its grace and is committed).
  if (!ensure_memory_st(s, bytes)) return AppendStatus::no_memory;
  // Memory whose past this log does not know is cleared; what the log
  // wrote there itself is not (see Zeroing in partition_log.hpp).
  if (foreign_[s] != 0) std::memset(slots_[s].data(), 0, slots_[s].size());
  foreign_[s] = 0;
  SegmentHeader h{};
  h.magic = kSegmentMagic;
  h.base_offset = end_offset_;
  h.generation = ++generation_;
  h.epoch = epoch;
  h.slot = s;
  h.bytes = static_cast<std::uint32_t>(slots_[s].size());
  h.header_crc = segment_header_crc(h);
  std::memcpy(slots_[s].data(), &h, sizeof h);
  in = SlotInfo{};
  in.state = SlotState::open;
  in.generation = h.generation;
  in.base_offset = end_offset_;
  in.next_offset = end_offset_;
  in.valid_end = kFirstRecord;
  in.opened_ns = clock_.now_ns();
  note_open_st(in.opened_ns);
  in.bytes = h.bytes;
  open_ = static_cast<int>(s);
  next_slot_ = (s + 1) % slot_count();
  return AppendStatus::ok;
}

void PartitionLog::seal_st(std::uint32_t s) {
  SlotInfo& in = info_[s];
  RecordHeader seal{};
  seal.flags = kFlagSeal;
  seal.offset = in.next_offset;
  in.valid_end += static_cast<std::uint32_t>(write_frame(slots_[s].data() + in.valid_end, seal, {}));
  in.state = SlotState::sealed;
  in.sealed_ns = clock_.now_ns();
  if (open_ == static_cast<int>(s)) open_ = -1;
}

AppendStatus PartitionLog::append(const RecordHeader& h, std::span<const std::byte> payload,
                                  std::uint64_t* offset) {
  const std::size_t need = frame_size(static_cast<std::uint32_t>(payload.size()));
  if (payload.size() > kMaxRecordPayload || need + kFirstRecord + sizeof(RecordHeader) > cfg_.segment_bytes) {
    return AppendStatus::too_large;
  }
  if (open_ >= 0 && room_st(static_cast<std::uint32_t>(open_)) < need)
    seal_full_st(static_cast<std::uint32_t>(open_));
  if (open_ < 0) {
    if (const AppendStatus o = open_next_st(epoch_, static_cast<std::uint32_t>(need)); o != AppendStatus::ok)
      return o;
  }
  RecordHeader r = h;
  r.flags = 0;
  return append_frame_st(r, payload, offset);
}

AppendStatus PartitionLog::append_marker(const MarkerSpec& m, std::uint64_t* offset) {
  RecordHeader h{};
  h.flags = kFlagMarker;
  h.sequence = m.generation;
  h.timestamp_ns = wall_clock_ns();
  std::array<std::byte, kMarkerPayload> payload{};
  encode_marker(m, payload);
  if (open_ >= 0 && room_st(static_cast<std::uint32_t>(open_)) < frame_size(kMarkerPayload))
    seal_full_st(static_cast<std::uint32_t>(open_));
  if (open_ < 0) {
    if (const AppendStatus o = open_next_st(epoch_, static_cast<std::uint32_t>(frame_size(kMarkerPayload)));
        o != AppendStatus::ok)
      return o;
  }
  const AppendStatus s = append_frame_st(h, payload, offset);
  if (s == AppendStatus::ok) marker_ = Marker{m.generation, *offset, m.to_partitions};
  return s;
}

AppendStatus PartitionLog::append_frame_st(const RecordHeader& h, std::span<const std::byte> payload,
                                           std::uint64_t* offset) {
  SlotInfo& in = info_[static_cast<std::uint32_t>(open_)];
  RecordHeader r = h;
  r.offset = end_offset_;
  in.valid_end += static_cast<std::uint32_t>(
      write_frame(slots_[static_cast<std::uint32_t>(open_)].data() + in.valid_end, r, payload));
  *offset = end_offset_;
  in.next_offset = ++end_offset_;
  return AppendStatus::ok;
}

std::byte* PartitionLog::stage_frame(const std::byte* frame, std::uint32_t frame_bytes,
                                     AppendStatus* status) {
  if (frame_bytes + kFirstRecord + sizeof(RecordHeader) > cfg_.segment_bytes) {
    *status = AppendStatus::too_large;
    return nullptr;
  }
  if (open_ >= 0 && room_st(static_cast<std::uint32_t>(open_)) < frame_bytes) {
    seal_full_st(static_cast<std::uint32_t>(open_));
  }
  if (open_ < 0) {
    if (const AppendStatus o = open_next_st(epoch_, frame_bytes); o != AppendStatus::ok) {
      *status = o;
      return nullptr;
    }
  }
  const SlotInfo& in = info_[static_cast<std::uint32_t>(open_)];
  std::byte* at = slots_[static_cast<std::uint32_t>(open_)].data() + in.valid_end;
  std::memcpy(at, frame, frame_bytes);
  *status = AppendStatus::ok;
  return at;
}

void PartitionLog::trace_st(const RecordHeader& h) {
  // The publisher's clock: a stamp from the future (another host's clock)
  // counts as 0.
  const std::uint64_t now = wall_clock_ns();
  stages_->record(stage_position_, now > h.timestamp_ns ? now - h.timestamp_ns : 0);
}

std::uint64_t PartitionLog::append_staged(std::uint32_t frame_bytes) {
  SlotInfo& in = info_[static_cast<std::uint32_t>(open_)];
  std::byte* frame = slots_[static_cast<std::uint32_t>(open_)].data() + in.valid_end;
  restamp_offset(frame, end_offset_);
  if (stages_ != nullptr) {
    RecordHeader h;
    std::memcpy(&h, frame, sizeof h);
    if ((h.flags & kFlagTrace) != 0) trace_st(h);
  }
  in.valid_end += frame_bytes;
  in.next_offset = end_offset_ + 1;
  return end_offset_++;
}

ValidateStatus PartitionLog::on_remote_data(std::uint32_t slot, std::uint32_t end) {
  if (slot >= slot_count() || end % kRecordAlign != 0 || end < kFirstRecord) return ValidateStatus::corrupt;
  // The predecessor writes only into slots it was granted, which have memory
  // of the segment's size.
  if (slots_[slot].empty() || end > slots_[slot].size()) return ValidateStatus::corrupt;
  SlotInfo& in = info_[slot];
  SegmentHeader sh;
  std::memcpy(&sh, slots_[slot].data(), sizeof sh);
  if (sh.magic != kSegmentMagic || sh.header_crc != segment_header_crc(sh) || sh.slot != slot ||
      sh.bytes > slots_[slot].size() || (sh.bytes != 0 && end > sh.bytes)) {
    return ValidateStatus::corrupt;
  }
  if (sh.generation != in.generation || in.state == SlotState::free) {
    // The predecessor sealed the open segment and moved on, but the seal
    // never came: the link broke in between and, by the time it was back,
    // the predecessor had reused that segment's slot (it was committed and
    // past its retention), so nothing could send it any more, and every
    // newer segment was refused as out of order. A newer segment that
    // starts exactly where the open one's records end proves none is
    // missing: the seal is written here as the predecessor wrote it (found
    // by the partition log's fuzz target, tests/fuzz/).
    if (open_ >= 0 && open_ != static_cast<int>(slot)) {
      const auto o = static_cast<std::uint32_t>(open_);
      const SlotInfo& open = info_[o];
      if (sh.generation > open.generation && sh.base_offset == end_offset_ &&
          open.next_offset == end_offset_ && open.valid_end + sizeof(RecordHeader) <= open.bytes) {
        seal_st(o);
      }
    }
    const bool continues = sh.generation >= in.generation &&
                           (end_offset_ == 0 || sh.base_offset == end_offset_ || generation_ == 0) &&
                           (open_ < 0 || open_ == static_cast<int>(slot));
    // What a restart kept and the chain does not continue is dropped.
    if (!continues && recovered_) reset_st();
    // A new segment in this slot. It must continue the partition.
    if (sh.generation < in.generation) return ValidateStatus::out_of_order;
    if (end_offset_ != 0 && sh.base_offset != end_offset_ && generation_ != 0)
      return ValidateStatus::out_of_order;
    if (open_ >= 0 && open_ != static_cast<int>(slot)) return ValidateStatus::out_of_order;
    in = SlotInfo{};
    in.state = SlotState::open;
    in.generation = sh.generation;
    in.base_offset = sh.base_offset;
    in.next_offset = sh.base_offset;
    in.valid_end = kFirstRecord;
    in.opened_ns = clock_.now_ns();
    note_open_st(in.opened_ns);
    in.bytes = sh.bytes != 0 ? sh.bytes : static_cast<std::uint32_t>(slots_[slot].size());
    generation_ = std::max(generation_, sh.generation);
    open_ = static_cast<int>(slot);
    next_slot_ = (slot + 1) % slot_count();
    if (end_offset_ < sh.base_offset) end_offset_ = sh.base_offset;
    epoch_ = std::max(epoch_, sh.epoch);
  }
  if (end <= in.valid_end) return ValidateStatus::ok;  // already seen (a resend)
  if (in.state != SlotState::open) return ValidateStatus::corrupt;
  return scan_frames_st(slot, end, ~0ull, /*seal_at_end=*/true);
}

ValidateStatus PartitionLog::scan_frames_st(std::uint32_t slot, std::uint32_t end, std::uint64_t stop_offset,
                                            bool seal_at_end) {
  SlotInfo& in = info_[slot];
  const std::byte* base = slots_[slot].data();
  const std::uint64_t now = producers_ != nullptr ? clock_.now_ns() : 0;
  while (in.valid_end < end) {
    RecordHeader h;
    if (check_frame(base + in.valid_end, end - in.valid_end, &h) != FrameCheck::ok)
      return ValidateStatus::corrupt;
    if (h.flags & kFlagPad) return ValidateStatus::corrupt;
    if (h.offset != in.next_offset) return ValidateStatus::out_of_order;
    if (h.flags & kFlagSeal) {
      // Nothing may follow a seal in what the predecessor wrote.
      if (seal_at_end && in.valid_end + frame_size(h.length) != end) return ValidateStatus::corrupt;
      in.valid_end += static_cast<std::uint32_t>(frame_size(h.length));
      in.state = SlotState::sealed;
      in.sealed_ns = clock_.now_ns();
      open_ = -1;
      break;
    }
    if (h.offset >= stop_offset) break;
    in.valid_end += static_cast<std::uint32_t>(frame_size(h.length));
    in.next_offset = h.offset + 1;
    end_offset_ = in.next_offset;
    if (h.flags & kFlagMarker) {
      MarkerSpec m;
      if (!decode_marker(h, {base + in.valid_end - frame_size(h.length) + sizeof h, h.length}, &m))
        return ValidateStatus::corrupt;
      if (m.generation > marker_.generation) marker_ = Marker{m.generation, h.offset, m.to_partitions};
    } else if (producers_ != nullptr) {
      producers_->record(h.producer_id, h.producer_epoch, h.sequence, h.offset, now);
    }
    if (stages_ != nullptr && (h.flags & kFlagTrace) != 0) trace_st(h);
  }
  return ValidateStatus::ok;
}

void PartitionLog::reset_st() {
  std::fill(info_.begin(), info_.end(), SlotInfo{});
  std::fill(foreign_.begin(), foreign_.end(), 1);
  open_ = -1;
  next_slot_ = 0;
  generation_ = 0;
  end_offset_ = 0;
  commit_offset_ = 0;
  marker_ = Marker{};
  recovered_ = false;
  if (producers_ != nullptr) producers_->clear();
}

PartitionLog::Recovered PartitionLog::recover_st(std::uint64_t commit_offset) {
  // Every slot whose header is intact, oldest generation first.
  struct Found {
    std::uint32_t slot;
    SegmentHeader sh;
  };
  std::vector<Found> found;
  for (std::uint32_t s = 0; s < slot_count(); ++s) {
    if (slots_[s].empty()) continue;
    SegmentHeader sh;
    std::memcpy(&sh, slots_[s].data(), sizeof sh);
    if (sh.magic == kSegmentMagic && sh.header_crc == segment_header_crc(sh) && sh.slot == s &&
        sh.bytes <= slots_[s].size() && sh.generation != 0 && sh.base_offset < commit_offset)
      found.push_back({s, sh});
  }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.sh.generation < b.sh.generation; });
  std::fill(foreign_.begin(), foreign_.end(), 1);
  // Scans one segment up to the first frame that does not check (the rest
  // of the slot is an older segment's bytes, or zeros), never past the
  // commit offset.
  auto scan = [&](const Found& f) {
    SlotInfo& in = info_[f.slot];
    in = SlotInfo{};
    in.state = SlotState::open;
    in.generation = f.sh.generation;
    in.base_offset = f.sh.base_offset;
    in.next_offset = f.sh.base_offset;
    in.valid_end = kFirstRecord;
    in.opened_ns = clock_.now_ns();
    in.bytes = f.sh.bytes != 0 ? f.sh.bytes : static_cast<std::uint32_t>(slots_[f.slot].size());
    open_ = static_cast<int>(f.slot);
    (void)scan_frames_st(f.slot, in.bytes, commit_offset, /*seal_at_end=*/false);
  };
  // First pass, tracking nothing: the newest run of segments that continue
  // one another (each starts where the one before ended, sealed).
  ProducerState* const producers = producers_;
  producers_ = nullptr;
  std::vector<Found> run;
  for (const Found& f : found) {
    const bool continues = !run.empty() && info_[run.back().slot].state == SlotState::sealed &&
                           info_[run.back().slot].next_offset == f.sh.base_offset;
    if (!continues) run.clear();
    scan(f);
    run.push_back(f);
    if (info_[f.slot].state != SlotState::sealed) break;  // nothing committed follows an open segment
  }
  // Second pass over the run only: markers and producers of what is kept.
  producers_ = producers;
  std::fill(info_.begin(), info_.end(), SlotInfo{});
  marker_ = Marker{};
  Recovered out;
  generation_ = 0;
  end_offset_ = 0;
  open_ = -1;
  for (const Found& f : run) {
    scan(f);
    const SlotInfo& in = info_[f.slot];
    if (in.state == SlotState::sealed) open_ = -1;
    generation_ = std::max(generation_, in.generation);
    epoch_ = std::max(epoch_, f.sh.epoch);
    end_offset_ = in.next_offset;
    next_slot_ = (f.slot + 1) % slot_count();
    out.records += in.next_offset - in.base_offset;
    out.bytes += in.valid_end;
    ++out.segments;
  }
  if (!run.empty()) out.start = info_[run.front().slot].base_offset;
  out.end = end_offset_;
  commit_offset_ = end_offset_;
  recovered_ = !run.empty();
  return out;
}

bool PartitionLog::tick() {
  const std::uint64_t now = clock_.now_ns();
  bool changed = false;
  for (auto& in : info_) {
    if (in.state == SlotState::sealed && !in.expired && now >= in.sealed_ns + cfg_.ttl_ns) {
      in.expired = true;
      changed = true;
    }
  }
  if (memory_ != nullptr) changed = release_expired_st(now) || changed;
  return changed;
}

void PartitionLog::note_open_st(std::uint64_t now) {
  if (last_open_ns_ != 0) open_interval_ns_ = now - last_open_ns_;
  last_open_ns_ = now;
}

bool PartitionLog::release_expired_st(std::uint64_t now) {
  bool released = false;
  // A segment that may go keeps its memory while the partition would reuse
  // it (the next segment opens about an interval from now): past the
  // SlotMemory's linger and twice that interval, up to 10 s (a partition
  // that opens segments more rarely gains little from keeping them). None
  // while memory is short.
  constexpr std::uint64_t kReuseLingerCapNs = 10'000'000'000;
  std::uint64_t linger = memory_->linger_ns(now);
  if (linger != 0) linger = std::max(linger, std::min(2 * open_interval_ns_, kReuseLingerCapNs));
  for (std::uint32_t s = 0; s < slot_count(); ++s) {
    const SlotInfo& in = info_[s];
    // As open_next_st() reuses a slot (expired, past its grace, committed),
    // and lingering unless memory is short.
    if (slots_[s].empty() || in.state != SlotState::sealed || !in.expired ||
        now < in.sealed_ns + cfg_.ttl_ns + cfg_.grace_ns + linger || in.next_offset > commit_offset_) {
      continue;
    }
    if (!memory_->release(s, in.generation)) continue;
    slots_[s] = {};
    foreign_[s] = 1;
    released = true;
  }
  return released;
}

bool PartitionLog::roll_if_aged() {
  if (open_ < 0) return false;
  const SlotInfo& in = info_[static_cast<std::uint32_t>(open_)];
  if (in.next_offset == in.base_offset || clock_.now_ns() < in.opened_ns + cfg_.ttl_ns) return false;
  const auto s = static_cast<std::uint32_t>(open_);
  seal_st(s);
  size_next_st(s, /*full=*/false);  // rolled by age: about twice what it held
  return true;
}

void PartitionLog::seal_open() {
  if (open_ >= 0) seal_st(static_cast<std::uint32_t>(open_));
}

void PartitionLog::set_start(std::uint64_t base_offset) noexcept {
  end_offset_ = base_offset;
  commit_offset_ = base_offset;
}

std::uint64_t PartitionLog::start_offset() const noexcept {
  std::uint64_t start = end_offset_;
  for (std::uint32_t s = 0; s < slot_count(); ++s) {
    const SlotInfo& in = info_[s];
    if (in.state != SlotState::free && !in.expired && !slots_[s].empty())
      start = std::min(start, in.base_offset);
  }
  return start;
}

std::vector<std::uint32_t> PartitionLog::slots_in_order() const {
  std::vector<std::uint32_t> order;
  for (std::uint32_t i = 0; i < slot_count(); ++i) {
    if (info_[i].state != SlotState::free) order.push_back(i);
  }
  std::sort(order.begin(), order.end(),
            [&](std::uint32_t a, std::uint32_t b) { return info_[a].generation < info_[b].generation; });
  return order;
}

std::uint64_t PartitionLog::bytes_used() const noexcept {
  std::uint64_t n = 0;
  for (std::uint32_t s = 0; s < slot_count(); ++s) {
    if (info_[s].state != SlotState::free && !slots_[s].empty()) n += info_[s].valid_end;
  }
  return n;
}

std::uint32_t PartitionLog::segments_held() const noexcept {
  std::uint32_t n = 0;
  for (std::uint32_t s = 0; s < slot_count(); ++s)
    n += info_[s].state != SlotState::free && !slots_[s].empty();
  return n;
}

std::uint64_t PartitionLog::oldest_free_in_ns_st() const {
  const std::uint64_t now = clock_.now_ns();
  std::uint64_t soonest = ~0ull;
  for (std::uint32_t s = 0; s < slot_count(); ++s) {
    const SlotInfo& in = info_[s];
    if (in.state != SlotState::sealed) continue;
    const std::uint64_t at = in.sealed_ns + cfg_.ttl_ns + cfg_.grace_ns;  // as pick_slot_st's may_go
    soonest = std::min(soonest, at > now ? at - now : 0);
  }
  return soonest == ~0ull ? 0 : soonest;
}

Cursor PartitionLog::seek(std::uint64_t offset) const {
  Cursor c;
  for (std::uint32_t s = 0; s < slot_count(); ++s) {
    const SlotInfo& in = info_[s];
    if (in.state == SlotState::free || in.expired || slots_[s].empty()) continue;
    const bool inside =
        offset >= in.base_offset &&
        (offset < in.next_offset || (offset == in.next_offset && in.state == SlotState::open));
    if (!inside) continue;
    std::uint32_t pos = kFirstRecord;
    std::uint64_t at = in.base_offset;
    const std::byte* base = slots_[s].data();
    while (at < offset && pos < in.valid_end) {
      RecordHeader h;
      std::memcpy(&h, base + pos, sizeof h);
      pos += static_cast<std::uint32_t>(frame_size(h.length));
      ++at;
    }
    c.slot = s;
    c.generation = in.generation;
    c.position = pos;
    c.next_offset = offset;
    c.valid = true;
    return c;
  }
  return c;
}

ReadResult PartitionLog::read(Cursor& c) const {
  ReadResult r;
  if (!c.valid) return r;
  for (int hops = 0; hops < 2; ++hops) {
    const SlotInfo& in = info_[c.slot];
    if (in.generation != c.generation || in.state == SlotState::free || slots_[c.slot].empty()) {
      r.status = ReadStatus::expired;  // reused, or its memory given back
      return r;
    }
    if (c.position >= in.valid_end) return r;  // nothing new yet
    RecordHeader h;
    const std::byte* frame = slots_[c.slot].data() + c.position;
    std::memcpy(&h, frame, sizeof h);
    if (h.flags & kFlagSeal) {
      // Continue in the next segment, which must start where this one ended
      // (in any slot: see the top of partition_log.hpp).
      int found = -1;
      for (std::uint32_t s = 0; s < slot_count(); ++s) {
        const SlotInfo& nx = info_[s];
        if (nx.state != SlotState::free && nx.generation > in.generation && nx.base_offset == c.next_offset &&
            (found < 0 || nx.generation < info_[static_cast<std::uint32_t>(found)].generation)) {
          found = static_cast<int>(s);
        }
      }
      if (found < 0) return r;  // not opened yet
      const auto next = static_cast<std::uint32_t>(found);
      const SlotInfo& nx = info_[next];
      if (slots_[next].empty()) {
        r.status = ReadStatus::expired;
        return r;
      }
      c.slot = next;
      c.generation = nx.generation;
      c.position = kFirstRecord;
      continue;
    }
    if (h.offset >= commit_offset_) return r;
    // The header was validated when it arrived, but a predecessor can still
    // write there: serve nothing that does not lie within what was
    // validated, in order (found by the partition log's fuzz target,
    // tests/fuzz/). Nothing is readable past it.
    if (h.length > kMaxRecordPayload || frame_size(h.length) > in.valid_end - c.position ||
        h.offset != c.next_offset) {
      return r;
    }
    r.status = ReadStatus::record;
    r.frame = frame;
    r.frame_bytes = static_cast<std::uint32_t>(frame_size(h.length));
    r.header = h;
    c.position += r.frame_bytes;
    c.next_offset = h.offset + 1;
    return r;
  }
  return r;
}

}  // namespace catena::chain
