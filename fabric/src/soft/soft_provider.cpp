// The soft provider: RDMA RC semantics in userspace, for kernels without
// RDMA. Same-host peers share memory (shm_endpoint.hpp), others talk TCP
// (tcp_endpoint.hpp); the handshake picks per connection (handshake.hpp).
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <sys/socket.h>
#include <utility>

#include <catena/fabric/fabric.hpp>

#include "soft/core.hpp"
#include "soft/handshake.hpp"
#include "soft/net.hpp"

namespace catena::fabric {
namespace soft {
namespace {

// Accepts connections in the connection manager and runs their handshakes
// there, so a peer's connect() completes even before accept() is called;
// accept() hands out the endpoints (or refusals) in arrival order.
class SoftListener final : public Listener, private Watcher {
 public:
  static Result<std::unique_ptr<Listener>> create(std::shared_ptr<Core> core, UniqueFd fd,
                                                  const EndpointConfig& cfg) {
    std::unique_ptr<SoftListener> l(new SoftListener(std::move(core), std::move(fd), cfg));
    if (auto r = l->core_->manager().add(l->fd_.get(), EPOLLIN, l.get()); !r) {
      return r.error();
    }
    return std::unique_ptr<Listener>(std::move(l));
  }

  ~SoftListener() override {
    core_->manager().remove(watch_token());
    // No new handshakes now; end the running ones (each waits for its own
    // callback) before dropping what they may still deliver.
    std::list<std::unique_ptr<ServerHandshake>> running;
    {
      std::lock_guard lock(mu_);
      running.swap(handshakes_);
    }
    running.clear();
    std::lock_guard lock(mu_);
    ready_.clear();
  }

  [[nodiscard]] std::string address() const override { return address_; }

 protected:
  // The handshake has connected the endpoint already; a peer's SEND waits in
  // its ring until a receive is posted (the soft provider's RNR retry has no
  // limit), so running before_accept before handing it out is all it takes.
  Result<std::unique_ptr<Endpoint>> accept_one(std::chrono::milliseconds timeout,
                                               const BeforeAccept& before_accept) override {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !ready_.empty(); })) {
      return make_error(Errc::timeout, "no connection on " + address_ + " within " +
                                           std::to_string(timeout.count()) + " ms");
    }
    auto r = std::move(ready_.front());
    ready_.pop_front();
    lock.unlock();
    if (r && before_accept) {
      if (Errc e = before_accept(*r.value()); e != Errc::ok) {
        return make_error(e, "connection from " + r.value()->peer_address() +
                                 " refused before accept: " + std::string(to_string(e)));
      }
    }
    return r;
  }

 private:
  static constexpr std::size_t kMaxBacklog = 1024;

  SoftListener(std::shared_ptr<Core> core, UniqueFd fd, const EndpointConfig& cfg)
      : core_(std::move(core)), fd_(std::move(fd)), cfg_(cfg), address_(local_name(fd_.get())) {}

  void on_ready(std::uint32_t) override {
    std::lock_guard lock(mu_);
    handshakes_.remove_if([](const auto& h) { return h->finished(); });
    for (;;) {
      UniqueFd conn(accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (conn.get() < 0) {
        return;
      }
      if (ready_.size() + handshakes_.size() >= kMaxBacklog) {
        continue;  // closes it: nobody accepts
      }
      auto h = std::make_unique<ServerHandshake>(core_, std::move(conn), cfg_,
                                                 [this](Result<std::unique_ptr<Endpoint>> outcome) {
                                                   {
                                                     std::lock_guard l(mu_);
                                                     ready_.push_back(std::move(outcome));
                                                   }
                                                   cv_.notify_one();
                                                 });
      if (h->start()) {
        handshakes_.push_back(std::move(h));
      }
    }
  }

  std::shared_ptr<Core> core_;
  UniqueFd fd_;
  EndpointConfig cfg_;
  std::string address_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Result<std::unique_ptr<Endpoint>>> ready_;
  std::list<std::unique_ptr<ServerHandshake>> handshakes_;
};

class SoftProvider final : public Provider {
 public:
  explicit SoftProvider(std::shared_ptr<Core> core) : core_(std::move(core)) {}

  [[nodiscard]] std::string name() const override {
    switch (core_->options().mode) {
      case Mode::tcp:
        return "soft:tcp";
      case Mode::shm:
        return "soft:shm";
      default:
        return "soft";
    }
  }

  Result<std::unique_ptr<MemoryRegion>> allocate_region(std::size_t size, std::uint32_t access,
                                                        DomainId domain) override {
    return core_->allocate(size, access, domain);
  }
  Result<KeptRegion> allocate_kept_region(std::string_view name, std::size_t size, std::uint32_t access,
                                          DomainId domain) override {
    return core_->allocate_kept(name, size, access, domain);
  }
  [[nodiscard]] std::vector<std::string> kept_names() const override { return core_->arena().kept_names(); }
  [[nodiscard]] std::int64_t warm_bytes() const noexcept override {
    const Arena& a = core_->arena();
    return static_cast<std::int64_t>(a.warm_bytes() + a.spare_bytes_pending());
  }
  void discard_kept(std::string_view name) override { core_->arena().discard_kept(std::string(name)); }

  Result<std::unique_ptr<Listener>> listen(std::string_view address, const EndpointConfig& cfg) override {
    auto addr = parse_address(address);
    if (!addr) {
      return addr.error();
    }
    auto fd = listen_on(addr.value());
    if (!fd) {
      return fd.error();
    }
    return SoftListener::create(core_, std::move(fd.value()), cfg);
  }

  Result<std::unique_ptr<Endpoint>> connect(std::string_view address, const EndpointConfig& cfg,
                                            std::chrono::milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    auto addr = parse_address(address);
    if (!addr) {
      return addr.error();
    }
    auto fd = connect_to(addr.value(), deadline);
    if (!fd) {
      return fd.error();
    }
    return client_handshake(core_, std::move(fd.value()), cfg, deadline);
  }

  void settle() override { core_->manager().sync(); }

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace
}  // namespace soft

Result<std::unique_ptr<Provider>> open_soft_provider(std::string_view options,
                                                     const ProviderOptions& provider_options) {
  auto opts = soft::parse_options(options);
  if (!opts) {
    return opts.error();
  }
  opts.value().keep_dir = provider_options.keep_dir;
  auto core = soft::Core::create(opts.value());
  if (!core) {
    return core.error();
  }
  return std::unique_ptr<Provider>(std::make_unique<soft::SoftProvider>(std::move(core.value())));
}

}  // namespace catena::fabric
