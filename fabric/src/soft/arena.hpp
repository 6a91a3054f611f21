// The soft provider's registered memory: one shareable arena per provider.
//
// An Arena is a memfd mapped MAP_SHARED, sized large and sparse (pages
// materialise on first touch). Every MemoryRegion the provider hands out is a
// page-aligned range of it, so a same-host peer that maps the same memfd can
// reach any region by its arena offset. The arena also holds the region table
// (key, access, offset, length per region); a peer checks a remote access
// against that table before it copies a byte, which is what an RDMA NIC does
// with an rkey. The owner writes the table; peers only read it.
//
// Warm memory: a freed range larger than kWarmRangeBytes is zeroed in place
// and kept with its pages (in this process and in every peer that maps the
// arena), up to the warm limit (set_warm_limit()), instead of being
// punched out; the next allocation that fits takes it without a page fault
// anywhere. And after a
// large allocation of a size allocated before (a partition's segments, not a
// client's one ring) the populator makes a spare of that size when no warm
// range would serve another (within the limit): memory populated ahead, so
// that a partition taking one more segment than it had (its rate grew)
// writes into present pages instead of stalling its node's data thread on
// thousands of first-touch faults (0.2-0.4 s for 64 MiB on three replicas
// on 2 cores). Memfd arenas with a populator only (not kept arenas: their
// frees are synchronous). What is warm stays resident until an allocation
// takes it: at most the limit (Options::warm_bytes, `soft:warm=<MiB>`).
//
// Lifecycle: created by the provider at open, destroyed when the provider and
// everything allocated from it are gone. Allocation and key management are
// setup-path operations guarded by a mutex; ArenaView::resolve() is the
// lock-free hot-path check and may run on any thread or process.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <sys/types.h>
#include <vector>

#include <catena/fabric/result.hpp>

#include "soft/populator.hpp"

namespace catena::fabric::soft {

inline constexpr std::uint64_t kPageSize = 4096;
inline constexpr std::uint32_t kArenaMagic = 0x41544143;  // "CATA"
inline constexpr std::uint32_t kArenaVersion = 1;
inline constexpr std::uint32_t kRegionTableCapacity = 1u << 16;
inline constexpr std::uint64_t kDefaultArenaSize = 64ull << 30;
// Warm memory an arena keeps by default (Arena, Warm memory): four of the
// default 64 MiB segments.
inline constexpr std::uint64_t kDefaultWarmBytes = 256ull << 20;
inline constexpr std::uint64_t kMinArenaSize = 1ull << 30;
// An arena on huge pages (Arena::create_huge): 2 MiB pages, all of it
// reserved up front, at least this much.
inline constexpr std::uint64_t kHugePageBytes = 2ull << 20;
inline constexpr std::uint64_t kMinHugeArenaBytes = 64ull << 20;
// Header page, then the region table; regions and channels from kDataOffset.
// Peers map [0, kDataOffset) read-only.
inline constexpr std::uint64_t kTableOffset = kPageSize;
inline constexpr std::uint64_t kDataOffset = 4ull << 20;

// One key as peers see it: a region's own key (its lkey: no remote rights,
// `conn` 0) or one grant of a region to one connection (Endpoint::expose:
// the region's remote rights, `conn` the connection's tag). `key` is written
// last (release) on registration and cleared first on revocation; the other
// fields are only meaningful while a reader has seen its key match.
struct RegionEntry {
  std::atomic<std::uint32_t> key;  // 0: free; high 16 bits random
  std::atomic<std::uint32_t> access;
  std::atomic<std::uint64_t> offset;
  std::atomic<std::uint64_t> length;
  std::atomic<std::uint64_t> conn;  // the connection the key was given to (0: none)
};
static_assert(sizeof(RegionEntry) == 32);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "arena words are shared across processes");
static_assert(kTableOffset + kRegionTableCapacity * sizeof(RegionEntry) <= kDataOffset);

// First page of every arena: lets a peer check it mapped the file it meant to.
struct ArenaHeader {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint64_t nonce[2];
  std::uint64_t size;
  std::uint64_t table_offset;
  std::uint32_t table_capacity;
  std::uint32_t pid;
};

struct ArenaIdentity {
  std::uint64_t nonce[2] = {0, 0};
  std::uint64_t size = 0;
  pid_t pid = 0;
  int memfd = -1;
};

// A mapping of an arena (our own or a peer's) and the checks made against it.
struct ArenaView {
  std::byte* base = nullptr;
  std::uint64_t size = 0;
  const RegionEntry* table = nullptr;

