#include "soft/core.hpp"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
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
  // kept: a named range of a kept arena, whose bytes stay when it goes.
  SoftMemoryRegion(std::shared_ptr<Core> core, std::uint64_t offset, std::size_t size, std::uint32_t key,
                   std::uint32_t access, DomainId domain, bool kept = false)
      : MemoryRegion(domain),
        core_(std::move(core)),
        offset_(offset),
        size_(size),
        key_(key),
        access_(access),
        kept_(kept) {}
  ~SoftMemoryRegion() override { core_->free_region(offset_, size_, key_, kept_); }

  [[nodiscard]] std::byte* data() const noexcept override { return core_->view().base + offset_; }
  [[nodiscard]] std::size_t size() const noexcept override { return size_; }
  [[nodiscard]] std::uint32_t lkey() const noexcept override { return key_; }
  [[nodiscard]] std::uint32_t access() const noexcept override { return access_; }
  [[nodiscard]] const Core* core() const noexcept { return core_.get(); }
  [[nodiscard]] std::uint64_t offset() const noexcept { return offset_; }

 private:
  std::shared_ptr<Core> core_;
  std::uint64_t offset_;
  std::size_t size_;
  std::uint32_t key_;
  std::uint32_t access_;
  bool kept_;
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
    } else if (item.starts_with("huge=")) {
      const std::string_view mib = item.substr(5);
      std::uint64_t v = 0;
      const auto [end, ec] = std::from_chars(mib.data(), mib.data() + mib.size(), v);
      if (ec != std::errc{} || end != mib.data() + mib.size() || v < kMinHugeArenaBytes >> 20 ||
          v > kDefaultArenaSize >> 20) {
        return make_error(Errc::invalid_argument, "soft provider option '" + std::string(item) +
                                                      "': huge=<MiB> takes " +
                                                      std::to_string(kMinHugeArenaBytes >> 20) + " to " +
                                                      std::to_string(kDefaultArenaSize >> 20) + " MiB");
      }
      o.huge_bytes = ((v << 20) + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
    } else if (item.starts_with("warm=")) {
      const std::string_view mib = item.substr(5);
      std::uint64_t v = 0;
      const auto [end, ec] = std::from_chars(mib.data(), mib.data() + mib.size(), v);
      if (ec != std::errc{} || end != mib.data() + mib.size() || v > kDefaultArenaSize >> 20) {
        return make_error(Errc::invalid_argument, "soft provider option '" + std::string(item) +
                                                      "': warm=<MiB> takes 0 to " +
                                                      std::to_string(kDefaultArenaSize >> 20) + " MiB");
      }
      o.warm_bytes = v << 20;
    } else {
      return make_error(Errc::invalid_argument,
                        "unknown soft provider option '" + std::string(item) +
                            "' (expected 'tcp', 'shm', 'auto', 'host=<id>', 'huge=<MiB>' or 'warm=<MiB>')");
    }
  }
  return o;
}

bool wait_quiescent(AccessGuard& g, std::chrono::steady_clock::time_point deadline) {
  const std::uint64_t b = g.busy->load(std::memory_order_seq_cst);
  if ((b & 1) == 0) {
    return true;
  }
  if (g.stalled.load(std::memory_order_relaxed) == b) {
    return false;  // cut off already, still in the same access
  }
  for (std::uint32_t spins = 0; g.busy->load(std::memory_order_acquire) == b; ++spins) {
    if (spins < 4096) {
      cpu_relax();
      continue;
    }
    if ((spins & 1023) == 0) {
      if (g.peer_pid != 0 && process_gone(g.peer_pid)) {
        return true;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        g.stalled.store(b, std::memory_order_relaxed);
        return false;
      }
    }
    std::this_thread::yield();
  }
  return true;
}

