// State shared by everything a soft provider creates: its options, arena,
// connection manager, the peers' arenas it has mapped, and the registry of
// access guards that makes deregistration and disconnect exact.
//
// Access guards: anything that may copy into or out of this provider's
// registered memory without holding a lock — a same-host peer's initiator
// working in our arena, or our own TCP progress engine — publishes a `busy`
// counter that is odd while it is inside. It makes the counter odd and only
// then checks keys and tokens, all with sequentially consistent operations.
// Whoever revokes access (frees a region, disconnects) clears the key/token
// the same way, then waits for every guard to leave the section it may be
// in. Either the accessor sees the revocation or the revoker sees it inside;
// afterwards no byte can move (Dekker's protocol: one locked store per
// operation, no shared lock, no standalone fence).
//
// Lifecycle: a Core is shared by the Provider object, its memory regions,
// listeners and endpoints, so it lives until the last of them is gone.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <utility>
#include <vector>

#include <catena/fabric/fabric.hpp>

#include "soft/arena.hpp"
#include "soft/conn_manager.hpp"

namespace catena::fabric::soft {

enum class Mode : std::uint8_t { automatic = 0, tcp = 1, shm = 2 };

struct Options {
  Mode mode = Mode::automatic;
  // Overrides the host identity (normally the boot id). Two providers with
  // different ids never use shared memory with each other: lets one box
  // stand in for two hosts.
  std::string host_id;
  // Provider::open's ProviderOptions::keep_dir: the arena is kept there.
  std::string keep_dir;
  // `huge=<MiB>`: the arena is that much memory on 2 MiB huge pages,
  // reserved from the kernel's pool (vm.nr_hugepages) when the provider
  // opens, instead of a sparse 64 GiB of 4 KiB pages. Fewer TLB misses for
  // a node holding many replicas; a pool too small is an error at open.
  std::uint64_t huge_bytes = 0;
  // `warm=<MiB>`: freed memory kept zeroed with its pages, and spares made
  // ahead, up to this much (arena.hpp, Warm memory; 0: none).
  std::uint64_t warm_bytes = kDefaultWarmBytes;
};

// "", "tcp", "shm", each optionally followed by ",host=<id>", ",huge=<MiB>",
// ",warm=<MiB>".
Result<Options> parse_options(std::string_view text);

// How long a revocation waits for a peer to leave an access it is in. A
// peer still inside after this (stopped, or starved of CPU that long) is
// cut off: its connection breaks, and memory it may still be copying into
// or out of is never reused (Arena::quarantine_range).
inline constexpr std::chrono::milliseconds kRevokeWait{1000};

struct AccessGuard {
  AccessGuard(const std::atomic<std::uint64_t>* b, pid_t pid, std::uint64_t c)
      : busy(b), peer_pid(pid), conn(c) {}
  const std::atomic<std::uint64_t>* busy;
  pid_t peer_pid;  // accessor's process if it is a peer (0: a thread of ours)
  // The connection whose tag the accessor's keys carry (a same-host peer's:
  // our channel's token), or 0: it may reach any region (our TCP progress).
  std::uint64_t conn;
  // The busy value a revocation gave up waiting on (0: none): the peer is
  // cut off, and later revocations do not wait for that access again.
  std::atomic<std::uint64_t> stalled{0};
};

// Waits until the guard is outside the section it was in when called (or
// its process is gone): true. False if it is still inside at `deadline`
// (the guard is then marked stalled). The caller has revoked access
// (seq_cst) before.
bool wait_quiescent(AccessGuard& g, std::chrono::steady_clock::time_point deadline);

class Core : public std::enable_shared_from_this<Core> {
 public:
  static Result<std::shared_ptr<Core>> create(const Options& options);

  [[nodiscard]] const Options& options() const noexcept { return options_; }
  [[nodiscard]] const std::string& host_id() const noexcept { return host_id_; }
  [[nodiscard]] Arena& arena() noexcept { return *arena_; }
  [[nodiscard]] const ArenaView& view() const noexcept { return arena_->view(); }
  [[nodiscard]] ConnectionManager& manager() noexcept { return *manager_; }

  Result<std::unique_ptr<MemoryRegion>> allocate(std::size_t size, std::uint32_t access, DomainId domain);
  // Provider::allocate_kept (the arena must have a keep directory).
  Result<KeptRegion> allocate_kept(std::string_view name, std::size_t size, std::uint32_t access,
                                   DomainId domain);

