#include <fmt/format.h>

#include <catena/broker/controller_fence.hpp>
#include <catena/control/idl/catena_types.h>

namespace catena::broker {

namespace idl = control::idl;
using control::make_error;

namespace {

// Constant time in the secret's contents (its length is not secret).
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) differ |= static_cast<unsigned char>(a[i] ^ b[i]);
  return differ == 0;
}

}  // namespace

void ControllerFence::registered(const std::string& admin_secret, std::int64_t controller_epoch) {
  MutexLock lock(mu_);
  if (!admin_secret.empty()) secret_ = admin_secret;
  if (controller_epoch > stats_.newest_epoch) stats_.newest_epoch = controller_epoch;
}

bool ControllerFence::heard(std::int64_t controller_epoch) {
  MutexLock lock(mu_);
  if (controller_epoch < stats_.newest_epoch) {
    ++stats_.refused_stale;
    return false;
  }
  stats_.newest_epoch = controller_epoch;
  return true;
}

control::Result<bool> ControllerFence::admit(const std::string& admin_secret, std::int64_t controller_epoch) {
  MutexLock lock(mu_);
  // Not registered yet: nothing to check the secret against, so the epoch
  // is nobody's word (a caller's huge one would lock the controller out).
  if (secret_.empty()) return false;
  if (!same_secret(admin_secret, secret_)) {
    ++stats_.refused_unauthenticated;
    return make_error(idl::ErrorCode::UNAUTHENTICATED, "BrokerAdmin: not this broker's admin secret");
  }
  if (controller_epoch < stats_.newest_epoch) {
    ++stats_.refused_stale;
    return make_error(idl::ErrorCode::NOT_LEADER,
                      fmt::format("BrokerAdmin: controller epoch {} is older than epoch {}: a newer "
                                  "controller leads",
                                  controller_epoch, stats_.newest_epoch));
  }
  stats_.newest_epoch = controller_epoch;
  return true;
}

control::Result<void> ControllerFence::check(std::optional<std::int64_t> connection_epoch, const char* call) {
  MutexLock lock(mu_);
  if (secret_.empty()) return {};
  if (!connection_epoch) {
    ++stats_.refused_unauthenticated;
    return make_error(idl::ErrorCode::UNAUTHENTICATED,
                      fmt::format("BrokerAdmin.{}: call authenticate first (only the controller may)", call));
  }
  if (*connection_epoch < stats_.newest_epoch) {
    ++stats_.refused_stale;
    return make_error(idl::ErrorCode::NOT_LEADER,
                      fmt::format("BrokerAdmin.{}: controller epoch {} is older than epoch {}: a newer "
                                  "controller leads",
                                  call, *connection_epoch, stats_.newest_epoch));
  }
  return {};
}

ControllerFence::Stats ControllerFence::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

}  // namespace catena::broker
