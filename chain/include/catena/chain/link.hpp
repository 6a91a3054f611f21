// Link: a fabric endpoint plus the registered buffers its control messages
// need. It keeps `recv_depth` receives posted at all times (a WRITE WITH
// IMMEDIATE consumes one too), and a ring of send slots for wire messages.
//
// Work-request ids: the top byte says what a completion belongs to. Link owns
// kWrMessage; callers use the other tags for their writes.
//
// Threading: single-threaded (_st) like its Endpoint; built on one thread and
// handed to the data-plane thread that then owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <catena/chain/domain.hpp>
#include <catena/chain/wire.hpp>
#include <catena/fabric/fabric.hpp>

namespace catena::chain {

enum WrTag : std::uint64_t {
  kWrMessage = 1ull << 56,
  kWrData = 2ull << 56,
  kWrCommit = 3ull << 56,
  kWrDelivery = 4ull << 56,
};
inline constexpr std::uint64_t kWrTagMask = 0xffull << 56;

// Grants the peer of `ep` access to `mr` and stores the key in `out` (a
// field of a hello or welcome about to be sent on `ep`).
inline fabric::Result<void> expose_into(fabric::Endpoint& ep, const fabric::MemoryRegion& mr,
                                        fabric::RemoteRegion& out) {
  auto r = ep.expose(mr);
  if (!r) return r.error();
  out = r.value();
  return {};
}

class Link {
 public:
  static constexpr std::uint32_t kDefaultRecvDepth = 128;
  static constexpr std::uint32_t kSendSlots = 32;

  static fabric::Result<std::unique_ptr<Link>> create(fabric::Provider& provider,
                                                      std::unique_ptr<fabric::Endpoint> ep,
                                                      std::uint32_t recv_depth = kDefaultRecvDepth);

  // A Link's registered buffers, allocated before there is a connection for
  // them: an acceptor keeps one set ready across accept() calls that time out.
  struct Buffers {
    std::unique_ptr<fabric::MemoryRegion> recv;
    std::unique_ptr<fabric::MemoryRegion> send;
    std::uint32_t recv_depth = 0;
    fabric::DomainId domain = fabric::kDefaultDomain;
    static fabric::Result<Buffers> allocate(fabric::Provider& provider,
                                            std::uint32_t recv_depth = kDefaultRecvDepth,
                                            fabric::DomainId domain = fabric::kDefaultDomain);
    [[nodiscard]] bool ready() const { return recv && send; }
  };

  // Setup threads only: waits up to `timeout` for one connection on
  // `listener` and posts the receives from `buffers` before the connection is
  // accepted, so the peer's hello never waits on RNR retries. On success the
  // Link takes the buffers (allocate new ones for the next call); on timeout
  // or a failed connection they stay with the caller, unused. A connection
  // of another protection domain than the buffers' gets new buffers of its
  // own domain from `provider` (its receives must be in its domain).
  static fabric::Result<std::unique_ptr<Link>> accept(fabric::Provider& provider, fabric::Listener& listener,
                                                      Buffers& buffers, std::chrono::milliseconds timeout);

  fabric::Endpoint& ep() { return *ep_; }
  [[nodiscard]] bool connected() const { return ep_->state() == fabric::EndpointState::connected; }

  // Sends one wire message. backpressure if all send slots are in flight.
  template <class T>
  [[nodiscard]] fabric::Errc send(const T& msg) {
    if (sends_in_flight_ >= kSendSlots) return fabric::Errc::backpressure;
    const std::uint32_t slot = send_next_ % kSendSlots;
    std::uint32_t len = wire::encode(send_buf_->data() + slot * wire::kMaxMessage, msg);
    fabric::Errc e = ep_->post_send(kWrMessage | slot, {send_buf_.get(), slot * wire::kMaxMessage, len});
    if (e == fabric::Errc::ok) {
      ++send_next_;
      ++sends_in_flight_;
    }
    return e;
  }

  // Receive side. For each completion calls
  //   on_message(const std::byte* msg, std::uint32_t len)      for SENDs
  //   on_imm(std::uint32_t imm, std::uint32_t byte_len)         for WRITE WITH IMMEDIATE
  // and reposts the receive. Returns completions handled; -1 on an error
  // completion (the link is then broken).
  template <class OnMessage, class OnImm>
  int poll_recv(OnMessage&& on_message, OnImm&& on_imm) {
    if (!early_imms_.empty()) [[unlikely]] {
      auto early = std::move(early_imms_);
      early_imms_.clear();
      for (const auto& [imm, len] : early) on_imm(imm, len);
    }
    fabric::Completion c[16];
    int n = ep_->poll_recv(c, 16);
    for (int i = 0; i < n; ++i) {
      if (c[i].status != fabric::WcStatus::success) {
        broken_ = true;
        return -1;
      }
      const std::uint32_t slot = static_cast<std::uint32_t>(c[i].wr_id);
      if (c[i].opcode == fabric::Opcode::recv_write_imm) {
        on_imm(c[i].imm, c[i].byte_len);
      } else {
        on_message(recv_buf_->data() + slot * wire::kMaxMessage, c[i].byte_len);
      }
      if (repost(slot) != fabric::Errc::ok) broken_ = true;
    }
    return n;
  }