Result<std::shared_ptr<Core>> Core::create(const Options& options) {
  std::shared_ptr<Core> c(new Core());
  c->options_ = options;
  c->host_id_ = options.host_id.empty() ? host_identity() : options.host_id;
  if (options.huge_bytes != 0 && !options.keep_dir.empty()) {
    return make_error(
        Errc::invalid_argument,
        "soft provider: huge= does not go with a keep directory (a kept arena is a file there)");
  }
  auto arena = options.huge_bytes != 0 ? Arena::create_huge(options.huge_bytes)
                                       : Arena::create(kDefaultArenaSize, options.keep_dir);
  if (!arena) {
    return arena.error();
  }
  c->arena_ = std::move(arena.value());
  c->arena_->set_warm_limit(options.warm_bytes);
  auto manager = ConnectionManager::create();
  if (!manager) {
    return manager.error();
  }
  c->manager_ = std::move(manager.value());
  return c;
}

Result<std::unique_ptr<MemoryRegion>> Core::allocate(std::size_t size, std::uint32_t access,
                                                     DomainId domain) {
  if (size == 0) {
    return make_error(Errc::invalid_argument, "cannot allocate a zero-byte region");
  }
  if ((access & ~kAllAccess) != 0) {
    return make_error(Errc::invalid_argument, "unknown access bits " + std::to_string(access));
  }
  bool warm = false;
  auto off = arena_->allocate_range(size, &warm);
  if (!off) {
    return off.error();
  }
  // The region's own key (its lkey) carries no remote rights: peers get
  // those only through Endpoint::expose, bound to their connection.
  auto key = arena_->register_region(off.value(), size, access & kLocalWrite, 0);
  if (!key) {
    arena_->free_range(off.value(), size);
    return key.error();
  }
  if (!warm) arena_->prefault(off.value(), size);
  return std::unique_ptr<MemoryRegion>(
      std::make_unique<SoftMemoryRegion>(shared_from_this(), off.value(), size, key.value(), access, domain));
}

Result<KeptRegion> Core::allocate_kept(std::string_view name, std::size_t size, std::uint32_t access,
                                       DomainId domain) {
  if (size == 0) {
    return make_error(Errc::invalid_argument, "cannot allocate a zero-byte region");
  }
  if ((access & ~kAllAccess) != 0) {
    return make_error(Errc::invalid_argument, "unknown access bits " + std::to_string(access));
  }
  auto range = arena_->allocate_kept(std::string(name), size);
  if (!range) {
    return range.error();
  }
  auto key = arena_->register_region(range.value().offset, size, access & kLocalWrite, 0);
  if (!key) {
    return key.error();  // the range keeps its name and bytes
  }
  KeptRegion out;
  out.region = std::make_unique<SoftMemoryRegion>(shared_from_this(), range.value().offset, size, key.value(),
                                                  access, domain, /*kept=*/true);
  out.kept = range.value().kept;
  return out;
}

void Core::free_region(std::uint64_t offset, std::uint64_t length, std::uint32_t key, bool kept) {
  std::vector<Exposure> exposed = take_exposures(offset, 0);
  exposed.push_back(Exposure{0, key});
  for (const Exposure& e : exposed) {
    arena_->revoke_key(e.key);
  }
  // Who can be inside an access to this region: the peers of the
  // connections its keys went to; any peer if it held receive buffers (a
  // send lands in one under the region's own key). Waiting for the guards
  // of every connection instead took ~1 ms a segment with 154 replicas a
  // node (a peer among hundreds was always inside an access, or preempted
  // in one, on shared cores).
  std::atomic<std::uint8_t>& receives = receives_[key & (kRegionTableCapacity - 1)];
  std::vector<std::uint64_t> conns;
  for (const Exposure& e : exposed) {
    if (e.conn != 0) conns.push_back(e.conn);
  }
  const bool quiet = quiesce(receives.load(std::memory_order_relaxed) != 0 ? nullptr : &conns);
  if (kept) {
    // The bytes stay for the name (Arena::discard_kept frees them). A peer
    // still inside an access after the wait may yet land its bytes there:
    // then the range is never handed out again once its name goes.
    if (!quiet) arena_->taint_kept(offset);
  } else if (quiet) {
    arena_->free_range(offset, length);
  } else {
    arena_->quarantine_range(offset, length);
  }
  receives.store(0, std::memory_order_relaxed);  // before the slot may take another region
  for (const Exposure& e : exposed) {
    arena_->release_key(e.key);
  }
}

