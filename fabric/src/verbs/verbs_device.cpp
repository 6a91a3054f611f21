#include "verbs_device.hpp"

#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <utility>

namespace catena::fabric::verbs {

namespace {

constexpr std::size_t kPageSize = 4096;
constexpr std::size_t kHugePageSize = std::size_t{2} << 20;
constexpr std::uint32_t kAllAccess = kLocalWrite | kRemoteWrite | kRemoteRead;

}  // namespace

std::string errno_text(int err) {
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

void report_destroy_failure(const char* what, int err) noexcept {
  std::fprintf(stderr, "catena/verbs: %s failed: %s\n", what, std::strerror(err));
}

void ContextDeleter::operator()(ibv_context* ctx) const noexcept {
  if (ibv_close_device(ctx) != 0) {
    report_destroy_failure("ibv_close_device", errno);
  }
}
void PdDeleter::operator()(ibv_pd* pd) const noexcept {
  if (int rc = ibv_dealloc_pd(pd); rc != 0) {
    report_destroy_failure("ibv_dealloc_pd", rc);
  }
}
void MrDeleter::operator()(ibv_mr* mr) const noexcept {
  if (int rc = ibv_dereg_mr(mr); rc != 0) {
    report_destroy_failure("ibv_dereg_mr", rc);
  }
}
void CqDeleter::operator()(ibv_cq* cq) const noexcept {
  if (int rc = ibv_destroy_cq(cq); rc != 0) {
    report_destroy_failure("ibv_destroy_cq", rc);
  }
}
void QpDeleter::operator()(ibv_qp* qp) const noexcept {
  if (int rc = ibv_destroy_qp(qp); rc != 0) {
    report_destroy_failure("ibv_destroy_qp", rc);
  }
}
void CmIdDeleter::operator()(rdma_cm_id* id) const noexcept {
  if (rdma_destroy_id(id) != 0) {
    report_destroy_failure("rdma_destroy_id", errno);
  }
}
void CmEventAcker::operator()(rdma_cm_event* ev) const noexcept {
  if (rdma_ack_cm_event(ev) != 0) {
    report_destroy_failure("rdma_ack_cm_event", errno);
  }
}
void AlignedFree::operator()(std::byte* p) const noexcept {
  std::free(p);
}

Result<std::shared_ptr<VerbsDevice>> VerbsDevice::open(std::string_view name) {
  int count = 0;
  errno = 0;
  DeviceListHandle list(ibv_get_device_list(&count));
  if (!list) {
    const int err = errno;
    if (err == ENOSYS) {
      return make_error(Errc::no_device, "no RDMA device: kernel has no RDMA support (ENOSYS)");
    }
    return make_error(Errc::no_device, "no RDMA device: ibv_get_device_list failed: " + errno_text(err));
  }
  ibv_device* found = nullptr;
  std::string available;
  for (int i = 0; i < count; ++i) {
    const char* dev_name = ibv_get_device_name(list.get()[i]);
    if (dev_name == nullptr) {
      continue;
    }
    if (name == dev_name) {
      found = list.get()[i];
    }
    if (!available.empty()) {
      available += ", ";
    }
    available += dev_name;
  }
  if (found == nullptr) {
    return make_error(Errc::no_device, "device '" + std::string(name) + "' not found; available: " +
                                           (available.empty() ? std::string("none") : available));
  }

  auto dev = std::make_shared<VerbsDevice>();
  dev->name = std::string(name);
  dev->context.reset(ibv_open_device(found));
  if (!dev->context) {
    return make_error(Errc::no_device, "cannot open RDMA device '" + dev->name + "': " + errno_text(errno));
  }
  if (int rc = ibv_query_device(dev->context.get(), &dev->attr); rc != 0) {
    return make_error(Errc::io_error, "ibv_query_device on '" + dev->name + "' failed: " + errno_text(rc));
  }
  dev->pd.reset(ibv_alloc_pd(dev->context.get()));
  if (!dev->pd) {
    return make_error(Errc::resource_exhausted,
                      "ibv_alloc_pd on '" + dev->name + "' failed: " + errno_text(errno));
  }
  return dev;
}

Result<ibv_pd*> VerbsDevice::domain_pd(DomainId domain) const {
  if (domain == kDefaultDomain) return pd.get();
  std::lock_guard lock(domains_mu_);
  auto& slot = domain_pds_[domain];
  if (!slot) {
    slot.reset(ibv_alloc_pd(context.get()));
    if (!slot) {
      const int err = errno;
      domain_pds_.erase(domain);
      return make_error(Errc::resource_exhausted, "ibv_alloc_pd for protection domain " +
                                                      std::to_string(domain) + " on '" + name +
                                                      "' failed: " + errno_text(err));
    }
  }
  return slot.get();
}

bool VerbsDevice::same_device(const ibv_context* ctx) const noexcept {
  if (ctx == nullptr || ctx->device == nullptr) {
    return false;
  }
  if (ctx->device == context->device) {
    return true;
  }
  // librdmacm opens its own context; compare by kernel device name.
  const char* other = ibv_get_device_name(ctx->device);
  return other != nullptr && name == other;
}

int to_ibv_access(std::uint32_t access) noexcept {
  int flags = 0;
  if (access & (kLocalWrite | kRemoteWrite)) {
    flags |= IBV_ACCESS_LOCAL_WRITE;
  }
  if (access & (kRemoteWrite | kRemoteRead)) {
    flags |= IBV_ACCESS_MW_BIND;
  }
  return flags;
}

int window_access(std::uint32_t access) noexcept {
  int flags = 0;
  if (access & kRemoteWrite) {
    flags |= IBV_ACCESS_REMOTE_WRITE;
  }
  if (access & kRemoteRead) {
    flags |= IBV_ACCESS_REMOTE_READ;
  }
  return flags;
}

std::optional<std::uint32_t> WindowTable::find(const void* region, const void* endpoint) {
  std::lock_guard lock(mu_);
  if (auto it = windows_.find({region, endpoint}); it != windows_.end()) {
    return it->second.rkey;
  }
  return std::nullopt;
}

void WindowTable::add(const void* region, const void* endpoint, ibv_mw* mw, std::uint32_t rkey) {
  std::lock_guard lock(mu_);
  windows_[{region, endpoint}] = Window{mw, rkey};
}

namespace {

void dealloc_window(ibv_mw* mw) noexcept {
  if (int rc = ibv_dealloc_mw(mw); rc != 0) {
    report_destroy_failure("ibv_dealloc_mw", rc);
  }
}

}  // namespace

void WindowTable::release_region(const void* region) noexcept {
  std::lock_guard lock(mu_);
  std::erase_if(windows_, [&](const auto& kv) {
    if (kv.first.first != region) {
      return false;
    }
    dealloc_window(kv.second.mw);
    return true;
  });
}

void WindowTable::release_endpoint(const void* endpoint) noexcept {
  std::lock_guard lock(mu_);
  std::erase_if(windows_, [&](const auto& kv) {
    if (kv.first.second != endpoint) {
      return false;
    }
    dealloc_window(kv.second.mw);
    return true;
  });
}

void WarmRegions::set_limit(std::size_t bytes) {
  std::deque<WarmRegion> out;  // deregistered outside the lock
  std::lock_guard lock(mu_);
  limit_ = bytes;
  while (bytes_ > limit_) {
    bytes_ -= regions_.front().size;
    out.push_back(std::move(regions_.front()));
    regions_.pop_front();
  }
}

std::optional<WarmRegion> WarmRegions::take(std::size_t size, std::uint32_t access, DomainId domain) {
  std::lock_guard lock(mu_);
  for (auto it = regions_.begin(); it != regions_.end(); ++it) {
    if (it->size == size && it->access == access && it->domain == domain) {
      WarmRegion r = std::move(*it);
      regions_.erase(it);
      bytes_ -= size;
      return r;
    }
  }
  return std::nullopt;
}

bool WarmRegions::put(WarmRegion& r) {
  std::deque<WarmRegion> out;  // pushed out: deregistered and freed after the lock
  std::lock_guard lock(mu_);
  if (r.size > limit_) return false;
  while (bytes_ + r.size > limit_) {
    bytes_ -= regions_.front().size;
    out.push_back(std::move(regions_.front()));
    regions_.pop_front();
  }
  bytes_ += r.size;
  regions_.push_back(std::move(r));
  return true;
}

bool WarmRegions::put_if_room(WarmRegion& r) {
  std::lock_guard lock(mu_);
  if (bytes_ + r.size > limit_) return false;
  bytes_ += r.size;
  regions_.push_back(std::move(r));
  return true;
}

bool WarmRegions::holds(std::size_t size, std::uint32_t access, DomainId domain) const {
  std::lock_guard lock(mu_);
  return std::any_of(regions_.begin(), regions_.end(), [&](const WarmRegion& r) {
    return r.size == size && r.access == access && r.domain == domain;
  });
}

bool WarmRegions::has_room(std::size_t size) const {
  std::lock_guard lock(mu_);
  return bytes_ + size <= limit_;
}

std::size_t WarmRegions::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

Result<std::unique_ptr<MemoryRegion>> VerbsMemoryRegion::allocate(std::shared_ptr<VerbsDevice> device,
                                                                  std::size_t size, std::uint32_t access,
                                                                  DomainId domain) {
  if (size == 0) {
    return make_error(Errc::invalid_argument, "cannot register an empty region");
  }
  if ((access & ~kAllAccess) != 0) {
    return make_error(Errc::invalid_argument, "unknown access bits " + std::to_string(access & ~kAllAccess));
  }
  if (size > device->attr.max_mr_size || size > SIZE_MAX - kPageSize) {
    return make_error(Errc::too_large, "region of " + std::to_string(size) + " bytes exceeds the device's " +
                                           std::to_string(device->attr.max_mr_size) + "-byte limit");
  }
  Result<WarmRegion> w = [&]() -> Result<WarmRegion> {
    if (auto kept = device->warm.take(size, access, domain)) return std::move(*kept);
    return register_fresh(*device, size, access, domain);
  }();
  if (!w) return w.error();
  device->spares.allocated(size, access, domain);
  return std::unique_ptr<MemoryRegion>(
      new VerbsMemoryRegion(std::move(device), std::move(w->memory), std::move(w->mr), size, access, domain));
}

Result<WarmRegion> register_fresh(VerbsDevice& device, std::size_t size, std::uint32_t access,
                                  DomainId domain) {
  // A region of a huge page or more is aligned to one and asks for
  // transparent huge pages (THP "always" or "madvise"; otherwise the advice
  // is refused and 4 KiB pages serve): 512 times fewer pages to fault in,
  // pin and translate (the NIC's translation table, the CPU's TLB).
  const std::size_t align = size >= kHugePageSize ? kHugePageSize : kPageSize;
  const std::size_t rounded = (size + align - 1) / align * align;
  AlignedBuffer memory(static_cast<std::byte*>(std::aligned_alloc(align, rounded)));
  if (!memory) {
    return make_error(Errc::resource_exhausted, "cannot allocate " + std::to_string(size) + " bytes");
  }
  if (align == kHugePageSize) (void)madvise(memory.get(), rounded, MADV_HUGEPAGE);
  // Faults every page in now, before registration pins them.
  std::memset(memory.get(), 0, rounded);
  auto pd = device.domain_pd(domain);
  if (!pd) return pd.error();
  // Register exactly `size` bytes: the NIC's bounds check is the region's.
  MrHandle mr(ibv_reg_mr(pd.value(), memory.get(), size, to_ibv_access(access)));
  if (!mr) {
    const int err = errno;
    std::string msg = "ibv_reg_mr of " + std::to_string(size) + " bytes failed: " + errno_text(err);
    if (err == ENOMEM || err == EPERM) {
      msg += "; check RLIMIT_MEMLOCK (ulimit -l)";
    }
    return make_error(err == ENOMEM ? Errc::resource_exhausted : Errc::io_error, std::move(msg));
  }
  return WarmRegion{std::move(memory), std::move(mr), size, access, domain};
}

VerbsSpares::~VerbsSpares() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void VerbsSpares::allocated(std::size_t size, std::uint32_t access, DomainId domain) {
  if (size < kMinBytes) return;
  const Kind kind{size, access, domain};
  {
    std::lock_guard lock(mu_);
    if (std::find(recent_.begin(), recent_.end(), kind) == recent_.end()) {
      // Only a kind that recurs: the second allocation of it asks.
      recent_[recent_next_] = kind;
      recent_next_ = (recent_next_ + 1) % recent_.size();
      return;
    }
    if (pending_ || stopping_) return;
  }
  // Outside our lock (the warm pool has its own): the next allocation of
  // this kind is warm already, or there is no room to keep one more.
  if (device_.warm.holds(size, access, domain) || !device_.warm.has_room(size)) return;
  {
    std::lock_guard lock(mu_);
    if (pending_ || stopping_) return;
    pending_ = kind;
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  cv_.notify_one();
}

void VerbsSpares::run() {
  pthread_setname_np(pthread_self(), "catena-vspare");
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || pending_.has_value(); });
    if (stopping_) return;
    const Kind kind = *pending_;
    lock.unlock();
    Result<WarmRegion> r = register_fresh(device_, kind.size, kind.access, kind.domain);
    // No room left by now (regions given back meanwhile): freed, not kept
    // at the cost of another (its MR is deregistered before its memory goes).
    const bool kept = r && device_.warm.put_if_room(r.value());
    lock.lock();
    if (kept) ++made_;
    pending_.reset();
  }
}