  // Send side: consumes message-slot completions, hands others to
  // on_completion(const fabric::Completion&). Returns -1 on an error completion.
  template <class OnCompletion>
  int poll_send(OnCompletion&& on_completion) {
    fabric::Completion c[32];
    int n = ep_->poll_send(c, 32);
    for (int i = 0; i < n; ++i) {
      if (c[i].status != fabric::WcStatus::success) {
        broken_ = true;
        return -1;
      }
      if ((c[i].wr_id & kWrTagMask) == kWrMessage) {
        --sends_in_flight_;
      } else {
        on_completion(c[i]);
      }
    }
    return n;
  }
  int poll_send() {
    return poll_send([](const fabric::Completion&) {});
  }
  // Sends posted and not yet completed.
  [[nodiscard]] std::uint32_t sends_in_flight() const { return sends_in_flight_; }

  // True once any completion failed or the peer disconnected.
  [[nodiscard]] bool broken() {
    if (!broken_ && ep_->state() != fabric::EndpointState::connected) broken_ = true;
    return broken_;
  }
  // Checks connection events (cheap, but not for every message).
  void poll_events() {
    if (ep_->poll_event() == fabric::EndpointEvent::disconnected) broken_ = true;
  }

  // What dial() brought back.
  template <class Welcome>
  struct Dialed {
    std::unique_ptr<Link> link;      // set once connected
    std::optional<Welcome> welcome;  // the peer's answer, if a well-formed one came in time
    bool unreachable = false;        // the connect itself failed (a hint for failure reports)
    fabric::Error error;             // why link or welcome is missing
  };

  // The handshake every client and replica link starts with (connect, send
  // the hello, wait for the welcome) as polled states, for a thread that
  // must keep doing other work while the peer answers: a single-threaded
  // simulation whose peer is stepped by the same thread, or a data-plane
  // loop that dials without a connector thread.
  //
  //   auto d = Link::Dialing<wire::ReplicaWelcome>::start(provider, addr, hello, 2s);
  //   while (d.poll() == DialState::waiting) { ... step the peer ... }
  //   if (d.state() == DialState::done) use(d.take());
  //
  // start() connects (Provider::connect: the transport's own setup, bounded
  // by `connect_timeout`), runs `grant(endpoint, hello)` (it puts the keys of
  // the regions the peer may access into the hello: Endpoint::expose, a key
  // good on that connection only) and sends the hello; poll() looks for the welcome
  // without blocking. The caller owns the timeout of the wait for the
  // welcome (it knows its clock): give up with fail(). Threading: one
  // thread, like the Link.
  //
  // Provider::connect itself waits on the network (a peer cut off takes the
  // whole timeout). A thread that must never wait runs it on another thread
  // and hands the endpoint to start_on(), which does the rest and never
  // blocks (the clients: publisher_impl.hpp).
  enum class DialState : std::uint8_t { waiting, done, failed };

  // Does nothing to the hello: for callers that expose no region.
  struct NoGrant {
    template <class Hello>
    fabric::Result<void> operator()(fabric::Endpoint&, Hello&) const {
      return {};
    }
  };

  template <class Welcome>
  class Dialing {
   public:
    template <class Hello, class Grant = NoGrant>
    static Dialing start(fabric::Provider& provider, std::string_view addr, Hello hello,
                         std::chrono::milliseconds connect_timeout, Grant&& grant = {}) {
      Dialing d;
      fabric::EndpointConfig cfg;
      cfg.domain = domain_of_channel(hello.ref.name());  // the channel's tenant's (domain.hpp)
      auto ep = provider.connect(addr, cfg, connect_timeout);
      if (!ep) {
        d.out_.unreachable = true;
        d.out_.error = ep.error();
        d.state_ = DialState::failed;
        return d;
      }
      return start_on(provider, std::move(ep.value()), std::move(hello), std::forward<Grant>(grant));
    }

