// A fault-injecting provider: wraps any Provider and, on command, makes
// connection setup slow, fails a chosen post, drops or delays completions,
// breaks the connections to one peer (a transport error), or makes peers
// silent (a host that vanished without a disconnect). With
// nothing armed it only forwards, so the conformance suite passes through it
// unchanged ("fault:soft", "fault:verbs:rxe0").
//
// It is LevelDB's EnvWrapper for the fabric: the FaultProvider owns the
// inner provider, and every Listener and Endpoint it hands out wraps the
// inner one and consults one FaultInjector. Tests (and a simulation that
// steps a whole chain) keep a shared_ptr to the injector and arm faults
// while the wrapped provider is owned by a Broker or a client.
//
// Spec strings (Provider::open): "fault:<inner>" forwards, and
// "fault(connect_delay_ms=N,accept_delay_ms=N,completion_delay_us=N):<inner>"
// arms those delays from the start, so a daemon can run with them.
//
// Threading: the injector is thread-safe. Wrapped endpoints keep the inner
// endpoint's rule (one owning thread); their held completions are theirs.
// Delays are measured and waited out on a catena::Clock, so a simulation can
// pass its manual clock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <catena/fabric/clock.hpp>
#include <catena/fabric/fabric.hpp>

namespace catena::fabric {

// What the injector has seen and done since it was created.
struct FaultCounters {
  std::uint64_t connects = 0;             // Provider::connect calls
  std::uint64_t accepts = 0;              // endpoints Listener::accept handed out
  std::uint64_t posts = 0;                // post_* calls on wrapped endpoints
  std::uint64_t failed_posts = 0;         // posts failed by fail_post()
  std::uint64_t swallowed_posts = 0;      // posts a silent endpoint took and dropped
  std::uint64_t dropped_completions = 0;  // completions drop_completions() removed
  // Endpoints destroyed or disconnected, and error completions handed out:
  // each may end a connection, which its peer learns in the background (a
  // simulation settles the providers when this moves).
  std::uint64_t closes = 0;
  std::uint64_t broken_links = 0;      // endpoints break_peer() moved to error
  std::uint64_t corrupted_writes = 0;  // writes corrupt_next_write() garbled
};

class FaultInjector {
 public:
  explicit FaultInjector(const catena::Clock& clock = catena::SteadyClock::instance()) : clock_(clock) {}
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  // --- connection setup ---------------------------------------------------------
  // Every Provider::connect waits `d` before it starts (a connect whose
  // timeout is shorter fails with Errc::timeout once the timeout passed).
  void set_connect_delay(std::chrono::milliseconds d) { connect_delay_ns_.store(to_ns(d)); }
  // Listener::accept hands out each endpoint `d` after the inner listener
  // accepted it (the peer's connect has returned by then); its
  // before_accept runs at hand-out, so its receives are posted late.
  void set_accept_delay(std::chrono::milliseconds d) { accept_delay_ns_.store(to_ns(d)); }

  // --- posts -----------------------------------------------------------------------
  // The `nth` post_* call from now (1: the next one), on any endpoint of this
  // provider, returns `code` and does not reach the inner endpoint.
  void fail_post(std::uint64_t nth, Errc code = Errc::io_error);

  // Every endpoint connected to `address` (as dialled) that exists now fails
  // as a reliable connection does on a transport error: at its next post or
  // poll it moves to the error state (the post returns Errc::io_error, the
  // peer sees a disconnect) and stays there. Endpoints connected later are
  // not touched, so a redial succeeds. Links are dialled by address: a test
  // breaks one chain link by arranging that only one partition's replica on
  // this node has its successor at `address`.
  void break_peer(std::string address);
  // The next post_write or post_write_imm on an endpoint connected to
  // `address` (as dialled) carries its bytes with one byte changed (the
  // middle one): a bad frame from a peer whose NIC or memory garbled it.
  // The caller's buffer is not touched; the bytes go from a copy.
  void corrupt_next_write(std::string address);

  // --- completions -----------------------------------------------------------------
  // Each completion (send or receive side) is reported `d` after the inner
  // endpoint reported it, in order.
  void set_completion_delay(std::chrono::nanoseconds d) { completion_delay_ns_.store(to_ns(d)); }
  // The next `count` completions the inner endpoints report are never
  // reported (as if the completion queue lost them).
  void drop_completions(std::uint64_t count) { drop_budget_.fetch_add(count); }

  // --- silence -----------------------------------------------------------------------
  // A silent endpoint accepts posts and drops them (they never complete),
  // reports no completion and no connection event: the peer looks alive at
  // the transport and answers nothing. A connect to a silent address waits
  // out its timeout. Writes a peer posts still land in this node's memory
  // unless the peer's provider silences this node too (silence_peer). When
  // the silence lifts, an endpoint that swallowed posts goes to the error
  // state (its peer sees a disconnect): those writes are lost, and a
  // reliable connection never loses a write and carries on.
  //
  // Everything this provider created, and what it creates from now on:
  void set_silent(bool silent);
  // Endpoints connected to `address` (as dialled) and connects to it:
  void silence_peer(std::string address);
  void unsilence_peer(const std::string& address);

  // Disarms every fault (counters stay).
  void clear();

  [[nodiscard]] FaultCounters counters() const;
  [[nodiscard]] const catena::Clock& clock() const { return clock_; }