std::size_t VerbsSpares::pending_bytes() const {
  std::lock_guard lock(mu_);
  return pending_ ? pending_->size : 0;
}

std::uint64_t VerbsSpares::made() const {
  std::lock_guard lock(mu_);
  return made_;
}

VerbsMemoryRegion::VerbsMemoryRegion(std::shared_ptr<VerbsDevice> device, AlignedBuffer memory, MrHandle mr,
                                     std::size_t size, std::uint32_t access, DomainId domain)
    : MemoryRegion(domain),
      device_(std::move(device)),
      memory_(std::move(memory)),
      mr_(std::move(mr)),
      size_(size),
      access_(access) {}

// Windows first: they revoke every key given out for this region, and the
// MR cannot be deregistered while one is bound to it.
VerbsMemoryRegion::~VerbsMemoryRegion() {
  device_->windows.release_region(this);
  // No window is bound to it any more, so no key a peer holds reaches the
  // bytes: cleared before anyone else gets them, kept registered for the
  // next region of its kind (WarmRegions) or deregistered and freed
  // (explicit_bzero: a memset before free may be optimised away).
  explicit_bzero(memory_.get(), size_);
  WarmRegion w{std::move(memory_), std::move(mr_), size_, access_, domain()};
  if (device_->warm.put(w)) return;
  w.mr.reset();  // deregistered before its memory is freed
}

}  // namespace catena::fabric::verbs
