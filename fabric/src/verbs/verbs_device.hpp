// The opened RDMA device shared by everything a verbs Provider hands out:
// its own device context (not librdmacm's), one protection domain and the
// device attributes queried once at open.
//
// Lifecycle: created by open_verbs_provider(); memory regions, listeners and
// endpoints each hold a shared_ptr, so the PD and context outlive every MR
// and QP created on them, whatever order the caller destroys things in.
// Immutable after open, so any thread may use it for setup.
#pragma once

#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <catena/fabric/fabric.hpp>

#include "verbs_handles.hpp"

namespace catena::fabric::verbs {

// The memory windows that Endpoint::expose bound, one per (region,
// endpoint). A window is deallocated when its region or its endpoint goes,
// whichever is first: that revokes the key (and rxe refuses to deregister
// an MR while windows are bound to it). Setup path; any thread.
class WindowTable {
 public:
  [[nodiscard]] std::optional<std::uint32_t> find(const void* region, const void* endpoint);
  void add(const void* region, const void* endpoint, ibv_mw* mw, std::uint32_t rkey);
  void release_region(const void* region) noexcept;
  void release_endpoint(const void* endpoint) noexcept;

 private:
  struct Window {
    ibv_mw* mw;
    std::uint32_t rkey;
  };
  std::mutex mu_;
  std::map<std::pair<const void*, const void*>, Window> windows_;
};

// Regions given back, kept registered and zeroed for the next allocation of
// the same size, access and domain: a segment's memory costs its data
// thread an aligned_alloc, a fill that faults every page in, ibv_reg_mr
// (pinning) when it is taken and ibv_dereg_mr when it goes, tens of ms for
// 64 MiB; taken warm, none of it. At most `limit` bytes (`verbs:<device>,
// warm=<MiB>`, 256 by default; 0: none): a region given back beyond it
// pushes the oldest out (deregistered and freed). Safe to reuse because a
// region's remote rights are its memory windows (to_ibv_access): they are
// deallocated before it comes here, so no key a peer holds reaches it, and
// it is zeroed before it does. Setup path; any thread.
struct WarmRegion {
  AlignedBuffer memory;
  MrHandle mr;
  std::size_t size = 0;
  std::uint32_t access = 0;
  DomainId domain = kDefaultDomain;
};

class WarmRegions {
 public:
  void set_limit(std::size_t bytes);
  // One of exactly this size, access and domain, if any is kept.
  std::optional<WarmRegion> take(std::size_t size, std::uint32_t access, DomainId domain);
  // Keeps `r` (zeroed, no window bound to it), pushing the oldest out to
  // stay within the limit; false if it alone is larger than the limit (the
  // caller deregisters and frees it, as without a pool).
  bool put(WarmRegion& r);
  // Keeps `r` only if it fits within the limit beside what is kept (no
  // other region is pushed out); false otherwise (the caller frees it).
  bool put_if_room(WarmRegion& r);
  // Whether one of this kind is kept.
  [[nodiscard]] bool holds(std::size_t size, std::uint32_t access, DomainId domain) const;
  // Whether `size` more bytes fit within the limit beside what is kept.
  [[nodiscard]] bool has_room(std::size_t size) const;
  [[nodiscard]] std::size_t bytes() const;

 private:
  mutable std::mutex mu_;
  std::deque<WarmRegion> regions_;  // oldest first
  std::size_t bytes_ = 0;
  std::size_t limit_ = std::size_t{256} << 20;
};

struct VerbsDevice;

// Memory of `size` bytes, zeroed (every page faulted in) and registered
// with the domain's PD: what a region that found no warm one is made of.
// Any thread.
Result<WarmRegion> register_fresh(VerbsDevice& device, std::size_t size, std::uint32_t access,
                                  DomainId domain);

// Regions made ahead, on a thread of their own (`catena-vspare`, started by
// the first request), for allocations that recur: when an allocation of at
// least kMinBytes is the second of its (size, access, domain) among the
// last eight kinds allocated, and no warm region of that kind is left for
// the next one, one more is made and put into the WarmRegions, so that the
// next allocation (a partition opening one more segment as its rate grows)
// is a take() instead of aligned_alloc, a faulting fill and ibv_reg_mr on
// the caller's time (a data thread's): 28 ms for 64 MiB on 4 KiB pages
// here, 335 ms in the CI's emulated VM. At most one at a time, and only
// while the warm limit leaves room for it (`warm=0`: none). Any thread.
class VerbsSpares {
 public:
  static constexpr std::size_t kMinBytes = std::size_t{1} << 20;