// Removes and returns the keys of one region (conn 0) or of one connection
// (region_offset 0; no region starts at 0, the arena header does).
std::vector<Core::Exposure> Core::take_exposures(std::uint64_t region_offset, std::uint64_t conn) {
  std::vector<Exposure> out;
  std::lock_guard lock(exposures_mu_);
  std::erase_if(exposures_, [&](const auto& kv) {
    const bool match = region_offset != 0 ? kv.first.first == region_offset : kv.first.second == conn;
    if (match) {
      out.push_back(Exposure{kv.first.second, kv.second});
    }
    return match;
  });
  return out;
}

std::uint64_t Core::new_connection_tag() {
  std::uint64_t tag = 0;
  while (tag == 0) {
    tag = random_u64();
  }
  return tag;
}

Result<RemoteRegion> Core::expose(const MemoryRegion& mr, std::uint64_t conn) {
  const auto* region = dynamic_cast<const SoftMemoryRegion*>(&mr);
  if (region == nullptr || region->core() != this) {
    return make_error(Errc::invalid_argument, "cannot expose a region of another provider");
  }
  std::lock_guard lock(exposures_mu_);
  const auto where = std::make_pair(region->offset(), conn);
  if (auto it = exposures_.find(where); it != exposures_.end()) {
    return RemoteRegion{region->size(), it->second, 0};
  }
  auto key = arena_->register_region(region->offset(), region->size(),
                                     region->access() & (kRemoteWrite | kRemoteRead), conn);
  if (!key) {
    return key.error();
  }
  exposures_.emplace(where, key.value());
  return RemoteRegion{region->size(), key.value(), 0};
}

void Core::forget_connection(std::uint64_t conn) {
  // No wait: the regions stay allocated, so an access that resolved a key
  // before its revocation still lands in memory its owner expects it in.
  for (const Exposure& e : take_exposures(0, conn)) {
    arena_->revoke_key(e.key);
    arena_->release_key(e.key);
  }
}

void Core::add_guard(AccessGuard* g) {
  std::lock_guard lock(guards_mu_);
  guards_.push_back(g);
}

void Core::remove_guard(std::unique_ptr<AccessGuard> g, std::shared_ptr<const void> keep_alive) {
  std::lock_guard lock(guards_mu_);
  guards_.erase(std::remove(guards_.begin(), guards_.end(), g.get()), guards_.end());
  const std::uint64_t stalled = g->stalled.load(std::memory_order_relaxed);
  if (stalled != 0 && g->busy->load(std::memory_order_acquire) == stalled &&
      !(g->peer_pid != 0 && process_gone(g->peer_pid))) {
    stalled_.push_back(StalledGuard{std::move(g), std::move(keep_alive)});
  }
}

bool Core::quiesce(const std::vector<std::uint64_t>* conns) {
  const auto deadline = std::chrono::steady_clock::now() + kRevokeWait;
  bool quiet = true;
  std::lock_guard lock(guards_mu_);
  for (AccessGuard* g : guards_) {
    if (conns != nullptr && g->conn != 0 && std::find(conns->begin(), conns->end(), g->conn) == conns->end())
      continue;  // that peer holds no key to what was revoked
    quiet = wait_quiescent(*g, deadline) && quiet;
  }
  // Peers cut off earlier: still inside (no wait, they were given up on),
  // or gone from that access at last (forgotten).
  std::erase_if(stalled_, [&](StalledGuard& s) {
    const bool left = wait_quiescent(*s.guard, deadline);
    quiet = quiet && left;
    return left;
  });
  return quiet;
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