  // --- for the wrappers ------------------------------------------------------------------
  [[nodiscard]] std::uint64_t connect_delay_ns() const {
    return connect_delay_ns_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint64_t accept_delay_ns() const {
    return accept_delay_ns_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint64_t completion_delay_ns() const {
    return completion_delay_ns_.load(std::memory_order_relaxed);
  }
  // Counts one post; returns Errc::ok or the code fail_post() armed for it.
  [[nodiscard]] Errc on_post();
  void on_swallowed_post() { swallowed_posts_.fetch_add(1, std::memory_order_relaxed); }
  // True if this completion is to be dropped (consumes the budget).
  [[nodiscard]] bool take_drop();
  void on_connect() { connects_.fetch_add(1, std::memory_order_relaxed); }
  void on_accept() { accepts_.fetch_add(1, std::memory_order_relaxed); }
  void on_close() { closes_.fetch_add(1, std::memory_order_relaxed); }
  // Changes whenever silence changes, so endpoints re-check only then.
  [[nodiscard]] std::uint64_t silence_generation() const {
    return silence_gen_.load(std::memory_order_acquire);
  }
  [[nodiscard]] bool is_silenced(std::string_view peer_address) const;
  // Changes whenever break_peer() is called; an endpoint created at
  // generation g is broken by a break_peer() of its address after g.
  [[nodiscard]] std::uint64_t break_generation() const { return break_gen_.load(std::memory_order_acquire); }
  [[nodiscard]] bool is_broken(std::string_view peer_address, std::uint64_t created_gen) const;
  void on_break() { broken_links_.fetch_add(1, std::memory_order_relaxed); }
  // True (once) if this write to `peer_address` is the one to corrupt.
  [[nodiscard]] bool take_corrupt(std::string_view peer_address);

 private:
  static std::uint64_t to_ns(std::chrono::nanoseconds d) {
    return d.count() > 0 ? static_cast<std::uint64_t>(d.count()) : 0;
  }

  const catena::Clock& clock_;
  std::atomic<std::uint64_t> connect_delay_ns_{0};
  std::atomic<std::uint64_t> accept_delay_ns_{0};
  std::atomic<std::uint64_t> completion_delay_ns_{0};
  std::atomic<std::uint64_t> drop_budget_{0};
  std::atomic<std::uint64_t> posts_{0};
  std::atomic<std::uint64_t> fail_at_post_{0};  // 0: none armed
  std::atomic<Errc> fail_code_{Errc::io_error};
  std::atomic<std::uint64_t> failed_posts_{0};
  std::atomic<std::uint64_t> swallowed_posts_{0};
  std::atomic<std::uint64_t> dropped_completions_{0};
  std::atomic<std::uint64_t> connects_{0};
  std::atomic<std::uint64_t> accepts_{0};
  std::atomic<std::uint64_t> closes_{0};
  std::atomic<std::uint64_t> silence_gen_{0};
  std::atomic<std::uint64_t> break_gen_{0};
  std::atomic<std::uint64_t> broken_links_{0};
  std::atomic<bool> corrupt_armed_{false};
  std::atomic<std::uint64_t> corrupted_writes_{0};
  mutable std::mutex silence_mu_;
  bool silent_all_ = false;                // guarded by silence_mu_
  std::vector<std::string> silent_peers_;  // guarded by silence_mu_
  struct Break {
    std::string address;
    std::uint64_t gen = 0;
  };
  std::vector<Break> breaks_;  // guarded by silence_mu_
  std::string corrupt_peer_;   // guarded by silence_mu_
};

// The wrapper. Owns the inner provider; regions are the inner provider's own
// (a wrapped endpoint passes LocalBuffers and RemoteAddresses through).
class FaultProvider final : public Provider {
 public:
  FaultProvider(std::unique_ptr<Provider> inner, std::shared_ptr<FaultInjector> faults);

  [[nodiscard]] FaultInjector& faults() { return *faults_; }
  [[nodiscard]] const std::shared_ptr<FaultInjector>& shared_faults() const { return faults_; }
  [[nodiscard]] Provider& inner() { return *inner_; }

  [[nodiscard]] std::string name() const override { return "fault:" + inner_->name(); }
  [[nodiscard]] std::vector<std::string> kept_names() const override { return inner_->kept_names(); }
  void discard_kept(std::string_view name) override { inner_->discard_kept(name); }
  Result<std::unique_ptr<Listener>> listen(std::string_view address, const EndpointConfig& cfg = {}) override;
  Result<std::unique_ptr<Endpoint>> connect(
      std::string_view address, const EndpointConfig& cfg = {},
      std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) override;
  void settle() override { inner_->settle(); }
  // The inner provider allocates (and counts) every region.
  [[nodiscard]] std::int64_t registered_bytes() const noexcept override { return inner_->registered_bytes(); }
  [[nodiscard]] std::int64_t warm_bytes() const noexcept override { return inner_->warm_bytes(); }

 protected:
  Result<std::unique_ptr<MemoryRegion>> allocate_region(std::size_t size, std::uint32_t access,
                                                        DomainId domain) override {
    return inner_->allocate(size, access, domain);
  }
  Result<KeptRegion> allocate_kept_region(std::string_view name, std::size_t size, std::uint32_t access,
                                          DomainId domain) override {
    return inner_->allocate_kept(name, size, access, domain);
  }

 private:
  std::unique_ptr<Provider> inner_;
  std::shared_ptr<FaultInjector> faults_;
};

// "fault:<inner>" / "fault(<options>):<inner>": `spec` is what follows "fault".
Result<std::unique_ptr<Provider>> open_fault_provider(std::string_view spec,
                                                      const ProviderOptions& options = {});

}  // namespace catena::fabric
