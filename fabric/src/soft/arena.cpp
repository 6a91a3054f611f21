#include "soft/arena.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <linux/falloc.h>
#include <linux/memfd.h>
#include <optional>
#include <string>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>

namespace catena::fabric::soft {
namespace {

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

std::uint64_t round_up_pages(std::uint64_t bytes) {
  return (bytes + kPageSize - 1) & ~(kPageSize - 1);
}

// What the kernel's pool of 2 MiB pages can still give, from /proc/meminfo,
// for an error message. Pages reserved by other mappings (HugePages_Rsvd)
// still count as free there, but no new mapping can have them.
std::string huge_pages_free() {
  std::ifstream in("/proc/meminfo");
  long total = -1, free = -1, reserved = -1;
  for (std::string line; std::getline(in, line);) {
    auto value = [&] { return std::strtol(line.c_str() + line.find(':') + 1, nullptr, 10); };
    if (line.rfind("HugePages_Total:", 0) == 0) total = value();
    if (line.rfind("HugePages_Free:", 0) == 0) free = value();
    if (line.rfind("HugePages_Rsvd:", 0) == 0) reserved = value();
  }
  if (total < 0 || free < 0 || reserved < 0) return "no huge page counts in /proc/meminfo";
  return "2 MiB pages: " + std::to_string(total) + " in the pool, " + std::to_string(free - reserved) +
         " available (" + std::to_string(free) + " free, " + std::to_string(reserved) +
         " of them reserved by other mappings)";
}

}  // namespace

std::uint64_t random_u64() {
  std::uint64_t v = 0;
  // getrandom of 8 bytes from the urandom pool does not block or fail short.
  while (getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
  }
  return v;
}

Result<std::unique_ptr<Arena>> Arena::create(std::uint64_t size, const std::string& keep_dir) {
  std::unique_ptr<Arena> a(new Arena());
  if (!keep_dir.empty()) {
    a->keep_dir_ = keep_dir;
    if (auto r = a->open_kept_file(size); !r) {
      return r.error();
    }
    size = a->view_.size;
  } else {
    int fd = memfd_create("catena-soft-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
      return make_error(Errc::resource_exhausted, errno_text("memfd_create"));
    }
    a->id_.memfd = fd;
    // Ask for a large sparse arena; settle for less where address space or
    // file size is limited.
    void* base = MAP_FAILED;
    for (; size >= kMinArenaSize; size /= 2) {
      if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
        continue;
      }
      base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
      if (base != MAP_FAILED) {
        break;
      }
    }
    if (base == MAP_FAILED) {
      return make_error(Errc::resource_exhausted, errno_text("mmap of the soft arena"));
    }
    if (auto r = a->adopt_memfd_mapping(base, size); !r) return r.error();
  }
  return finish_create(std::move(a), size);
}

Result<void> Arena::adopt_memfd_mapping(void* base, std::uint64_t size) {
  // Peers map this file read-write (through /proc/<pid>/fd): sealed, none
  // of them can shrink it under our mapping (every access past the new end
  // would be SIGBUS here) or grow it, and the seals cannot be lifted.
  if (fcntl(id_.memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    munmap(base, size);
    return make_error(Errc::resource_exhausted, errno_text("sealing the soft arena"));
  }
  view_.base = static_cast<std::byte*>(base);
  view_.size = size;
  populator_ = std::make_unique<Populator>(
      view_.base, [this](std::uint64_t offset, std::uint64_t bytes) { finish_free(offset, bytes); },
      [this](std::uint64_t offset, std::uint64_t bytes, bool populated) {
        take_spare(offset, bytes, populated);
      });
  warm_limit_ = kDefaultWarmBytes;
  return {};
}

Result<std::unique_ptr<Arena>> Arena::create_huge(std::uint64_t bytes) {
  if (bytes < kMinHugeArenaBytes || bytes % kHugePageBytes != 0) {
    return make_error(Errc::invalid_argument, "a huge-page arena is a multiple of 2 MiB, at least " +
                                                  std::to_string(kMinHugeArenaBytes >> 20) + " MiB");
  }
  std::unique_ptr<Arena> a(new Arena());
  a->huge_ = true;
  const int fd =
      memfd_create("catena-soft-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB | MFD_HUGE_2MB);
  if (fd < 0) {
    return make_error(Errc::resource_exhausted,
                      errno_text("memfd_create on 2 MiB huge pages (soft provider huge=)"));
  }
  a->id_.memfd = fd;
  const std::string want = std::to_string(bytes >> 20) + " MiB";
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    return make_error(Errc::resource_exhausted,
                      errno_text(("sizing a " + want + " huge-page arena").c_str()));
  }
  // Shared and without MAP_NORESERVE: the kernel reserves every page now
  // or refuses the mapping (ENOMEM), instead of a SIGBUS at some later fault.
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const std::string why = std::strerror(errno);
    return make_error(Errc::resource_exhausted,
                      "reserving " + want + " of 2 MiB huge pages for the soft arena: " + why + " (" +
                          huge_pages_free() + "; raise vm.nr_hugepages or lower huge=)");
  }
  if (auto r = a->adopt_memfd_mapping(base, bytes); !r) return r.error();
  return finish_create(std::move(a), bytes);
}