  // The "NIC" check: the bytes [addr, addr+len) of a region (`addr` from
  // the region's start) if `key` is live, was given to connection `conn` (or
  // to none: a region's own key, which carries no remote rights), and grants
  // every bit of `need`; nullptr otherwise. Never trusts the table beyond the
  // mapping's size. The key is read sequentially consistent: it is one side
  // of the access guard protocol (core.hpp).
  [[nodiscard]] std::byte* resolve(std::uint32_t key, std::uint64_t addr, std::uint64_t len,
                                   std::uint32_t need, std::uint64_t conn) const noexcept {
    const RegionEntry& e = table[key & (kRegionTableCapacity - 1)];
    if (key == 0 || e.key.load(std::memory_order_seq_cst) != key) {
      return nullptr;
    }
    if ((e.access.load(std::memory_order_relaxed) & need) != need) {
      return nullptr;
    }
    const std::uint64_t owner = e.conn.load(std::memory_order_relaxed);
    if (owner != 0 && owner != conn) {
      return nullptr;
    }
    const std::uint64_t off = e.offset.load(std::memory_order_relaxed);
    const std::uint64_t rlen = e.length.load(std::memory_order_relaxed);
    if (off < kDataOffset || off > size || rlen > size - off) {
      return nullptr;
    }
    if (addr > rlen || len > rlen - addr) {
      return nullptr;
    }
    // Still the same key: the fields were not those of the slot's next use.
    if (e.key.load(std::memory_order_acquire) != key) {
      return nullptr;
    }
    return base + off + addr;
  }

  [[nodiscard]] bool contains(const void* p, std::uint64_t len) const noexcept {
    auto b = reinterpret_cast<std::uintptr_t>(base);
    auto q = reinterpret_cast<std::uintptr_t>(p);
    return q >= b && q - b <= size && len <= size - (q - b);
  }
};

// A named range of a kept arena (Arena::allocate_kept).
struct KeptRange {
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  bool kept = false;  // its bytes are the last process's
};

// The provider's own arena: memfd, mapping, allocator and region table.
//
// Kept mode (create with a keep directory, Provider::allocate_kept): the
// arena is the file `<dir>/arena` instead of a memfd, so it outlives the
// process, and `<dir>/regions` names the ranges to keep (one line each:
// offset, bytes, name). A process opening the directory again maps the same
// file, clears the header and the region table (every key of the last
// process is dead: the table is the NIC's), zeroes everything but the named
// ranges, and hands those out again by name with their bytes. One process
// at a time: the file is locked (flock) while mapped. The file cannot be
// sealed as a memfd is, so a same-host peer could shrink it: kept mode
// trusts its peers that far.
class Arena {
 public:
  static Result<std::unique_ptr<Arena>> create(std::uint64_t size, const std::string& keep_dir = {});
  // `bytes` (a multiple of kHugePageBytes) on 2 MiB huge pages of the
  // kernel's pool, every page reserved by the mapping (no MAP_NORESERVE: a
  // fault never finds the pool empty, which would be SIGBUS). Freed ranges
  // are zeroed in place: punching them out would hand their reservation
  // back to a pool other processes draw from.
  static Result<std::unique_ptr<Arena>> create_huge(std::uint64_t bytes);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  [[nodiscard]] const ArenaView& view() const noexcept { return view_; }
  [[nodiscard]] const ArenaIdentity& identity() const noexcept { return id_; }

  // Page-aligned, zeroed bytes of the arena (not registered). Returns the
  // arena offset; `*warm` (if given) says whether its pages are present
  // already (warm memory, above), so prefault() has nothing to do.
  Result<std::uint64_t> allocate_range(std::uint64_t bytes, bool* warm = nullptr);
  // Returns a range: its pages are dropped (so it reads as zeros again) and
  // it becomes reusable, on the populator's thread where there is one (not
  // allocatable until then). The caller has made sure nobody accesses it.
  void free_range(std::uint64_t offset, std::uint64_t bytes);
  // A range just handed out as a region: larger than kWarmRangeBytes, its
  // pages are faulted in on the populator's thread (populator.hpp), not by
  // the first writer. Not in kept mode (those ranges hold bytes already).
  void prefault(std::uint64_t offset, std::uint64_t bytes);

  // Channel blocks (shm_channel.hpp) are recycled only as channel blocks of
  // the same size, zeroed: a peer that still watches a block's busy word
  // after we let it go then reads 0 or a live counter, never user data.
  Result<std::uint64_t> allocate_channel_range(std::uint64_t bytes);

  // Warm memory (above): at most `bytes` of it, spares included (0: none;
  // what is warm beyond it stays until taken).
  void set_warm_limit(std::uint64_t bytes);
  // Bytes warm now (zeroed, present, free), and being made into a spare.
  [[nodiscard]] std::uint64_t warm_bytes() const;
  [[nodiscard]] std::uint64_t spare_bytes_pending() const;
  void free_channel_range(std::uint64_t offset, std::uint64_t bytes);

  // Publishes a key for [offset, offset+length) in the table, given to
  // connection `conn` (0: a region's own key). Its high 16 bits are random,
  // so a peer cannot guess another connection's key from its own.
  Result<std::uint32_t> register_region(std::uint64_t offset, std::uint64_t length, std::uint32_t access,
                                        std::uint64_t conn);
  // Clears the key: from now on resolve() fails for it. The slot is not
  // reused until release_key().
  void revoke_key(std::uint32_t key) noexcept;
  // Drops the range's pages (it reads as zeros) and never hands it out again:
  // for memory a stopped peer may still be copying into or out of.
  void quarantine_range(std::uint64_t offset, std::uint64_t bytes);
  void release_key(std::uint32_t key);

