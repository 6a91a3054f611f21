#include "sim_clients.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include <catena/chain/delivery.hpp>
#include <catena/chain/publish.hpp>
#include <catena/chain/record.hpp>

namespace catena::sim {

namespace wire = chain::wire;
using chain::Link;

namespace {

constexpr std::uint32_t kRingBytes = chain::kMinRingBytes;

std::unique_ptr<fabric::Provider> open_provider(SimNet& net, std::shared_ptr<fabric::FaultInjector>& faults) {
  faults = std::make_shared<fabric::FaultInjector>(net.clock);
  auto inner = fabric::Provider::open("soft:shm");
  if (!inner) return nullptr;
  auto p = std::make_unique<fabric::FaultProvider>(std::move(inner.value()), faults);
  net.add_provider(p.get(), faults.get());
  return p;
}

// The partition's access secret, as the controller's Thrift answers give
// it to clients with the route (the replicas ask for it).
template <class Hello>
void carry_access_secret(Hello& hello, const control::Controller& controller, const std::string& channel) {
  const std::string secret = controller.access_secret(channel, 0);
  std::memcpy(hello.access_secret, secret.data(), std::min(secret.size(), sizeof hello.access_secret));
}

}  // namespace

// --- SimPublisher ----------------------------------------------------------------

SimPublisher::SimPublisher(SimNet& net, std::string channel, OnAck on_ack)
    : net_(net), channel_(std::move(channel)), on_ack_(std::move(on_ack)) {}

SimPublisher::~SimPublisher() {
  dialing_.reset();
  link_.reset();
  mirror_.reset();
  if (provider_) net_.remove_provider(provider_.get());
}

bool SimPublisher::start() {
  provider_ = open_provider(net_, faults_);
  if (!provider_) return false;
  auto m = provider_->allocate(kRingBytes, fabric::kLocalWrite);
  if (!m) return false;
  mirror_ = std::move(m.value());
  auto id = net_.controller->init_producer(0);
  if (!id) return false;
  producer_id_ = static_cast<std::uint64_t>(id->producer_id);
  producer_epoch_ = static_cast<std::uint64_t>(id->producer_epoch);
  return true;
}

bool SimPublisher::place(std::uint32_t frame_bytes, std::uint32_t* pos) {
  return writer_.place_st(
             frame_bytes,
             [this](std::uint32_t at, const chain::RecordHeader& pad) {
               std::memcpy(mirror_->data() + at, &pad, sizeof pad);
               return true;
             },
             pos) == chain::RingStatus::ok;
}

bool SimPublisher::publish(std::uint64_t id, std::uint32_t filler) {
  std::vector<std::byte> payload(sizeof id + filler);
  std::memcpy(payload.data(), &id, sizeof id);
  for (std::uint32_t i = 0; i < filler; ++i)
    payload[sizeof id + i] = static_cast<std::byte>((id * 31 + i) & 0xff);
  const auto frame_bytes =
      static_cast<std::uint32_t>(chain::frame_size(static_cast<std::uint32_t>(payload.size())));
  if (writer_.ring_bytes() == 0) writer_ = chain::FrameRingWriter(kRingBytes, kRingBytes);
  std::uint32_t pos = 0;
  if (!place(frame_bytes, &pos)) return false;
  chain::RecordHeader h{};
  h.length = static_cast<std::uint32_t>(payload.size());
  h.producer_id = producer_id_;
  h.producer_epoch = producer_epoch_;
  h.sequence = next_seq_++;
  h.timestamp_ns = net_.clock.now_ns();
  chain::write_frame(mirror_->data() + pos, h, payload);
  if (pending_.empty()) last_progress_ns_ = net_.clock.now_ns();
  pending_.push_back({id, h.sequence, pos, frame_bytes});
  log("publishes #" + std::to_string(id) + " seq " + std::to_string(h.sequence));
  flush();
  return true;
}

void SimPublisher::flush() {
  while (link_ && writer_.flushed() < writer_.written()) {
    const chain::FrameRingWriter::Chunk c = writer_.next_chunk();
    fabric::LocalBuffer src{mirror_.get(), c.pos, c.bytes};
    fabric::RemoteAddress dst{ring_, c.pos};
    const fabric::Errc e = c.last ? link_->ep().post_write_imm(chain::kWrData, src, dst, writer_.immediate())
                                  : link_->ep().post_write(chain::kWrData, src, dst);
    if (e != fabric::Errc::ok) return;  // retried on the next step
    writer_.flushed_st(writer_.flushed() + c.bytes);
  }
}

void SimPublisher::connect() {
  const std::uint64_t now = net_.clock.now_ns();
  retry_at_ns_ = now + 50 * kMs;
  auto route = net_.controller->get_route(channel_, 0, 0);
  if (!route || route->replicas.empty()) return;
  route_ = *route;
  const auto& head = route_.replicas.front();
  wire::PublisherHello hello{};
  hello.ref.set(channel_, 0, static_cast<std::uint64_t>(route_.epoch));
  hello.producer_id = producer_id_;
  hello.producer_epoch = producer_epoch_;
  hello.ring_bytes = kRingBytes;
  carry_access_secret(hello, *net_.controller, channel_);
  log("dials head " + head.node_id + " at epoch " + std::to_string(route_.epoch));
  dialing_.emplace(net_.dial<wire::PublisherWelcome>(*provider_, head.fabric_addr, hello));
  dial_deadline_ns_ = now + 500 * kMs;
}

// As Publisher's connect_st and resync_st: the head's next sequence says
// which pending records it holds; the others are renumbered from there and
// resent from a fresh ring.
void SimPublisher::on_welcome(const wire::PublisherWelcome& w, std::unique_ptr<Link> link) {
  if (w.status != wire::Status::ok || w.ring_bytes != kRingBytes) {
    log(std::string("head answered ") + std::string(wire::to_string(w.status)));
    return;
  }
  const std::uint64_t first = pending_.empty() ? next_seq_ : pending_.front().seq;
  if (w.next_sequence > next_seq_) {
    log("fenced: the head expects sequence " + std::to_string(w.next_sequence));
    return;
  }
  if (w.next_sequence < first) {
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      pending_[i].seq = w.next_sequence + i;
      chain::restamp_sequence(mirror_->data() + pending_[i].pos, pending_[i].seq);
    }
    next_seq_ = w.next_sequence + pending_.size();
  }
  log("connected, head expects sequence " + std::to_string(w.next_sequence) + ", resends " +
      std::to_string(pending_.size()));
  link_ = std::move(link);
  ring_ = w.ring;
  std::vector<std::byte> copy;
  for (const auto& p : pending_) {
    const std::byte* f = mirror_->data() + p.pos;
    copy.insert(copy.end(), f, f + p.frame_bytes);
  }
  writer_.reset_st();
  std::size_t off = 0;
  for (auto& p : pending_) {
    (void)place(p.frame_bytes, &p.pos);  // they were all in the ring at once: they fit from 0
    std::memcpy(mirror_->data() + p.pos, copy.data() + off, p.frame_bytes);
    off += p.frame_bytes;
  }
  last_progress_ns_ = net_.clock.now_ns();
  flush();
}

