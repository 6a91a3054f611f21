// The fault-injecting wrapper: a Listener and an Endpoint that forward to the
// inner provider's and apply what the FaultInjector has armed.
#include <algorithm>
#include <charconv>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>

#include <catena/fabric/fault_provider.hpp>

namespace catena::fabric {
namespace {

// Completions the inner endpoint reported and the wrapper has not yet handed
// out (delayed ones). A fixed ring sized once: no allocation while polling.
class HeldCompletions {
 public:
  explicit HeldCompletions(std::uint32_t capacity) : ring_(std::max<std::uint32_t>(capacity, 16)) {}

  [[nodiscard]] bool empty() const { return size_ == 0; }
  [[nodiscard]] std::uint32_t room() const { return static_cast<std::uint32_t>(ring_.size()) - size_; }
  void push(const Completion& c, std::uint64_t ready_ns) {
    ring_[(head_ + size_) % ring_.size()] = {c, ready_ns};
    ++size_;
  }
  // Hands out, in order, the held completions that are due.
  int pop_due(std::uint64_t now_ns, Completion* out, int max) {
    int n = 0;
    while (n < max && size_ > 0 && ring_[head_].ready_ns <= now_ns) {
      out[n++] = ring_[head_].c;
      head_ = (head_ + 1) % ring_.size();
      --size_;
    }
    return n;
  }

 private:
  struct Held {
    Completion c;
    std::uint64_t ready_ns = 0;
  };
  std::vector<Held> ring_;
  std::uint32_t head_ = 0;
  std::uint32_t size_ = 0;
};

class FaultEndpoint final : public Endpoint {
 public:
  FaultEndpoint(std::unique_ptr<Endpoint> inner, std::shared_ptr<FaultInjector> faults, std::string peer,
                Provider* provider = nullptr)
      : Endpoint(inner->domain()),
        provider_(provider),
        inner_(std::move(inner)),
        faults_(std::move(faults)),
        peer_(std::move(peer)),
        held_send_(inner_->caps().send_queue_depth),
        held_recv_(inner_->caps().recv_queue_depth),
        created_break_gen_(faults_->break_generation()),
        break_seen_(created_break_gen_) {}
  ~FaultEndpoint() override { faults_->on_close(); }
  FaultEndpoint(const FaultEndpoint&) = delete;
  FaultEndpoint& operator=(const FaultEndpoint&) = delete;

  // Setup, not a post: no fault is injected; the key is the inner
  // connection's, so it is bound to the same peer.
  Result<RemoteRegion> expose_region(const MemoryRegion& mr) override { return inner_->expose(mr); }

  Errc post_write(std::uint64_t wr_id, LocalBuffer src, RemoteAddress dst) override {
    if (Errc e = Errc::ok; intercept(e)) return e;
    return inner_->post_write(wr_id, maybe_corrupt(src), dst);
  }
  Errc post_write_imm(std::uint64_t wr_id, LocalBuffer src, RemoteAddress dst, std::uint32_t imm) override {
    if (Errc e = Errc::ok; intercept(e)) return e;
    return inner_->post_write_imm(wr_id, maybe_corrupt(src), dst, imm);
  }
  Errc post_read(std::uint64_t wr_id, LocalBuffer dst, RemoteAddress src) override {
    if (Errc e = Errc::ok; intercept(e)) return e;
    return inner_->post_read(wr_id, dst, src);
  }
  Errc post_send(std::uint64_t wr_id, LocalBuffer src) override {
    if (Errc e = Errc::ok; intercept(e)) return e;
    return inner_->post_send(wr_id, src);
  }
  Errc post_recv(std::uint64_t wr_id, LocalBuffer dst) override {
    if (Errc e = Errc::ok; intercept(e)) return e;
    return inner_->post_recv(wr_id, dst);
  }

  void hold_posts() noexcept override { inner_->hold_posts(); }
  void release_posts() noexcept override { inner_->release_posts(); }

