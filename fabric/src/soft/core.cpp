#include "soft/core.hpp"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <thread>

#include <catena/fabric/idle.hpp>

#include "soft/net.hpp"

namespace catena::fabric::soft {
namespace {

constexpr std::uint32_t kAllAccess = kLocalWrite | kRemoteWrite | kRemoteRead;

// A dead peer cannot finish the access it was in; a zombie counts as dead.
bool process_gone(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) {
    return true;
  }
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  auto paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) {
    return true;
  }
  char state = line[paren + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace

// A region of the provider's arena, registered under its own key. Destroying
// it revokes the key, waits out accesses in flight, then drops the pages.
class SoftMemoryRegion final : public MemoryRegion {
 public:
  SoftMemoryRegion(std::shared_ptr<Core> core, std::uint64_t offset, std::size_t size, std::uint32_t key,
                   std::uint32_t access)
      : core_(std::move(core)), offset_(offset), size_(size), key_(key), access_(access) {}
  ~SoftMemoryRegion() override { core_->free_region(offset_, size_, key_); }

  [[nodiscard]] std::byte* data() const noexcept override { return core_->view().base + offset_; }
  [[nodiscard]] std::size_t size() const noexcept override { return size_; }
  [[nodiscard]] std::uint32_t lkey() const noexcept override { return key_; }
  [[nodiscard]] std::uint32_t access() const noexcept override { return access_; }
  [[nodiscard]] RemoteRegion remote() const noexcept override { return RemoteRegion{offset_, size_, key_}; }

 private:
  std::shared_ptr<Core> core_;
  std::uint64_t offset_;
  std::size_t size_;
  std::uint32_t key_;
  std::uint32_t access_;
};

Result<Options> parse_options(std::string_view text) {
  Options o;
  bool mode_seen = false;
  while (!text.empty()) {
    auto comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (!mode_seen && (item == "tcp" || item == "shm" || item == "auto")) {
      o.mode = item == "tcp" ? Mode::tcp : item == "shm" ? Mode::shm : Mode::automatic;
      mode_seen = true;
    } else if (item.starts_with("host=") && item.size() > 5) {
      o.host_id = std::string(item.substr(5));
    } else {
      return make_error(Errc::invalid_argument, "unknown soft provider option '" + std::string(item) +
                                                    "' (expected 'tcp', 'shm', 'auto' or 'host=<id>')");
    }
  }
  return o;
}

void wait_quiescent(const AccessGuard& g) {
  const std::uint64_t b = g.busy->load(std::memory_order_seq_cst);
  if ((b & 1) == 0) {
    return;
  }
  for (std::uint32_t spins = 0; g.busy->load(std::memory_order_acquire) == b; ++spins) {
    if (spins < 4096) {
      cpu_relax();
    } else if (g.peer_pid != 0 && (spins & 1023) == 0 && process_gone(g.peer_pid)) {
      return;
    } else {
      std::this_thread::yield();
    }
  }
}

Result<std::shared_ptr<Core>> Core::create(const Options& options) {
  std::shared_ptr<Core> c(new Core());
  c->options_ = options;
  c->host_id_ = options.host_id.empty() ? host_identity() : options.host_id;
  auto arena = Arena::create(kDefaultArenaSize);
  if (!arena) {
    return arena.error();
  }
  c->arena_ = std::move(arena.value());
  auto manager = ConnectionManager::create();
  if (!manager) {
    return manager.error();
  }
  c->manager_ = std::move(manager.value());
  return c;
}

Result<std::unique_ptr<MemoryRegion>> Core::allocate(std::size_t size, std::uint32_t access) {
  if (size == 0) {
    return make_error(Errc::invalid_argument, "cannot allocate a zero-byte region");
  }
  if ((access & ~kAllAccess) != 0) {
    return make_error(Errc::invalid_argument, "unknown access bits " + std::to_string(access));
  }
  auto off = arena_->allocate_range(size);
  if (!off) {
    return off.error();
  }
  auto key = arena_->register_region(off.value(), size, access);
  if (!key) {
    arena_->free_range(off.value(), size);
    return key.error();
  }
  return std::unique_ptr<MemoryRegion>(
      std::make_unique<SoftMemoryRegion>(shared_from_this(), off.value(), size, key.value(), access));
}

void Core::free_region(std::uint64_t offset, std::uint64_t length, std::uint32_t key) {
  arena_->revoke_key(key);
  quiesce();
  arena_->free_range(offset, length);
  arena_->release_key(key);
}

void Core::add_guard(const AccessGuard* g) {
  std::lock_guard lock(guards_mu_);
  guards_.push_back(g);
}

void Core::remove_guard(const AccessGuard* g) {
  std::lock_guard lock(guards_mu_);
  guards_.erase(std::remove(guards_.begin(), guards_.end(), g), guards_.end());
}

void Core::quiesce() {
  std::lock_guard lock(guards_mu_);
  for (const AccessGuard* g : guards_) {
    wait_quiescent(*g);
  }
}

Result<std::shared_ptr<PeerArena>> Core::peer_arena(const ArenaIdentity& id) {
  std::lock_guard lock(peers_mu_);
  auto key = std::make_pair(id.pid, id.nonce[0]);
  if (auto it = peers_.find(key); it != peers_.end()) {
    if (auto p = it->second.lock(); p && p->identity().nonce[1] == id.nonce[1]) {
      return p;
    }
  }
  auto p = PeerArena::map(id);
  if (!p) {
    return p.error();
  }
  // Forget mappings whose endpoints are all gone.
  std::erase_if(peers_, [](const auto& kv) { return kv.second.expired(); });
  peers_[key] = p.value();
  return p;
}

}  // namespace catena::fabric::soft