Result<std::unique_ptr<Arena>> Arena::finish_create(std::unique_ptr<Arena> a, std::uint64_t size) {
  std::byte* base = a->view_.base;
  a->id_.size = size;
  a->id_.pid = getpid();
  a->id_.nonce[0] = random_u64();
  a->id_.nonce[1] = random_u64();

  auto* hdr = reinterpret_cast<ArenaHeader*>(base);
  hdr->magic = kArenaMagic;
  hdr->version = kArenaVersion;
  hdr->nonce[0] = a->id_.nonce[0];
  hdr->nonce[1] = a->id_.nonce[1];
  hdr->size = size;
  hdr->table_offset = kTableOffset;
  hdr->table_capacity = kRegionTableCapacity;
  hdr->pid = static_cast<std::uint32_t>(a->id_.pid);

  a->table_ = reinterpret_cast<RegionEntry*>(a->view_.base + kTableOffset);
  a->view_.table = a->table_;
  for (std::uint32_t i = 0; i < kRegionTableCapacity; ++i) {
    a->free_slots_.push_back(i);
  }
  if (!a->keep_dir_.empty()) {
    // Every key of the last process dies here: its table was the NIC's.
    a->zero_range(kTableOffset, kDataOffset - kTableOffset);
    if (auto r = a->load_kept_directory(); !r) {
      return r.error();
    }
  }
  return a;
}

Arena::~Arena() {
  // Its thread touches the mapping, and frees ranges through this (which
  // reads populator_): stopped first, then destroyed.
  if (populator_ != nullptr) populator_->stop();
  populator_.reset();
  if (view_.base != nullptr) {
    munmap(view_.base, view_.size);
  }
  if (id_.memfd >= 0) {
    close(id_.memfd);
  }
}

namespace {

// The first range of `ranges` (offset -> length) that holds `bytes`, cut
// from its front; the rest stays.
std::optional<std::uint64_t> take_first_fit(std::map<std::uint64_t, std::uint64_t>& ranges,
                                            std::uint64_t bytes) {
  for (auto it = ranges.begin(); it != ranges.end(); ++it) {
    if (it->second < bytes) continue;
    const std::uint64_t off = it->first;
    const std::uint64_t rest = it->second - bytes;
    ranges.erase(it);
    if (rest > 0) ranges.emplace(off + bytes, rest);
    return off;
  }
  return std::nullopt;
}

// Adds [offset, offset + bytes) to `ranges`, merged with its neighbours.
void insert_coalesced(std::map<std::uint64_t, std::uint64_t>& ranges, std::uint64_t offset,
                      std::uint64_t bytes) {
  auto next = ranges.lower_bound(offset);
  if (next != ranges.end() && next->first == offset + bytes) {
    bytes += next->second;
    next = ranges.erase(next);
  }
  if (next != ranges.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      return;
    }
  }
  ranges.emplace(offset, bytes);
}

}  // namespace

Result<std::uint64_t> Arena::allocate_range(std::uint64_t bytes, bool* warm) {
  bytes = round_up_pages(bytes == 0 ? 1 : bytes);
  if (warm != nullptr) *warm = false;
  for (;;) {
    Result<std::uint64_t> r = [&] {
      std::lock_guard lock(mu_);
      return allocate_locked(bytes, warm);
    }();
    // Memory given back may still be on its way (being zeroed on the
    // populator's thread): once it is back, try again.
    if (r || populator_ == nullptr || !populator_->wait_frees()) return r;
  }
}

Result<std::uint64_t> Arena::allocate_locked(std::uint64_t bytes, bool* warm) {
  const bool large = bytes > kWarmRangeBytes;
  if (large) {
    if (auto off = take_first_fit(warm_ranges_, bytes)) {
      warm_bytes_ -= bytes;
      if (warm != nullptr) *warm = true;
      maybe_make_spare_locked(bytes);
      return *off;
    }
  }
  std::uint64_t off = 0;
  if (auto cold = take_cold_locked(bytes)) {
    off = *cold;
  } else if (auto last = take_first_fit(warm_ranges_, bytes)) {
    // Nothing cold left (a fixed huge-page arena): warm memory serves any size.
    warm_bytes_ -= bytes;
    if (warm != nullptr) *warm = true;
    return *last;
  } else {
    return make_error(Errc::resource_exhausted, "soft arena exhausted: " + std::to_string(bytes) +
                                                    " bytes requested, " +
                                                    std::to_string(view_.size - high_water_) + " left");
  }
  if (large) maybe_make_spare_locked(bytes);
  return off;
}

