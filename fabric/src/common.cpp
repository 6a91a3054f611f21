#include <catena/fabric/fabric.hpp>
#include <catena/fabric/fault_provider.hpp>

namespace catena::fabric {

std::string_view to_string(Errc e) noexcept {
  switch (e) {
    case Errc::ok:
      return "ok";
    case Errc::no_device:
      return "no_device";
    case Errc::invalid_argument:
      return "invalid_argument";
    case Errc::backpressure:
      return "backpressure";
    case Errc::not_connected:
      return "not_connected";
    case Errc::disconnected:
      return "disconnected";
    case Errc::remote_access:
      return "remote_access";
    case Errc::local_protection:
      return "local_protection";
    case Errc::too_large:
      return "too_large";
    case Errc::timeout:
      return "timeout";
    case Errc::refused:
      return "refused";
    case Errc::resource_exhausted:
      return "resource_exhausted";
    case Errc::io_error:
      return "io_error";
  }
  return "unknown";
}

std::string_view to_string(Opcode op) noexcept {
  switch (op) {
    case Opcode::write:
      return "write";
    case Opcode::write_imm:
      return "write_imm";
    case Opcode::read:
      return "read";
    case Opcode::send:
      return "send";
    case Opcode::recv:
      return "recv";
    case Opcode::recv_write_imm:
      return "recv_write_imm";
  }
  return "unknown";
}

std::string_view to_string(WcStatus s) noexcept {
  switch (s) {
    case WcStatus::success:
      return "success";
    case WcStatus::remote_access_error:
      return "remote_access_error";
    case WcStatus::local_protection_error:
      return "local_protection_error";
    case WcStatus::local_length_error:
      return "local_length_error";
    case WcStatus::flushed:
      return "flushed";
    case WcStatus::retry_exceeded:
      return "retry_exceeded";
    case WcStatus::general_error:
      return "general_error";
  }
  return "unknown";
}

Result<RemoteRegion> Endpoint::expose(const MemoryRegion& mr) {
  if (mr.domain() != domain_) {
    return make_error(Errc::invalid_argument, "a region of protection domain " + std::to_string(mr.domain()) +
                                                  " cannot be exposed on a connection of domain " +
                                                  std::to_string(domain_));
  }
  return expose_region(mr);
}

MemoryRegion::~MemoryRegion() {
  if (registered_)
    registered_->fetch_sub(static_cast<std::int64_t>(size_counted_), std::memory_order_relaxed);
}

void Provider::count_registered(MemoryRegion& r) noexcept {
  if (r.registered_) return;
  r.registered_ = registered_;
  r.size_counted_ = r.size();
  registered_->fetch_add(static_cast<std::int64_t>(r.size_counted_), std::memory_order_relaxed);
}

Result<KeptRegion> Provider::allocate_kept_region(std::string_view name, std::size_t size,
                                                  std::uint32_t access, DomainId domain) {
  (void)name;
  (void)size;
  (void)access;
  (void)domain;
  return make_error(Errc::no_device, "the " + this->name() + " provider cannot keep memory across restarts");
}

Result<std::unique_ptr<Provider>> Provider::open(std::string_view spec, const ProviderOptions& options) {
  if (spec == "soft" || spec.starts_with("soft:")) {
    return open_soft_provider(spec.size() > 5 ? spec.substr(5) : std::string_view{}, options);
  }
  if (spec.starts_with("fault:") || spec.starts_with("fault(")) {
    return open_fault_provider(spec.substr(5), options);
  }
  if (!options.keep_dir.empty()) {
    return make_error(Errc::invalid_argument,
                      "the " + std::string(spec) + " provider cannot keep memory across restarts (keep_dir)");
  }
  if (spec.starts_with("verbs:") && spec.size() > 6) {
    return open_verbs_provider(spec.substr(6));
  }
  if (spec.starts_with("dpdk:")) {
#if CATENA_HAVE_DPDK
    return open_dpdk_provider(spec.substr(5));
#else
    return make_error(
        Errc::no_device,
        "this build has no DPDK (libdpdk was not found at configure time, or CATENA_WITH_DPDK=OFF)");
#endif
  }
  return make_error(Errc::invalid_argument,
                    "unknown provider spec '" + std::string(spec) +
                        "' (expected 'soft', 'soft:tcp', 'soft:shm', 'verbs:<device>[,oob]', "
                        "'dpdk:<port>' or 'fault:<inner>')");
}

}  // namespace catena::fabric
