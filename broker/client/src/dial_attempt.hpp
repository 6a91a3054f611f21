// One connection attempt of a client, from the route's answer on: the
// connect runs on a worker (Provider::connect may wait its whole timeout on a
// peer cut off), then the hello and its welcome are polled on the owner
// thread (Link::Dialing) until a deadline. The publisher's head session and
// commit watch and the subscriber's session each hold one, so the rules of
// an attempt (what times out when, what a dropped attempt leaves behind) are
// written once, here. poll() never waits. A dropped attempt is over at once:
// a connect still running is abandoned (its endpoint, if it comes, is
// closed on the worker), so the next attempt, to another peer, need not
// wait for it (the worker runs it on another thread).
//
// Threading: the owner thread of the client, like the session holding it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <catena/broker/routes.hpp>
#include <catena/chain/domain.hpp>
#include <catena/chain/link.hpp>
#include <catena/fabric/fabric.hpp>

#include "client_worker.hpp"

namespace catena::client_detail {

// Whether two addresses name the same replica. One reached by a hint (a
// sealed head's wire::NextChainHint) has no node id: its address says.
inline bool same_replica(const ReplicaAddress& a, const ReplicaAddress& b) {
  if (!a.node_id.empty() && !b.node_id.empty()) return a.node_id == b.node_id;
  return a.fabric_addr == b.fabric_addr;
}

template <class Hello, class Welcome>
class DialAttempt {
 public:
  using Clock = std::chrono::steady_clock;
  using Dialed = chain::Link::Dialed<Welcome>;
  // Puts the keys of what the peer may access into the hello, once connected
  // (Endpoint::expose: a key good on that connection only).
  using Grant = std::function<fabric::Result<void>(fabric::Endpoint&, Hello&)>;
  enum class Step : std::uint8_t { idle, connecting, welcoming };

  [[nodiscard]] Step step() const { return step_; }
  [[nodiscard]] bool idle() const { return step_ == Step::idle; }

  // Idle: start() may be called.
  [[nodiscard]] bool can_start() const { return step_ == Step::idle; }

  // Connects to `addr` on `worker` (bounded by `timeout`), then grants and
  // sends `hello` and waits up to `timeout` more for the welcome. The
  // connect holds `provider`: a dial worker does not wait for it when the
  // client goes (ClientWorker::Ending::leave_running).
  void start(ClientWorker& worker, const std::shared_ptr<fabric::Provider>& provider, std::string addr,
             const Hello& hello, std::chrono::milliseconds timeout, Grant grant = {}) {
    provider_ = provider.get();
    hello_ = hello;
    grant_ = std::move(grant);
    timeout_ = timeout;
    fabric::EndpointConfig cfg;
    cfg.domain = chain::domain_of_channel(hello.ref.name());  // the channel's tenant's (domain.hpp)
    connecting_.start(worker, [provider, addr = std::move(addr), cfg, timeout] {
      return provider->connect(addr, cfg, timeout);
    });
    step_ = Step::connecting;
  }

  // Moves the attempt on as far as the answers that came allow; its outcome
  // once it is over: `unreachable` if the connect failed, no welcome if the
  // handshake failed or timed out, else the peer's welcome and the link.
  std::optional<Dialed> poll(Clock::time_point now) {
    switch (step_) {
      case Step::idle:
        return std::nullopt;
      case Step::connecting: {
        auto ep = connecting_.take();
        if (!ep) return std::nullopt;
        if (!*ep) {
          step_ = Step::idle;
          Dialed d;
          d.unreachable = true;
          d.error = ep->error();
          return d;
        }
        using Dialing = chain::Link::Dialing<Welcome>;
        dialing_.emplace(grant_ ? Dialing::start_on(*provider_, std::move(ep->value()), hello_, grant_)
                                : Dialing::start_on(*provider_, std::move(ep->value()), hello_));
        deadline_ = now + timeout_;
        step_ = Step::welcoming;
        [[fallthrough]];
      }
      case Step::welcoming: {
        if (dialing_->poll() == chain::Link::DialState::waiting) {
          if (now < deadline_) return std::nullopt;
          dialing_->fail(fabric::make_error(fabric::Errc::timeout, "no well-formed answer to the hello"));
        }
        Dialed d = dialing_->take();
        dialing_.reset();
        step_ = Step::idle;
        return d;
      }
    }
    return std::nullopt;
  }

  // Drops the attempt, at once (a connect still running is abandoned).
  void cancel() {
    connecting_.abandon();
    dialing_.reset();
    step_ = Step::idle;
  }

 private:
  Step step_ = Step::idle;
  fabric::Provider* provider_ = nullptr;
  Hello hello_{};
  Grant grant_;
  std::chrono::milliseconds timeout_{0};
  Call<fabric::Result<std::unique_ptr<fabric::Endpoint>>> connecting_;
  std::optional<chain::Link::Dialing<Welcome>> dialing_;
  Clock::time_point deadline_{};
};

}  // namespace catena::client_detail