std::optional<std::uint64_t> Arena::take_cold_locked(std::uint64_t bytes) {
  if (auto cold = take_first_fit(free_ranges_, bytes)) return cold;
  if (bytes > view_.size - high_water_) return std::nullopt;
  const std::uint64_t off = high_water_;
  high_water_ += bytes;
  return off;
}

void Arena::maybe_make_spare_locked(std::uint64_t bytes) {
  // Only for a size that recurs: the second allocation of it makes one.
  const bool seen = std::find(recent_sizes_.begin(), recent_sizes_.end(), bytes) != recent_sizes_.end();
  if (!seen) {
    recent_sizes_[recent_next_] = bytes;
    recent_next_ = (recent_next_ + 1) % recent_sizes_.size();
    return;
  }
  if (populator_ == nullptr || spare_pending_ != 0 || warm_bytes_ + bytes > warm_limit_) return;
  for (const auto& [off, len] : warm_ranges_) {
    if (len >= bytes) return;  // the next allocation of this size is warm already
  }
  const std::optional<std::uint64_t> off = take_cold_locked(bytes);
  if (!off) return;
  if (!populator_->add_spare(*off, bytes)) {
    insert_coalesced(free_ranges_, *off, bytes);
    return;
  }
  spare_pending_ = bytes;
}

void Arena::take_spare(std::uint64_t offset, std::uint64_t bytes, bool populated) {
  std::lock_guard lock(mu_);
  spare_pending_ = 0;
  // Populated or not, it is zero (fresh memory): warm only if its pages
  // are all there.
  if (populated) {
    insert_coalesced(warm_ranges_, offset, bytes);
    warm_bytes_ += bytes;
  } else {
    insert_coalesced(free_ranges_, offset, bytes);
  }
}

void Arena::set_warm_limit(std::uint64_t bytes) {
  std::lock_guard lock(mu_);
  warm_limit_ = populator_ != nullptr ? bytes : 0;
}

std::uint64_t Arena::warm_bytes() const {
  std::lock_guard lock(mu_);
  return warm_bytes_;
}

std::uint64_t Arena::spare_bytes_pending() const {
  std::lock_guard lock(mu_);
  return spare_pending_;
}

void Arena::prefault(std::uint64_t offset, std::uint64_t bytes) {
  bytes = round_up_pages(bytes == 0 ? 1 : bytes);
  if (populator_ != nullptr && bytes > kWarmRangeBytes) populator_->add(offset, bytes);
}

void Arena::zero_range(std::uint64_t offset, std::uint64_t bytes) {
  // No populate may fault these pages back in after they are dropped.
  if (populator_ != nullptr) populator_->forget(offset, bytes);
  // Dropping the pages both zeroes the range for its next owner and returns
  // the memory; if the kernel cannot punch, zero by hand. Huge pages stay:
  // the reservation a punch would give back is what keeps faults from SIGBUS.
  if (huge_ || fallocate(id_.memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                         static_cast<off_t>(bytes)) != 0) {
    std::memset(view_.base + offset, 0, bytes);
  }
}

Result<std::uint64_t> Arena::allocate_channel_range(std::uint64_t bytes) {
  bytes = round_up_pages(bytes == 0 ? 1 : bytes);
  {
    std::lock_guard lock(mu_);
    if (auto it = free_channels_.find(bytes); it != free_channels_.end()) {
      std::uint64_t off = it->second;
      free_channels_.erase(it);
      return off;
    }
  }
  return allocate_range(bytes);
}

void Arena::free_channel_range(std::uint64_t offset, std::uint64_t bytes) {
  bytes = round_up_pages(bytes == 0 ? 1 : bytes);
  zero_range(offset, bytes);
  std::lock_guard lock(mu_);
  free_channels_.emplace(bytes, offset);
}

void Arena::free_range(std::uint64_t offset, std::uint64_t bytes) {
  bytes = round_up_pages(bytes == 0 ? 1 : bytes);
  // Zeroing is the slow part (page table work in every process that maps
  // the range): the populator's thread does it, then frees the range.
  if (populator_ != nullptr && populator_->free_later(offset, bytes)) return;
  finish_free(offset, bytes);
}