void SimPublisher::lost_head(const std::string& why) {
  log("lost the head: " + why);
  link_.reset();
  retry_at_ns_ = net_.clock.now_ns();
}

void SimPublisher::on_ack(const wire::PublishAck& ack) {
  last_progress_ns_ = net_.clock.now_ns();
  if (ack.status == wire::Status::sequence_gap) {
    (void)writer_.credit_st(ack.ring_consumed);
    resync_ = true;
    return;
  }
  for (std::uint32_t i = 0; i < ack.count && !pending_.empty(); ++i) {
    const std::uint64_t seq = ack.first_seq + i;
    const Pending p = pending_.front();
    if (p.seq != seq) continue;
    pending_.pop_front();
    if (ack.status != wire::Status::ok) {
      log("#" + std::to_string(p.id) + " failed: " + std::string(wire::to_string(ack.status)));
      continue;
    }
    std::uint64_t offset = ack.first_offset == ~0ull ? ~0ull : ack.first_offset + i;
    log("ack #" + std::to_string(p.id) + " seq " + std::to_string(seq) + " offset " + std::to_string(offset) +
        " epoch " + std::to_string(ack.epoch));
    if (corrupt_ack_ && offset != ~0ull) {
      corrupt_ack_ = false;
      ++offset;
    }
    on_ack_(p.id, seq, offset, ack.epoch);
  }
  (void)writer_.credit_st(ack.ring_consumed);
}