  explicit VerbsSpares(VerbsDevice& device) : device_(device) {}
  ~VerbsSpares();  // stops the thread, dropping a request not yet started
  VerbsSpares(const VerbsSpares&) = delete;
  VerbsSpares& operator=(const VerbsSpares&) = delete;

  // Called by every allocation, after it got its memory.
  void allocated(std::size_t size, std::uint32_t access, DomainId domain);
  // Bytes of the region being made (resident, soon pinned; in no region).
  [[nodiscard]] std::size_t pending_bytes() const;
  // Regions made and put into the WarmRegions so far.
  [[nodiscard]] std::uint64_t made() const;

 private:
  struct Kind {
    std::size_t size = 0;
    std::uint32_t access = 0;
    DomainId domain = kDefaultDomain;
    bool operator==(const Kind&) const = default;
  };
  void run();

  VerbsDevice& device_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::array<Kind, 8> recent_{};
  std::size_t recent_next_ = 0;
  std::optional<Kind> pending_;  // asked for or being made
  std::uint64_t made_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

struct VerbsDevice {
  // Declared in creation order: the PDs are released before the context.
  ContextHandle context;
  PdHandle pd;  // the default protection domain's
  ibv_device_attr attr{};
  std::string name;
  // Emptied by the regions and endpoints before the PD goes (each holds the device).
  WindowTable windows;

  // Finds `name` in ibv_get_device_list, opens it, queries it, allocates the PD.
  static Result<std::shared_ptr<VerbsDevice>> open(std::string_view name);

  // True if `ctx` (e.g. a cm_id's verbs context) belongs to this device.
  [[nodiscard]] bool same_device(const ibv_context* ctx) const noexcept;

  // The ibv_pd of a protection domain (fabric.hpp): the default one's is
  // `pd`, another's is allocated on first use and kept until the device
  // goes. Setup path; any thread.
  [[nodiscard]] Result<ibv_pd*> domain_pd(DomainId domain) const;

 private:
  mutable std::mutex domains_mu_;
  mutable std::map<DomainId, PdHandle> domain_pds_;

 public:
  // Declared after the PDs, so destroyed first: its MRs go before them.
  WarmRegions warm;
  // Declared last: its thread, which puts into `warm` and registers with
  // the PDs, is stopped before either goes.
  VerbsSpares spares{*this};
};

// A page-aligned, zeroed buffer registered with the device's PD. Destruction
// deregisters first (no remote access reaches the memory afterwards), then
// frees the memory, then drops its hold on the device.
class VerbsMemoryRegion final : public MemoryRegion {
 public:
  static Result<std::unique_ptr<MemoryRegion>> allocate(std::shared_ptr<VerbsDevice> device, std::size_t size,
                                                        std::uint32_t access, DomainId domain);

  [[nodiscard]] std::byte* data() const noexcept override { return memory_.get(); }
  [[nodiscard]] std::size_t size() const noexcept override { return size_; }
  [[nodiscard]] std::uint32_t lkey() const noexcept override { return mr_->lkey; }
  [[nodiscard]] std::uint32_t access() const noexcept override { return access_; }
  ~VerbsMemoryRegion() override;
  VerbsMemoryRegion(const VerbsMemoryRegion&) = delete;
  VerbsMemoryRegion& operator=(const VerbsMemoryRegion&) = delete;

  [[nodiscard]] const VerbsDevice* device() const noexcept { return device_.get(); }
  [[nodiscard]] ibv_mr* mr() const noexcept { return mr_.get(); }

 private:
  VerbsMemoryRegion(std::shared_ptr<VerbsDevice> device, AlignedBuffer memory, MrHandle mr, std::size_t size,
                    std::uint32_t access, DomainId domain);

  std::shared_ptr<VerbsDevice> device_;
  AlignedBuffer memory_;
  MrHandle mr_;
  std::size_t size_;
  std::uint32_t access_;
};

// IBV_ACCESS_* flags to register a region with, for an Access mask. The MR
// itself grants no remote right (its rkey would work from any QP of the
// PD): remote rights go to memory windows bound per connection
// (window_access), which the MR allows with MW_BIND. A NIC writing into the
// region on a peer's behalf needs local write too, so kRemoteWrite implies it.
[[nodiscard]] int to_ibv_access(std::uint32_t access) noexcept;
// The remote IBV_ACCESS_* flags of a window over a region with this mask.
[[nodiscard]] int window_access(std::uint32_t access) noexcept;

}  // namespace catena::fabric::verbs