  int poll_send(Completion* out, int max) override {
    return poll(held_send_, out, max, [this](Completion* c, int m) { return inner_->poll_send(c, m); });
  }
  int poll_recv(Completion* out, int max) override {
    return poll(held_recv_, out, max, [this](Completion* c, int m) { return inner_->poll_recv(c, m); });
  }

  EndpointEvent poll_event() override { return silent() ? EndpointEvent::none : inner_->poll_event(); }
  [[nodiscard]] EndpointState state() const noexcept override {
    return silent() ? EndpointState::connected : inner_->state();
  }
  [[nodiscard]] const EndpointCaps& caps() const noexcept override { return inner_->caps(); }
  [[nodiscard]] std::string peer_address() const override { return inner_->peer_address(); }
  void disconnect() override {
    faults_->on_close();
    inner_->disconnect();
  }

 private:
  // Re-checks the injector only when its silence changed. A silence that
  // swallowed posts ends the connection when it lifts: those writes are
  // lost, and a reliable connection never loses a write and carries on (an
  // RC queue pair whose retries ran out goes to error; so does this one).
  bool silent() const {
    const std::uint64_t gen = faults_->silence_generation();
    if (gen != silence_gen_) {
      silence_gen_ = gen;
      const bool was = silent_;
      silent_ = faults_->is_silenced(peer_);
      if (was && !silent_ && swallowed_) {
        faults_->on_close();
        inner_->disconnect();
      }
    }
    return silent_;
  }

  // Re-checks the injector only when break_peer() was called. A broken
  // endpoint tears its inner connection down once (the peer sees a
  // disconnect, this side's state leaves `connected`) and fails every post.
  bool broken() {
    const std::uint64_t gen = faults_->break_generation();
    if (gen != break_seen_) {
      break_seen_ = gen;
      if (!broken_ && faults_->is_broken(peer_, created_break_gen_)) {
        broken_ = true;
        faults_->on_break();
        faults_->on_close();
        inner_->disconnect();
      }
    }
    return broken_;
  }

  // The write's bytes, or (corrupt_next_write) a copy with its middle byte
  // flipped. The copy's region is allocated at the first garbled write and
  // lives as long as this endpoint (declared before inner_), so a write in
  // flight never reads freed memory.
  LocalBuffer maybe_corrupt(LocalBuffer src) {
    if (provider_ == nullptr || src.length == 0 || !faults_->take_corrupt(peer_)) return src;
    if (!corrupt_copy_ || corrupt_copy_->size() < src.length) {
      auto mr = provider_->allocate(src.length, kLocalWrite, domain());
      if (!mr) return src;
      corrupt_copy_ = std::move(mr.value());
    }
    std::memcpy(corrupt_copy_->data(), src.mr->data() + src.offset, src.length);
    corrupt_copy_->data()[src.length / 2] ^= std::byte{0x5a};
    return {corrupt_copy_.get(), 0, src.length};
  }

  // True if the post stops here: `result` is what the caller gets (ok for a
  // post a silent endpoint swallows, the armed code for a failed one,
  // io_error on a broken endpoint).
  bool intercept(Errc& result) {
    if (broken()) {
      result = Errc::io_error;
      return true;
    }
    if (silent()) {
      faults_->on_swallowed_post();
      swallowed_ = true;
      result = Errc::ok;
      return true;
    }
    result = faults_->on_post();
    return result != Errc::ok;
  }

  template <class PollInner>
  int poll(HeldCompletions& held, Completion* out, int max, PollInner&& poll_inner) {
    (void)broken();  // the inner endpoint reports the disconnect
    if (silent()) return 0;
    const std::uint64_t delay = faults_->completion_delay_ns();
    if (delay == 0 && held.empty()) {
      int n = poll_inner(out, max);
      return drop(out, n);
    }
    const std::uint64_t now = faults_->clock().now_ns();
    Completion batch[32];
    const int want = static_cast<int>(std::min<std::uint32_t>(held.room(), 32));
    int n = want > 0 ? drop(batch, poll_inner(batch, want)) : 0;
    for (int i = 0; i < n; ++i) held.push(batch[i], now + delay);
    return held.pop_due(now, out, max);
  }

