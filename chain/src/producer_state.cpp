#include <algorithm>

#include <catena/chain/producer_state.hpp>

namespace catena::chain {

SeqDecision ProducerState::decide(std::uint64_t producer, std::uint64_t epoch, std::uint64_t seq,
                                  std::uint64_t* offset) const {
  auto it = map_.find(producer);
  if (it == map_.end() || epoch > it->second.epoch) {
    return seq == 0 ? SeqDecision::append : SeqDecision::sequence_gap;
  }
  const Entry& e = it->second;
  if (epoch < e.epoch) return SeqDecision::stale_epoch;
  const auto s = static_cast<std::int64_t>(seq);
  if (s == e.last_seq + 1) return SeqDecision::append;
  if (s > e.last_seq + 1) return SeqDecision::sequence_gap;
  if (e.last_seq - s < static_cast<std::int64_t>(kWindow)) {
    *offset = e.offsets[seq % kWindow];
    return SeqDecision::duplicate;
  }
  return SeqDecision::duplicate_unknown;
}

void ProducerState::record(std::uint64_t producer, std::uint64_t epoch, std::uint64_t seq,
                           std::uint64_t offset, std::uint64_t now_ns) {
  Entry& e = map_[producer];
  e.last_used_ns = std::max(e.last_used_ns, now_ns);
  if (epoch != e.epoch) {
    e.epoch = epoch;
    e.last_seq = -1;
  }
  e.last_seq = static_cast<std::int64_t>(seq);
  e.offsets[seq % kWindow] = offset;
}

void ProducerState::touch(std::uint64_t producer, std::uint64_t now_ns) {
  if (auto it = map_.find(producer); it != map_.end())
    it->second.last_used_ns = std::max(it->second.last_used_ns, now_ns);
}

std::size_t ProducerState::expire(std::uint64_t cutoff_ns) {
  return std::erase_if(map_, [&](const auto& kv) { return kv.second.last_used_ns < cutoff_ns; });
}

void ProducerState::merge(const ProducerState& other) {
  for (const auto& [id, theirs] : other.map_) {
    auto it = map_.find(id);
    if (it == map_.end() || theirs.epoch > it->second.epoch ||
        (theirs.epoch == it->second.epoch && theirs.last_seq > it->second.last_seq)) {
      map_[id] = theirs;
    }
  }
}

std::vector<ProducerSnapshot> ProducerState::snapshot() const {
  std::vector<ProducerSnapshot> out;
  out.reserve(map_.size());
  for (const auto& [id, e] : map_) {
    ProducerSnapshot snap;
    snap.producer_id = id;
    snap.producer_epoch = e.epoch;
    snap.last_seq = e.last_seq;
    if (e.last_seq >= 0) {
      const std::uint64_t last = static_cast<std::uint64_t>(e.last_seq);
      const std::uint64_t first = last + 1 >= kWindow ? last + 1 - kWindow : 0;
      for (std::uint64_t seq = first; seq <= last; ++seq) {
        const std::uint64_t offset = e.offsets[seq % kWindow];
        ProducerRun* run = snap.runs.empty() ? nullptr : &snap.runs.back();
        if (run != nullptr && run->first_seq + run->count == seq &&
            run->first_offset + run->count == offset) {
          ++run->count;
        } else {
          snap.runs.push_back({seq, offset, 1});
        }
      }
    }
    out.push_back(std::move(snap));
  }
  return out;
}

void ProducerState::merge(const std::vector<ProducerSnapshot>& snapshots, std::uint64_t now_ns) {
  for (const ProducerSnapshot& snap : snapshots) {
    auto it = map_.find(snap.producer_id);
    if (it != map_.end() &&
        (snap.producer_epoch < it->second.epoch ||
         (snap.producer_epoch == it->second.epoch && snap.last_seq <= it->second.last_seq))) {
      continue;  // this head already knows as much
    }
    Entry e;
    e.epoch = snap.producer_epoch;
    e.last_seq = snap.last_seq;
    e.last_used_ns = now_ns;
    for (const ProducerRun& run : snap.runs) {
      for (std::uint32_t i = 0; i < run.count; ++i)
        e.offsets[(run.first_seq + i) % kWindow] = run.first_offset + i;
    }
    map_[snap.producer_id] = std::move(e);
  }
}

}  // namespace catena::chain