  // Registers/unregisters a guard (stable address required). A guard that
  // is still inside the access a revocation gave up on is kept (with
  // `keep_alive`) and waited on by later revocations until its peer leaves
  // or dies: memory that peer may write is then quarantined, not reused.
  void add_guard(AccessGuard* g);
  void remove_guard(std::unique_ptr<AccessGuard> g, std::shared_ptr<const void> keep_alive);
  // Waits until no guard is inside an access section it may have entered
  // before the caller's revocation, for at most kRevokeWait. False if one
  // still is: the caller must not reuse what it revoked. With `conns`, only
  // the guards of those connections, those of no one connection (conn 0)
  // and the stalled ones: what can reach a region whose keys went to those
  // connections alone.
  [[nodiscard]] bool quiesce(const std::vector<std::uint64_t>* conns = nullptr);

  // A fresh random tag naming one connection in the keys given to its peer.
  static std::uint64_t new_connection_tag();
  // Endpoint::expose for the endpoint whose peer checks accesses against
  // `conn`: the region's key for that connection, made on first use.
  Result<RemoteRegion> expose(const MemoryRegion& mr, std::uint64_t conn);
  // Revokes every key given to connection `conn` (its endpoint is going).
  void forget_connection(std::uint64_t conn);

  // A receive was posted into the region whose own key is `key`: a peer's
  // send lands there under that key, which names no connection, so freeing
  // it waits for every guard. Once per region in effect (a byte per region
  // table slot, looked at first); on the data path.
  void note_receives(std::uint32_t key) noexcept {
    std::atomic<std::uint8_t>& f = receives_[key & (kRegionTableCapacity - 1)];
    if (f.load(std::memory_order_relaxed) == 0) f.store(1, std::memory_order_relaxed);
  }

  // Maps a same-host peer's arena, or shares an existing mapping of it.
  Result<std::shared_ptr<PeerArena>> peer_arena(const ArenaIdentity& id);

 private:
  friend class SoftMemoryRegion;
  Core() = default;
  void free_region(std::uint64_t offset, std::uint64_t length, std::uint32_t key, bool kept);
  struct Exposure {
    std::uint64_t conn;
    std::uint32_t key;
  };
  std::vector<Exposure> take_exposures(std::uint64_t region_offset, std::uint64_t conn);

  // Declared in creation order: the manager thread stops before the arena
  // it may still be touching through a handshake is unmapped.
  Options options_;
  std::string host_id_;
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<ConnectionManager> manager_;

  std::mutex guards_mu_;
  std::vector<AccessGuard*> guards_;
  struct StalledGuard {
    std::unique_ptr<AccessGuard> guard;
    std::shared_ptr<const void> keep_alive;
  };
  std::vector<StalledGuard> stalled_;  // unregistered, peer still inside

  // By region table slot: the region there held receive buffers.
  std::unique_ptr<std::atomic<std::uint8_t>[]> receives_ =
      std::make_unique<std::atomic<std::uint8_t>[]>(kRegionTableCapacity);

  // (region offset, connection tag) -> key given to that connection.
  std::mutex exposures_mu_;
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint32_t> exposures_;

  std::mutex peers_mu_;
  std::map<std::pair<pid_t, std::uint64_t>, std::weak_ptr<PeerArena>> peers_;
};

// An AccessGuard registered with a Core for as long as this object lives.
// `keep_alive` holds what `busy` lives in (a peer's arena mapping): a guard
// that is still stalled when its registration goes stays with the Core
// (Core::remove_guard) and must stay readable.
class GuardRegistration {
 public:
  GuardRegistration(Core& core, const std::atomic<std::uint64_t>* busy, pid_t peer_pid, std::uint64_t conn,
                    std::shared_ptr<const void> keep_alive = {})
      : core_(core),
        guard_(std::make_unique<AccessGuard>(busy, peer_pid, conn)),
        keep_alive_(std::move(keep_alive)) {
    core_.add_guard(guard_.get());
  }
  ~GuardRegistration() { core_.remove_guard(std::move(guard_), std::move(keep_alive_)); }
  GuardRegistration(const GuardRegistration&) = delete;
  GuardRegistration& operator=(const GuardRegistration&) = delete;
  [[nodiscard]] AccessGuard& guard() const noexcept { return *guard_; }

 private:
  Core& core_;
  std::unique_ptr<AccessGuard> guard_;
  std::shared_ptr<const void> keep_alive_;
};

}  // namespace catena::fabric::soft