  // Removes the completions the injector wants dropped; returns what is left.
  int drop(Completion* c, int n) {
    int kept = 0;
    for (int i = 0; i < n; ++i) {
      if (c[i].status != WcStatus::success) faults_->on_close();
      if (!faults_->take_drop()) c[kept++] = c[i];
    }
    return kept;
  }

  Provider* provider_;                          // the inner provider: corrupted copies (dialled only)
  std::unique_ptr<MemoryRegion> corrupt_copy_;  // before inner_: a write in flight reads it
  std::unique_ptr<Endpoint> inner_;
  std::shared_ptr<FaultInjector> faults_;
  std::string peer_;  // as dialled (connect) or as the inner endpoint names it (accept)
  HeldCompletions held_send_;
  HeldCompletions held_recv_;
  mutable std::uint64_t silence_gen_ = ~0ull;
  mutable bool silent_ = false;
  bool swallowed_ = false;                 // a post was swallowed while silent
  const std::uint64_t created_break_gen_;  // break_peer() calls before this endpoint existed
  std::uint64_t break_seen_;               // the break generation last checked
  bool broken_ = false;
};

class FaultListener final : public Listener {
 public:
  FaultListener(std::unique_ptr<Listener> inner, std::shared_ptr<FaultInjector> faults)
      : inner_(std::move(inner)), faults_(std::move(faults)) {}

  [[nodiscard]] std::string address() const override { return inner_->address(); }

