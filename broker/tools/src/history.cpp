#include <xxhash.h>

#include <algorithm>
#include <set>

#include <catena/broker/history.hpp>

namespace catena {

namespace {

void note(HistoryReport& r, const std::string& what) {
  if (r.examples.size() < 10) r.examples.push_back(what);
}

}  // namespace

std::string HistoryReport::summary() const {
  std::string s = "published " + std::to_string(published) + ", acknowledged " +
                  std::to_string(acknowledged) + ", failed " + std::to_string(failed) + ", delivered " +
                  std::to_string(delivered) + "; lost " + std::to_string(lost) + ", duplicated " +
                  std::to_string(duplicated) + ", out of order " + std::to_string(out_of_order) +
                  ", corrupted " + std::to_string(corrupted) + ", phantom " + std::to_string(phantom) +
                  ", offset conflicts " + std::to_string(offset_conflicts);
  if (declared_lost > 0) s += ", declared lost " + std::to_string(declared_lost);
  for (const auto& e : examples) s += "\n  " + e;
  return s;
}

std::uint64_t HistoryChecker::hash(std::span<const std::byte> payload) {
  return XXH3_64bits(payload.data(), payload.size());
}

void HistoryChecker::published(std::uint64_t id, std::span<const std::byte> payload) {
  MutexLock lk(mu_);
  records_[id].hash = hash(payload);
}

void HistoryChecker::acknowledged(std::uint64_t id, std::uint32_t partition, std::uint64_t offset) {
  MutexLock lk(mu_);
  Record& r = records_[id];
  r.acked = true;
  r.partition = partition;
  r.offset = offset;
}

void HistoryChecker::failed(std::uint64_t id) {
  MutexLock lk(mu_);
  records_[id].failed = true;
}

void HistoryChecker::delivered(int subscriber, std::uint32_t partition, std::uint64_t offset,
                               std::uint64_t id, std::span<const std::byte> payload) {
  MutexLock lk(mu_);
  deliveries_.at(static_cast<std::size_t>(subscriber)).push_back({partition, offset, id, hash(payload)});
}

void HistoryChecker::declare_lost(int subscriber, std::uint32_t partition, std::uint64_t from,
                                  std::uint64_t to) {
  MutexLock lk(mu_);
  lost_ranges_.push_back({subscriber, partition, from, to});
}

HistoryReport HistoryChecker::check() const {
  MutexLock lk(mu_);
  HistoryReport rep;
  rep.published = records_.size();
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::uint64_t> owner;  // (partition, offset) -> id
  for (const auto& [id, r] : records_) {
    if (r.acked) {
      ++rep.acknowledged;
      auto [it, fresh] = owner.emplace(std::make_pair(r.partition, r.offset), id);
      if (!fresh && it->second != id) {
        ++rep.offset_conflicts;
        note(rep, "offset " + std::to_string(r.partition) + ":" + std::to_string(r.offset) +
                      " acknowledged for " + std::to_string(it->second) + " and " + std::to_string(id));
      }
    } else if (r.failed) {
      ++rep.failed;
    }
  }
  for (std::size_t s = 0; s < deliveries_.size(); ++s) {
    std::map<std::uint32_t, std::uint64_t> last_offset;
    std::set<std::uint64_t> seen_ids;
    for (const Delivery& d : deliveries_[s]) {
      ++rep.delivered;
      const std::string where = "subscriber " + std::to_string(s) + " offset " + std::to_string(d.partition) +
                                ":" + std::to_string(d.offset);
      auto lo = last_offset.find(d.partition);
      if (lo != last_offset.end() && d.offset <= lo->second) {
        ++rep.out_of_order;
        note(rep, where + " after " + std::to_string(lo->second));
      }
      last_offset[d.partition] = d.offset;
      if (!seen_ids.insert(d.id).second) {
        ++rep.duplicated;
        note(rep, where + ": record " + std::to_string(d.id) + " delivered again");
      }
      auto rec = records_.find(d.id);
      if (rec == records_.end()) {
        ++rep.phantom;
        note(rep, where + ": record " + std::to_string(d.id) + " was never published");
        continue;
      }
      if (rec->second.hash != d.hash) {
        ++rep.corrupted;
        note(rep, where + ": payload of record " + std::to_string(d.id) + " differs");
      }
      auto [it, fresh] = owner.emplace(std::make_pair(d.partition, d.offset), d.id);
      if ((!fresh && it->second != d.id) ||
          (rec->second.acked && (rec->second.partition != d.partition || rec->second.offset != d.offset))) {
        ++rep.offset_conflicts;
        note(rep,
             where + ": holds record " + std::to_string(d.id) + ", expected " + std::to_string(it->second));
      }
    }
    for (const auto& [id, r] : records_) {
      if (r.acked && !seen_ids.count(id)) {
        // (r captured by name: Clang before 16 cannot capture a structured binding.)
        const bool declared =
            std::any_of(lost_ranges_.begin(), lost_ranges_.end(), [&, &r = r](const LostRange& l) {
              return l.subscriber == static_cast<int>(s) && l.partition == r.partition &&
                     r.offset >= l.from && r.offset < l.to;
            });
        if (declared) {
          ++rep.declared_lost;
          continue;
        }
        ++rep.lost;
        note(rep, "subscriber " + std::to_string(s) + " never got acknowledged record " + std::to_string(id) +
                      " at " + std::to_string(r.partition) + ":" + std::to_string(r.offset));
      }
    }
  }
  return rep;
}

}  // namespace catena