  // Kept mode only (invalid_argument otherwise). The range named `name`
  // (page-rounded `bytes`): the kept one if the directory names it with that
  // size, else a new zeroed one, written to the directory before it is
  // returned. The caller hands each name out once.
  Result<KeptRange> allocate_kept(const std::string& name, std::uint64_t bytes);
  // Zeroes and frees a named range and drops its name (unknown: no-op).
  // A tainted range is zeroed and quarantined instead.
  void discard_kept(const std::string& name);
  // The kept range at `offset` may still be written by a peer that did not
  // leave its access in time (Core::free_region): when its name goes, it is
  // quarantined, never handed out again.
  void taint_kept(std::uint64_t offset);
  [[nodiscard]] std::vector<std::string> kept_names() const;

 private:
  Arena() = default;
  // A fresh memfd arena's mapping of `size` bytes at `base`: seals the file
  // (unmapping on failure), takes the view and starts the populator.
  Result<void> adopt_memfd_mapping(void* base, std::uint64_t size);
  // The header, the region table and the free lists of a mapped arena.
  static Result<std::unique_ptr<Arena>> finish_create(std::unique_ptr<Arena> a, std::uint64_t size);
  void zero_range(std::uint64_t offset, std::uint64_t bytes);
  // free_range's work: zero, then back into free_ranges_.
  void finish_free(std::uint64_t offset, std::uint64_t bytes);
  // A freed range this small is zeroed in place and keeps its pages, for
  // the next allocation (first fit: soon) to use without page faults in
  // every process that maps it; a larger one gives its pages back.
  static constexpr std::uint64_t kWarmRangeBytes = 1 << 20;
  // Memory no one touched since it was punched or never was: a cold free
  // range, else the untouched end (under mu_).
  std::optional<std::uint64_t> take_cold_locked(std::uint64_t bytes);
  // allocate_range's work, under mu_ (`bytes` rounded to pages).
  Result<std::uint64_t> allocate_locked(std::uint64_t bytes, bool* warm);
  // After a large allocation: a spare of its size, unless one is being made
  // or a warm range would serve it, within the warm limit (under mu_).
  void maybe_make_spare_locked(std::uint64_t bytes);
  // The populator finished a spare (Populator::SpareFn).
  void take_spare(std::uint64_t offset, std::uint64_t bytes, bool populated);
  Result<void> open_kept_file(std::uint64_t size);
  Result<void> load_kept_directory();
  Result<void> save_kept_directory() const;
  // A named range whose name went: zeroed, and freed or (tainted) quarantined.
  void let_go_kept(std::uint64_t offset, std::uint64_t bytes);

  ArenaIdentity id_;
  ArenaView view_;
  RegionEntry* table_ = nullptr;

  mutable std::mutex mu_;
  std::map<std::uint64_t, std::uint64_t> free_ranges_;  // offset -> length, coalesced
  std::map<std::uint64_t, std::uint64_t> warm_ranges_;  // the same, for warm memory
  std::uint64_t warm_bytes_ = 0;     // in warm_ranges_, or reserved for a free being zeroed into it
  std::uint64_t warm_limit_ = 0;     // set_warm_limit(); 0 until a populator exists
  std::uint64_t spare_pending_ = 0;  // bytes of the spare the populator is making
  std::array<std::uint64_t, 8> recent_sizes_{};  // of large allocations, a ring
  std::size_t recent_next_ = 0;
  std::multimap<std::uint64_t, std::uint64_t> free_channels_;  // length -> offset
  std::uint64_t high_water_ = kDataOffset;
  std::deque<std::uint32_t> free_slots_;  // FIFO: a slot rests as long as possible before reuse

  // Kept mode: the directory, and name -> range (guarded by keep_mu_; taken
  // before mu_ where both are).
  std::string keep_dir_;
  bool huge_ = false;  // create_huge(): zero_range() writes zeros, never punches
  // memfd arenas only; stopped before the mapping goes.
  std::unique_ptr<Populator> populator_;
  mutable std::mutex keep_mu_;
  struct Named {
    std::uint64_t offset = 0;
    std::uint64_t bytes = 0;
  };
  std::map<std::string, Named> named_;
  std::set<std::uint64_t> tainted_;  // offsets of named ranges (taint_kept)
};

// A peer's arena mapped into this process (same host only). Shared by every
// endpoint to that peer; unmapped when the last one goes.
class PeerArena {
 public:
  // Opens /proc/<pid>/fd/<memfd>, maps it and checks the header names the
  // arena the peer announced (guards against pid reuse and pid namespaces).
  static Result<std::shared_ptr<PeerArena>> map(const ArenaIdentity& id);
  ~PeerArena();
  PeerArena(const PeerArena&) = delete;
  PeerArena& operator=(const PeerArena&) = delete;

  [[nodiscard]] const ArenaView& view() const noexcept { return view_; }
  [[nodiscard]] const ArenaIdentity& identity() const noexcept { return id_; }

 private:
  PeerArena() = default;
  ArenaIdentity id_;
  ArenaView view_;
};

// Random bits from the kernel, for nonces, salts and connection tokens.
std::uint64_t random_u64();

}  // namespace catena::fabric::soft