void SimPublisher::step() {
  const std::uint64_t now = net_.clock.now_ns();
  if (dialing_) {
    if (dialing_->poll() == Link::DialState::waiting) {
      if (now < dial_deadline_ns_) return;
      dialing_->fail(fabric::make_error(fabric::Errc::timeout, "no answer to the hello"));
    }
    auto d = dialing_->take();
    dialing_.reset();
    if (d.welcome) {
      on_welcome(*d.welcome, std::move(d.link));
    } else {
      log("cannot reach the head: " + d.error.message);
      if (d.unreachable && !route_.replicas.empty()) {
        control::idl::FailureReport r;
        r.reporter = "sim-publisher";
        r.suspect_node_id = route_.replicas.front().node_id;
        r.channel = channel_;
        r.epoch = route_.epoch;
        r.reason = d.error.message;
        (void)net_.controller->report_failure(r);
      }
    }
    return;
  }
  if (!link_) {
    if (now >= retry_at_ns_) connect();
    return;
  }
  flush();
  link_->poll_send();
  link_->poll_recv(
      [&](const std::byte* msg, std::uint32_t len) {
        if (auto ack = wire::decode<wire::PublishAck>(msg, len)) on_ack(*ack);
      },
      [](std::uint32_t, std::uint32_t) {});
  if (resync_) {
    resync_ = false;
    lost_head("the head reported a sequence gap");
  } else if (link_->broken()) {
    lost_head("connection lost");
  } else if (!pending_.empty() && now - last_progress_ns_ >= 250 * kMs && now >= route_check_at_ns_) {
    // Acks stalled: a silent head never breaks the connection.
    route_check_at_ns_ = now + 250 * kMs;
    auto r = net_.controller->get_route(channel_, 0, 0);
    if (r && !r->replicas.empty() && r->epoch > route_.epoch &&
        r->replicas.front().node_id != route_.replicas.front().node_id) {
      lost_head("acknowledgements stalled and the chain has a new head");
    }
  }
}

// --- SimSubscriber -----------------------------------------------------------

SimSubscriber::SimSubscriber(SimNet& net, std::string channel, std::uint32_t segment_bytes,
                             std::uint64_t seed, OnRecord on_record, OnViolation on_violation)
    : net_(net),
      channel_(std::move(channel)),
      on_record_(std::move(on_record)),
      on_violation_(std::move(on_violation)),
      rng_(seed),
      ring_bytes_(std::max(chain::kMinRingBytes, segment_bytes)) {}

SimSubscriber::~SimSubscriber() {
  dialing_.reset();
  link_.reset();
  ring_.reset();
  if (provider_) net_.remove_provider(provider_.get());
}

bool SimSubscriber::start() {
  provider_ = open_provider(net_, faults_);
  if (!provider_) return false;
  auto r = provider_->allocate(ring_bytes_, fabric::kLocalWrite | fabric::kRemoteWrite);
  if (!r) return false;
  ring_ = std::move(r.value());
  reader_ = chain::FrameRingReader(ring_->data(), ring_bytes_);
  return true;
}