void Arena::finish_free(std::uint64_t offset, std::uint64_t bytes) {
  if (bytes <= kWarmRangeBytes) {
    std::memset(view_.base + offset, 0, bytes);
    std::lock_guard lock(mu_);
    insert_coalesced(free_ranges_, offset, bytes);
    return;
  }
  // Kept warm if the limit has room (reserved before zeroing, so that two
  // frees never both count on the same room), else punched out.
  bool keep = false;
  {
    std::lock_guard lock(mu_);
    keep = warm_bytes_ + bytes <= warm_limit_;
    if (keep) warm_bytes_ += bytes;
  }
  if (keep) {
    std::memset(view_.base + offset, 0, bytes);
  } else {
    zero_range(offset, bytes);
  }
  std::lock_guard lock(mu_);
  insert_coalesced(keep ? warm_ranges_ : free_ranges_, offset, bytes);
}

Result<std::uint32_t> Arena::register_region(std::uint64_t offset, std::uint64_t length, std::uint32_t access,
                                             std::uint64_t conn) {
  std::lock_guard lock(mu_);
  if (free_slots_.empty()) {
    return make_error(Errc::resource_exhausted, "soft provider region table full (" +
                                                    std::to_string(kRegionTableCapacity) + " regions)");
  }
  std::uint32_t slot = free_slots_.front();
  free_slots_.pop_front();
  std::uint32_t key = 0;
  do {
    key = (static_cast<std::uint32_t>(random_u64()) << 16) | slot;
  } while (key == 0);
  RegionEntry& e = table_[slot];
  e.access.store(access, std::memory_order_relaxed);
  e.conn.store(conn, std::memory_order_relaxed);
  e.offset.store(offset, std::memory_order_relaxed);
  e.length.store(length, std::memory_order_relaxed);
  e.key.store(key, std::memory_order_release);
  return key;
}

void Arena::revoke_key(std::uint32_t key) noexcept {
  std::uint32_t expected = key;
  table_[key & (kRegionTableCapacity - 1)].key.compare_exchange_strong(expected, 0,
                                                                       std::memory_order_seq_cst);
}

void Arena::quarantine_range(std::uint64_t offset, std::uint64_t bytes) {
  zero_range(offset, round_up_pages(bytes == 0 ? 1 : bytes));
}

void Arena::release_key(std::uint32_t key) {
  std::lock_guard lock(mu_);
  free_slots_.push_back(key & (kRegionTableCapacity - 1));
}

Result<std::shared_ptr<PeerArena>> PeerArena::map(const ArenaIdentity& id) {
  std::string path = "/proc/" + std::to_string(id.pid) + "/fd/" + std::to_string(id.memfd);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return make_error(Errc::refused, errno_text(("cannot open peer arena " + path).c_str()));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < id.size || id.size < kDataOffset) {
    close(fd);
    return make_error(Errc::refused, "peer arena " + path + " is not the announced size");
  }
  // The header and the region table are the owner's alone: mapped read-only
  // here, so no stray or hostile write of ours can forge a key or resize a
  // region. Regions and channels (from kDataOffset) are ours to write into,
  // as a NIC would.
  void* base = mmap(nullptr, id.size, PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0);
  int map_errno = errno;
  if (base != MAP_FAILED &&
      mmap(static_cast<std::byte*>(base) + kDataOffset, id.size - kDataOffset, PROT_READ | PROT_WRITE,
           MAP_SHARED | MAP_NORESERVE | MAP_FIXED, fd, static_cast<off_t>(kDataOffset)) == MAP_FAILED) {
    map_errno = errno;
    munmap(base, id.size);
    base = MAP_FAILED;
  }
  close(fd);
  if (base == MAP_FAILED) {
    errno = map_errno;
    return make_error(Errc::refused, errno_text(("cannot map peer arena " + path).c_str()));
  }
  std::shared_ptr<PeerArena> p(new PeerArena());
  p->id_ = id;
  p->view_.base = static_cast<std::byte*>(base);
  p->view_.size = id.size;
  const auto* hdr = reinterpret_cast<const ArenaHeader*>(base);
  if (hdr->magic != kArenaMagic || hdr->version != kArenaVersion || hdr->nonce[0] != id.nonce[0] ||
      hdr->nonce[1] != id.nonce[1] || hdr->size != id.size || hdr->table_offset != kTableOffset ||
      hdr->table_capacity != kRegionTableCapacity) {
    return make_error(Errc::refused, path + " is not the peer's arena (another process or pid namespace)");
  }
  p->view_.table = reinterpret_cast<const RegionEntry*>(p->view_.base + kTableOffset);
  return p;
}

PeerArena::~PeerArena() {
  if (view_.base != nullptr) {
    munmap(view_.base, view_.size);
  }
}

}  // namespace catena::fabric::soft
