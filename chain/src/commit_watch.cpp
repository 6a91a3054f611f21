// The commit watch's two halves (commit_watch.hpp has the protocol).
#include <algorithm>

#include <catena/chain/commit_watch.hpp>

namespace catena::chain {

void CommitWatchServer::attach(std::unique_ptr<Link> link, const wire::CommitWatchHello& hello,
                               const WatchGate& gate, const PartitionLog& log) {
  wire::CommitWatchWelcome w{};
  w.epoch = gate.epoch;
  if (!gate.authorized) {
    w.status = wire::Status::unauthenticated;
  } else if (hello.ref.epoch > gate.epoch) {
    w.status = wire::Status::not_ready;
  } else if (gate.retired) {
    w.status = wire::Status::moved;
  } else if (!gate.tail_of_two_or_more) {
    w.status = wire::Status::not_tail;
  } else if (hello.ref.epoch < gate.epoch) {
    w.status = wire::Status::stale_epoch;
  } else if (watches_.size() >= gate.max_watchers ||
             (gate.tenant_seats != nullptr && gate.tenant_seats->full())) {
    w.status = wire::Status::resource_exhausted;
  } else {
    w.status = wire::Status::ok;
  }
  if (link->send(w) != fabric::Errc::ok || w.status != wire::Status::ok) {
    link->poll_send();
    return;
  }
  if (watches_.empty()) {
    next_ = log.commit_offset();
    cursor_ = log.seek(next_);
  }
  auto watch = std::make_unique<Watch>();
  watch->link = std::move(link);
  watch->producer_id = hello.producer_id;
  watch->producer_epoch = hello.producer_epoch;
  watch->seat = Seat(gate.tenant_seats);
  watches_.push_back(std::move(watch));
}

CommitWatchServer::Watch* CommitWatchServer::watch_of(std::uint64_t producer_id,
                                                      std::uint64_t producer_epoch) {
  // Newest first: a publisher that re-opened its watch reads the new one.
  for (auto it = watches_.rbegin(); it != watches_.rend(); ++it) {
    Watch& w = **it;
    if (w.producer_id == producer_id && w.producer_epoch == producer_epoch && !w.closed) return &w;
  }
  return nullptr;
}

int CommitWatchServer::flush(Watch& w, std::uint64_t epoch) {
  if (w.count == 0) return 0;
  wire::PublishAck ack{};
  ack.status = wire::Status::ok;
  ack.first_seq = w.first_seq;
  ack.count = w.count;
  ack.first_offset = w.first_offset;
  ack.ring_consumed = 0;  // ring credit comes from the head
  ack.epoch = epoch;
  // A full send queue drops this ack: the head's covers the same records.
  (void)w.link->send(ack);
  w.count = 0;
  return 1;
}

int CommitWatchServer::do_work(const PartitionLog& log, std::uint64_t epoch) {
  int work = 0;
  for (auto& w : watches_) {
    const int n =
        w->link->poll_recv([](const std::byte*, std::uint32_t) {}, [](std::uint32_t, std::uint32_t) {});
    w->link->poll_send();
    if (n < 0 || w->link->broken()) w->closed = true;
  }
  if (!cursor_.valid) cursor_ = log.seek(next_);
  Watch* last = nullptr;
  while (cursor_.valid) {
    ReadResult r = log.read(cursor_);  // committed records only
    if (r.status == ReadStatus::expired) {
      next_ = log.commit_offset();  // lagged past retention: skip, the head acks
      cursor_.valid = false;
      break;
    }
    if (r.status != ReadStatus::record) break;
    next_ = cursor_.next_offset;
    const RecordHeader& h = r.header;
    if (last == nullptr || last->producer_id != h.producer_id || last->producer_epoch != h.producer_epoch) {
      last = watch_of(h.producer_id, h.producer_epoch);
      if (last == nullptr) continue;
    }
    const bool extends =
        h.sequence == last->first_seq + last->count && h.offset == last->first_offset + last->count;
    if (last->count > 0 && !extends) work += flush(*last, epoch);
    if (last->count == 0) {
      last->first_seq = h.sequence;
      last->first_offset = h.offset;
    }
    ++last->count;
  }
  for (auto& w : watches_) work += flush(*w, epoch);
  const auto dead = std::remove_if(watches_.begin(), watches_.end(), [](const auto& w) { return w->closed; });
  watches_.erase(dead, watches_.end());
  return work;
}

void CommitWatchServer::poll_events() {
  for (auto& w : watches_) w->link->poll_events();
}

void CommitWatchServer::drop_all() {
  for (auto& w : watches_) w->link->ep().disconnect();
  watches_.clear();
}

wire::CommitWatchHello CommitWatchClient::hello(std::string_view channel, std::uint32_t partition,
                                                std::uint64_t epoch, std::uint64_t producer_id,
                                                std::uint64_t producer_epoch) {
  wire::CommitWatchHello h{};
  h.ref.set(channel, partition, epoch);
  h.producer_id = producer_id;
  h.producer_epoch = producer_epoch;
  return h;
}

}  // namespace catena::chain