 protected:
  // With no accept delay, before_accept goes to the inner listener, so the
  // receives are posted before the connection is accepted, as without the
  // wrapper. With a delay, the inner endpoint is accepted at once and held:
  // before_accept then runs when it is handed out, as a slow acceptor would
  // post its receives late (the peer's first SEND waits on RNR retries).
  Result<std::unique_ptr<Endpoint>> accept_one(std::chrono::milliseconds timeout,
                                               const BeforeAccept& before_accept) override {
    const catena::Clock& clock = faults_->clock();
    if (held_.empty() && faults_->accept_delay_ns() == 0) {
      auto r = inner_->accept(timeout, before_accept);
      if (!r) return r.error();
      return wrap(std::move(r.value()));
    }
    const std::uint64_t deadline =
        clock.now_ns() + static_cast<std::uint64_t>(timeout.count()) * 1'000'000ull;
    for (;;) {
      const std::uint64_t now = clock.now_ns();
      if (!held_.empty() && held_.front().ready_ns <= now) {
        auto ep = std::move(held_.front().ep);
        held_.pop_front();
        if (before_accept) {
          if (Errc e = before_accept(*ep); e != Errc::ok) {
            return make_error(e, "connection refused before accept: " + std::string(to_string(e)));
          }
        }
        return wrap(std::move(ep));
      }
      if (now >= deadline) break;
      std::uint64_t wait_ns = deadline - now;
      if (!held_.empty()) wait_ns = std::min(wait_ns, held_.front().ready_ns - now);
      // The inner accept waits in whole milliseconds: round up, so a short wait still waits.
      auto r = inner_->accept(std::chrono::milliseconds((wait_ns + 999'999) / 1'000'000));
      if (r) {
        held_.push_back({std::move(r.value()), clock.now_ns() + faults_->accept_delay_ns()});
      } else if (r.code() != Errc::timeout) {
        return r.error();
      }
    }
    return make_error(Errc::timeout, "no connection on " + inner_->address() + " within " +
                                         std::to_string(timeout.count()) + " ms");
  }

 private:
  std::unique_ptr<Endpoint> wrap(std::unique_ptr<Endpoint> ep) {
    faults_->on_accept();
    std::string peer = ep->peer_address();
    return std::make_unique<FaultEndpoint>(std::move(ep), faults_, std::move(peer));
  }

  struct Held {
    std::unique_ptr<Endpoint> ep;
    std::uint64_t ready_ns = 0;
  };
  std::unique_ptr<Listener> inner_;
  std::shared_ptr<FaultInjector> faults_;
  std::deque<Held> held_;  // accepted, waiting out the accept delay
};

Result<std::uint64_t> parse_number(std::string_view s) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) {
    return make_error(Errc::invalid_argument, "not a number: '" + std::string(s) + "'");
  }
  return v;
}

}  // namespace

void FaultInjector::fail_post(std::uint64_t nth, Errc code) {
  fail_code_.store(code);
  fail_at_post_.store(nth == 0 ? 0 : posts_.load() + nth);
}

Errc FaultInjector::on_post() {
  const std::uint64_t n = posts_.fetch_add(1, std::memory_order_relaxed) + 1;
  std::uint64_t at = fail_at_post_.load(std::memory_order_relaxed);
  if (at == 0 || n != at || !fail_at_post_.compare_exchange_strong(at, 0)) return Errc::ok;
  failed_posts_.fetch_add(1, std::memory_order_relaxed);
  return fail_code_.load();
}

bool FaultInjector::take_drop() {
  std::uint64_t budget = drop_budget_.load(std::memory_order_relaxed);
  while (budget > 0) {
    if (drop_budget_.compare_exchange_weak(budget, budget - 1)) {
      dropped_completions_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

void FaultInjector::set_silent(bool silent) {
  std::lock_guard lk(silence_mu_);
  silent_all_ = silent;
  silence_gen_.fetch_add(1, std::memory_order_release);
}

void FaultInjector::silence_peer(std::string address) {
  std::lock_guard lk(silence_mu_);
  silent_peers_.push_back(std::move(address));
  silence_gen_.fetch_add(1, std::memory_order_release);
}

void FaultInjector::unsilence_peer(const std::string& address) {
  std::lock_guard lk(silence_mu_);
  std::erase(silent_peers_, address);
  silence_gen_.fetch_add(1, std::memory_order_release);
}

void FaultInjector::break_peer(std::string address) {
  std::lock_guard lk(silence_mu_);
  const std::uint64_t gen = break_gen_.load(std::memory_order_relaxed) + 1;
  breaks_.push_back({std::move(address), gen});
  break_gen_.store(gen, std::memory_order_release);
}

bool FaultInjector::is_broken(std::string_view peer_address, std::uint64_t created_gen) const {
  std::lock_guard lk(silence_mu_);
  return std::any_of(breaks_.begin(), breaks_.end(),
                     [&](const Break& b) { return b.gen > created_gen && b.address == peer_address; });
}

void FaultInjector::corrupt_next_write(std::string address) {
  std::lock_guard lk(silence_mu_);
  corrupt_peer_ = std::move(address);
  corrupt_armed_.store(true, std::memory_order_release);
}

bool FaultInjector::take_corrupt(std::string_view peer_address) {
  if (!corrupt_armed_.load(std::memory_order_acquire)) return false;
  std::lock_guard lk(silence_mu_);
  if (!corrupt_armed_.load(std::memory_order_relaxed) || corrupt_peer_ != peer_address) return false;
  corrupt_armed_.store(false, std::memory_order_relaxed);
  corrupted_writes_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool FaultInjector::is_silenced(std::string_view peer_address) const {
  std::lock_guard lk(silence_mu_);
  return silent_all_ ||
         std::find(silent_peers_.begin(), silent_peers_.end(), peer_address) != silent_peers_.end();
}

void FaultInjector::clear() {
  connect_delay_ns_.store(0);
  accept_delay_ns_.store(0);
  completion_delay_ns_.store(0);
  drop_budget_.store(0);
  fail_at_post_.store(0);
  std::lock_guard lk(silence_mu_);
  silent_all_ = false;
  silent_peers_.clear();
  breaks_.clear();
  corrupt_armed_.store(false);
  silence_gen_.fetch_add(1, std::memory_order_release);
}

FaultCounters FaultInjector::counters() const {
  FaultCounters c;
  c.connects = connects_.load();
  c.accepts = accepts_.load();
  c.posts = posts_.load();
  c.failed_posts = failed_posts_.load();
  c.swallowed_posts = swallowed_posts_.load();
  c.dropped_completions = dropped_completions_.load();
  c.closes = closes_.load();
  c.broken_links = broken_links_.load();
  c.corrupted_writes = corrupted_writes_.load();
  return c;
}

FaultProvider::FaultProvider(std::unique_ptr<Provider> inner, std::shared_ptr<FaultInjector> faults)
    : inner_(std::move(inner)), faults_(std::move(faults)) {}

Result<std::unique_ptr<Listener>> FaultProvider::listen(std::string_view address, const EndpointConfig& cfg) {
  auto l = inner_->listen(address, cfg);
  if (!l) return l.error();
  return std::unique_ptr<Listener>(std::make_unique<FaultListener>(std::move(l.value()), faults_));
}

Result<std::unique_ptr<Endpoint>> FaultProvider::connect(std::string_view address, const EndpointConfig& cfg,
                                                         std::chrono::milliseconds timeout) {
  faults_->on_connect();
  const auto timeout_ns = std::chrono::nanoseconds(timeout);
  const auto delay = std::chrono::nanoseconds(faults_->connect_delay_ns());
  const bool silent = faults_->is_silenced(address);
  if (silent || delay >= timeout_ns) {
    faults_->clock().sleep_for(timeout_ns);
    return make_error(Errc::timeout, "connect to " + std::string(address) + " timed out after " +
                                         std::to_string(timeout.count()) + " ms (fault injected)");
  }
  faults_->clock().sleep_for(delay);
  auto ep = inner_->connect(address, cfg,
                            std::chrono::duration_cast<std::chrono::milliseconds>(timeout_ns - delay));
  if (!ep) return ep.error();
  return std::unique_ptr<Endpoint>(
      std::make_unique<FaultEndpoint>(std::move(ep.value()), faults_, std::string(address), inner_.get()));
}

Result<std::unique_ptr<Provider>> open_fault_provider(std::string_view spec, const ProviderOptions& options) {
  auto faults = std::make_shared<FaultInjector>();
  if (spec.starts_with("(")) {
    const auto close = spec.find(')');
    if (close == std::string_view::npos) {
      return make_error(Errc::invalid_argument, "fault provider options need a closing ')'");
    }
    std::string_view opts = spec.substr(1, close - 1);
    spec.remove_prefix(close + 1);
    while (!opts.empty()) {
      const auto comma = opts.find(',');
      std::string_view opt = opts.substr(0, comma);
      opts = comma == std::string_view::npos ? std::string_view{} : opts.substr(comma + 1);
      const auto eq = opt.find('=');
      if (eq == std::string_view::npos) {
        return make_error(Errc::invalid_argument,
                          "fault provider option '" + std::string(opt) + "' needs '='");
      }
      auto v = parse_number(opt.substr(eq + 1));
      if (!v) return v.error();
      const std::string_view key = opt.substr(0, eq);
      if (key == "connect_delay_ms") {
        faults->set_connect_delay(std::chrono::milliseconds(v.value()));
      } else if (key == "accept_delay_ms") {
        faults->set_accept_delay(std::chrono::milliseconds(v.value()));
      } else if (key == "completion_delay_us") {
        faults->set_completion_delay(std::chrono::microseconds(v.value()));
      } else {
        return make_error(Errc::invalid_argument,
                          "unknown fault provider option '" + std::string(key) +
                              "' (expected connect_delay_ms, accept_delay_ms or completion_delay_us)");
      }
    }
  }
  if (!spec.starts_with(":") || spec.size() < 2) {
    return make_error(Errc::invalid_argument, "fault provider spec needs an inner provider: 'fault:<inner>'");
  }
  auto inner = Provider::open(spec.substr(1), options);
  if (!inner) return inner.error();
  return std::unique_ptr<Provider>(
      std::make_unique<FaultProvider>(std::move(inner.value()), std::move(faults)));
}

}  // namespace catena::fabric
