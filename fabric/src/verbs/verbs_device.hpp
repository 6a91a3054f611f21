// The opened RDMA device shared by everything a verbs Provider hands out:
// its own device context (not librdmacm's), one protection domain and the
// device attributes queried once at open.
//
// Lifecycle: created by open_verbs_provider(); memory regions, listeners and
// endpoints each hold a shared_ptr, so the PD and context outlive every MR
// and QP created on them, whatever order the caller destroys things in.
// Immutable after open, so any thread may use it for setup.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <catena/fabric/fabric.hpp>

#include "verbs_handles.hpp"

namespace catena::fabric::verbs {

struct VerbsDevice {
  // Declared in creation order: the PD is released before the context.
  ContextHandle context;
  PdHandle pd;
  ibv_device_attr attr{};
  std::string name;

  // Finds `name` in ibv_get_device_list, opens it, queries it, allocates the PD.
  static Result<std::shared_ptr<VerbsDevice>> open(std::string_view name);

  // True if `ctx` (e.g. a cm_id's verbs context) belongs to this device.
  [[nodiscard]] bool same_device(const ibv_context* ctx) const noexcept;
};

// A page-aligned, zeroed buffer registered with the device's PD. Destruction
// deregisters first (no remote access reaches the memory afterwards), then
// frees the memory, then drops its hold on the device.
class VerbsMemoryRegion final : public MemoryRegion {
 public:
  static Result<std::unique_ptr<MemoryRegion>> allocate(std::shared_ptr<VerbsDevice> device, std::size_t size,
                                                        std::uint32_t access);

  [[nodiscard]] std::byte* data() const noexcept override { return memory_.get(); }
  [[nodiscard]] std::size_t size() const noexcept override { return size_; }
  [[nodiscard]] std::uint32_t lkey() const noexcept override { return mr_->lkey; }
  [[nodiscard]] std::uint32_t access() const noexcept override { return access_; }
  [[nodiscard]] RemoteRegion remote() const noexcept override;

 private:
  VerbsMemoryRegion(std::shared_ptr<VerbsDevice> device, AlignedBuffer memory, MrHandle mr, std::size_t size,
                    std::uint32_t access);

  std::shared_ptr<VerbsDevice> device_;
  AlignedBuffer memory_;
  MrHandle mr_;
  std::size_t size_;
  std::uint32_t access_;
};

// IBV_ACCESS_* flags for an Access mask. A NIC writing into the region on a
// peer's behalf needs local write too, so kRemoteWrite implies it.
[[nodiscard]] int to_ibv_access(std::uint32_t access) noexcept;

}  // namespace catena::fabric::verbs