    // start() from the point where `ep` is connected: builds the Link, grants
    // and sends the hello. Never waits on the network.
    template <class Hello, class Grant = NoGrant>
    static Dialing start_on(fabric::Provider& provider, std::unique_ptr<fabric::Endpoint> ep, Hello hello,
                            Grant&& grant = {}) {
      Dialing d;
      auto link = create(provider, std::move(ep));
      if (!link) {
        d.out_.error = link.error();
        d.state_ = DialState::failed;
        return d;
      }
      d.out_.link = std::move(link.value());
      if (auto g = grant(d.out_.link->ep(), hello); !g) {
        d.out_.error = g.error();
        d.state_ = DialState::failed;
        return d;
      }
      if (fabric::Errc e = d.out_.link->send(hello); e != fabric::Errc::ok) {
        d.out_.error = fabric::make_error(e, "cannot send the hello");
        d.state_ = DialState::failed;
      }
      return d;
    }

    // One look for the welcome; never blocks.
    DialState poll() {
      if (state_ != DialState::waiting) return state_;
      std::byte buf[wire::kMaxMessage];
      bool gone = false;
      const std::uint32_t got = out_.link->poll_message(buf, &gone);
      if (got > 0) {
        out_.welcome = wire::decode<Welcome>(buf, got);
        if (out_.welcome) {
          state_ = DialState::done;
        } else {
          fail(fabric::make_error(fabric::Errc::io_error, "the answer to the hello is malformed"));
        }
      } else if (gone) {
        fail(fabric::make_error(fabric::Errc::io_error, "the peer hung up without answering the hello"));
      }
      return state_;
    }
    // Gives up waiting (the caller's timeout).
    void fail(fabric::Error why) {
      if (state_ != DialState::waiting) return;
      out_.error = std::move(why);
      state_ = DialState::failed;
    }
    [[nodiscard]] DialState state() const { return state_; }
    // The connect itself failed: nobody accepted a connection.
    [[nodiscard]] bool unreachable() const { return out_.unreachable; }
    // The outcome, once done or failed (a failed one keeps its link, if any,
    // so the caller may hold it while it reports).
    Dialed<Welcome> take() { return std::move(out_); }

   private:
    Dialing() = default;
    Dialed<Welcome> out_;
    DialState state_ = DialState::waiting;
  };

  // Setup threads only: connects to `addr`, grants and sends `hello` and
  // waits up to `timeout` for the answer (Dialing, polled until it answers
  // or the timeout passes).
  template <class Welcome, class Hello, class Grant = NoGrant>
  static Dialed<Welcome> dial(fabric::Provider& provider, std::string_view addr, Hello hello,
                              std::chrono::milliseconds timeout, Grant&& grant = {}) {
    auto d = Dialing<Welcome>::start(provider, addr, std::move(hello), timeout, std::forward<Grant>(grant));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (d.poll() == DialState::waiting) {
      if (std::chrono::steady_clock::now() >= deadline) {
        d.fail(fabric::make_error(fabric::Errc::timeout, "no well-formed answer to the hello"));
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return d.take();
  }

  // One non-blocking look for a message (a handshake's answer): returns its
  // length (0 if none) and copies it into `out` (kMaxMessage bytes);
  // immediates that arrive first are kept for the data path. *gone: the
  // link broke (after what it had delivered was drained).
  std::uint32_t poll_message(std::byte* out, bool* gone);

  // Blocking helpers for handshakes on setup threads (not the data path).
  // Waits up to `timeout` for one message; returns its length (0 on timeout
  // or failure) and copies it into `out` (kMaxMessage bytes).
  std::uint32_t wait_message(std::byte* out, std::chrono::milliseconds timeout);

 private:
  Link() = default;
  fabric::Errc repost(std::uint32_t slot) { return post_receive(*ep_, recv_buf_.get(), slot); }
  static fabric::Errc post_receive(fabric::Endpoint& ep, const fabric::MemoryRegion* buf,
                                   std::uint32_t slot) {
    return ep.post_recv(slot, {buf, slot * wire::kMaxMessage, wire::kMaxMessage});
  }
  // Posts a receive in each of the first `depth` slots of `buf`.
  static fabric::Errc post_receives(fabric::Endpoint& ep, const fabric::MemoryRegion* buf,
                                    std::uint32_t depth);

  // Buffers outlive the endpoint: it is destroyed (and its posted work
  // flushed) first.
  std::unique_ptr<fabric::MemoryRegion> recv_buf_;
  std::unique_ptr<fabric::MemoryRegion> send_buf_;
  std::unique_ptr<fabric::Endpoint> ep_;
  // Immediates that arrived while wait_message() waited for a handshake
  // answer (the peer may start writing right after it): replayed first.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> early_imms_;
  std::uint32_t recv_depth_ = 0;
  std::uint64_t send_next_ = 0;
  std::uint32_t sends_in_flight_ = 0;
  bool broken_ = false;
};

}  // namespace catena::chain
