// The broker's acceptor thread (accepts fabric connections, reads each one's
// hello, hands it to the data-plane thread) and connector thread (opens the
// links to successors and brings back their welcome).
#include "broker_impl.hpp"

namespace catena::broker {

// --- acceptor thread -----------------------------------------------------------
void Broker::Impl::acceptor_loop() {
  struct Pending {
    std::unique_ptr<Link> link;
    std::chrono::steady_clock::time_point deadline;
  };
  std::vector<Pending> pending;
  // The next connection's buffers, ready before it arrives: its receives
  // are posted before the connection is accepted (Link::accept).
  Link::Buffers spare;
  while (!stopping_.load(std::memory_order_acquire)) {
    if (!spare.ready()) {
      auto b = Link::Buffers::allocate(*provider_);
      if (!b) {
        spdlog::warn("cannot allocate a connection's buffers: {}", b.error().message);
        std::this_thread::sleep_for(50ms);
        continue;
      }
      spare = std::move(b.value());
    }
    auto link = Link::accept(*provider_, *listener_, spare, pending.empty() ? 50ms : 1ms);
    if (link) {
      pending.push_back({std::move(link.value()), std::chrono::steady_clock::now() + 5s});
    } else if (link.code() != fabric::Errc::timeout) {
      // A peer that failed its handshake, or a listener that broke (a
      // removed device answers every call at once: do not spin on it).
      spdlog::warn("cannot set up an incoming connection: {}", link.error().message);
      if (pending.empty()) std::this_thread::sleep_for(10ms);
    }
    for (auto& p : pending) {
      std::byte buf[wire::kMaxMessage];
      std::uint32_t got = 0;
      int n = p.link->poll_recv(
          [&](const std::byte* msg, std::uint32_t len) {
            if (got == 0 && len <= wire::kMaxMessage) {
              std::memcpy(buf, msg, len);
              got = len;
            }
          },
          [](std::uint32_t, std::uint32_t) {});
      if (got > 0 && wire::peek(buf, got)) {
        auto in = std::make_shared<Incoming>();
        in->link = std::move(p.link);
        in->hello.assign(buf, buf + got);
        post([this, in] { dispatch_st(*in); });
      } else if (got > 0 || n < 0 || p.link->broken() || std::chrono::steady_clock::now() > p.deadline) {
        spdlog::warn("closing fabric connection from {}: {}", p.link->ep().peer_address(),
                     got > 0 ? "malformed hello" : "no hello");
        p.link.reset();
      }
    }
    std::erase_if(pending, [](const Pending& p) { return !p.link; });
  }
}

// --- connector thread --------------------------------------------------------------
void Broker::Impl::connector_loop() {
  while (!stopping_.load(std::memory_order_acquire)) {
    ConnectRequest req;
    {
      UniqueLock lk(connect_mu_);
      lk.wait_for(connect_cv_, 100ms, [&] {
        connect_mu_.assert_held();  // the wait holds it when it asks
        return stopping_.load() || !connect_queue_.empty();
      });
      if (connect_queue_.empty()) continue;
      req = std::move(connect_queue_.front());
      connect_queue_.pop_front();
    }
    auto out = std::make_shared<Outgoing>();
    out->channel = req.channel;
    out->partition = req.partition;
    out->epoch = req.epoch;
    auto d = Link::dial<wire::ReplicaWelcome>(
        *provider_, req.addr, req.hello, 2000ms, [&](fabric::Endpoint& ep, wire::ReplicaHello& h) {
          return chain::expose_into(ep, *req.commit_word, h.commit_word);
        });
    if (!d.welcome) {
      spdlog::debug("partition {}/{}: cannot link to successor {}: {}", req.channel, req.partition, req.addr,
                    d.error.message);
      out->error = d.error.message;
    } else if (d.welcome->status != wire::Status::ok) {
      spdlog::debug("partition {}/{}: successor answered {}", req.channel, req.partition,
                    wire::to_string(d.welcome->status));
      out->error = "it answered " + std::string(wire::to_string(d.welcome->status));
      out->welcome = *d.welcome;  // the status decides when to dial again
    } else {
      out->welcome = *d.welcome;
      out->link = std::move(d.link);
    }
    post([this, out] { connect_done_st(*out); });
  }
}

}  // namespace catena::broker