void SimSubscriber::connect() {
  const std::uint64_t now = net_.clock.now_ns();
  retry_at_ns_ = now + 50 * kMs;
  auto route = net_.controller->get_route(channel_, 0, 0);
  if (!route || route->replicas.empty()) return;
  if (!started_) {
    next_ = static_cast<std::uint64_t>(route->start_offset);
    started_ = true;
  }
  const auto& rep = route->replicas[rng_() % route->replicas.size()];
  replica_ = rep.node_id;
  wire::SubscriberHello hello{};
  hello.ref.set(channel_, 0, static_cast<std::uint64_t>(route->epoch));
  hello.mode = wire::StartMode::offset;
  hello.ring_bytes = ring_bytes_;
  hello.start_offset = next_;
  carry_access_secret(hello, *net_.controller, channel_);
  log("dials " + replica_ + " from offset " + std::to_string(next_));
  // Whatever the last session wrote is void: the new one starts at 0.
  reader_.reset_st();
  dialing_.emplace(net_.dial<wire::SubscriberWelcome>(*provider_, rep.fabric_addr, hello,
                                                      [this](fabric::Endpoint& ep, wire::SubscriberHello& h) {
                                                        return chain::expose_into(ep, *ring_, h.ring);
                                                      }));
  dial_deadline_ns_ = now + 500 * kMs;
}

void SimSubscriber::drop(const std::string& why) {
  log("drops " + replica_ + ": " + why);
  link_.reset();
  retry_at_ns_ = net_.clock.now_ns();
}

void SimSubscriber::step(bool behind) {
  const std::uint64_t now = net_.clock.now_ns();
  if (dialing_) {
    if (dialing_->poll() == Link::DialState::waiting) {
      if (now < dial_deadline_ns_) return;
      dialing_->fail(fabric::make_error(fabric::Errc::timeout, "no answer to the hello"));
    }
    auto d = dialing_->take();
    dialing_.reset();
    if (d.welcome && d.welcome->status == wire::Status::ok) {
      if (d.welcome->start_offset != next_) {
        on_violation_("subscriber asked for offset " + std::to_string(next_) + " and " + replica_ +
                      " starts at " + std::to_string(d.welcome->start_offset));
      }
      link_ = std::move(d.link);
      last_progress_ns_ = now;
      log("reads from " + replica_);
    } else {
      log("cannot read from " + replica_ + ": " +
          (d.welcome ? std::string(wire::to_string(d.welcome->status)) : d.error.message));
    }
    return;
  }
  if (!link_) {
    if (now >= retry_at_ns_) connect();
    return;
  }
  link_->poll_send();
  const int n = link_->poll_recv(
      [&](const std::byte* msg, std::uint32_t len) {
        if (auto notice = wire::decode<wire::SubscriberNotice>(msg, len)) {
          on_violation_("subscriber got notice " + std::string(wire::to_string(notice->status)));
        }
      },
      [&](std::uint32_t imm, std::uint32_t) { reader_.on_immediate_st(imm); });
  if (reader_.overrun()) return drop("the replica overran the ring");
  for (;;) {
    chain::RingFrame f;
    const chain::RingRead r = reader_.next_st(&f);
    if (r == chain::RingRead::empty) break;
    if (r == chain::RingRead::garbled) {
      on_violation_("garbled frame in the delivery ring from " + replica_);
      return drop("garbled ring");
    }
    chain::RecordHeader h;
    if (chain::check_frame(f.at, f.bytes, &h) != chain::FrameCheck::ok || h.length < sizeof(std::uint64_t)) {
      on_violation_("record at offset " + std::to_string(f.header.offset) + " from " + replica_ +
                    " fails its checksum");
      return drop("bad frame");
    }
    std::uint64_t id = 0;
    std::memcpy(&id, f.at + sizeof(chain::RecordHeader), sizeof id);
    log("delivered offset " + std::to_string(h.offset) + " #" + std::to_string(id));
    on_record_(h.offset, id);
    next_ = h.offset + 1;
    reader_.consume_st(f);
    last_progress_ns_ = now;
  }
  if (reader_.credit_due() && link_->send(wire::SubscriberCredit{reader_.consumed()}) == fabric::Errc::ok) {
    reader_.credited_st();
  }
  if (n < 0 || link_->broken()) return drop("connection lost");
  if (behind && now - last_progress_ns_ >= 500 * kMs) drop("no records for 500 ms while behind");
}

}  // namespace catena::sim
