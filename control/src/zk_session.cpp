#include "zk_session.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace catena::control::zk {
namespace {

// The library's own lines (a line per failed connection attempt while a
// server is away): debug, since what matters reaches the caller as an error.
void log_line(const char* message) {
  spdlog::debug("zookeeper: {}", message);
}

// The library formats its lines only when they would be shown (level 0
// turns its logging off). Its formatting is not safe with two sessions in
// one process (the controller's metadata store and its election, several
// candidates in a test): it prints the server's address into one static
// buffer that every handle's thread shares (format_endpoint_info in
// zookeeper.c, a data race ThreadSanitizer reports). At debug level that
// race remains, at worst a garbled address in a debug line.
ZooLogLevel zk_log_level() {
  return spdlog::should_log(spdlog::level::debug) ? ZOO_LOG_LEVEL_WARN : static_cast<ZooLogLevel>(0);
}

}  // namespace

const ACL_vector* open_acl() {
  // The controllers are the only writers and find each other on a trusted
  // network, as the brokers find them; ACLs are left to the operator's
  // chroot (a known limit in the README).
  return &ZOO_OPEN_ACL_UNSAFE;
}

Result<std::unique_ptr<Session>> Session::connect(const std::string& hosts,
                                                  std::chrono::milliseconds session_timeout,
                                                  std::chrono::milliseconds connect_timeout) {
  zoo_set_debug_level(zk_log_level());
  std::unique_ptr<Session> s(new Session(hosts, connect_timeout));
  s->zh_ = zookeeper_init2(hosts.c_str(), &Session::on_event, static_cast<int>(session_timeout.count()),
                           nullptr, s.get(), 0, &log_line);
  if (s->zh_ == nullptr) {
    return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                      fmt::format("ZooKeeper hosts '{}' are not host:port[,host:port...]", hosts));
  }
  if (!s->wait_connected(connect_timeout)) {
    return make_error(idl::ErrorCode::UNAVAILABLE, fmt::format("cannot reach ZooKeeper at {} within {} ms",
                                                               hosts, connect_timeout.count()));
  }
  return s;
}

Session::~Session() {
  // Closing ends the session at once (its ephemeral znodes go with it)
  // rather than after the session timeout.
  if (zh_ != nullptr) zookeeper_close(zh_);
}

void Session::on_event(zhandle_t* /*zh*/, int type, int state, const char* /*path*/, void* context) {
  if (type != ZOO_SESSION_EVENT) return;
  auto* self = static_cast<Session*>(context);
  {
    MutexLock lock(self->mu_);
    if (self->state_ == ZOO_CONNECTED_STATE && state != ZOO_CONNECTED_STATE) {
      self->disconnected_at_ = std::chrono::steady_clock::now();
    }
    self->state_ = state;
  }
  self->cv_.notify_all();
}

bool Session::wait_connected(std::chrono::milliseconds timeout) {
  UniqueLock lock(mu_);
  lock.wait_for(cv_, timeout, [this] {
    mu_.assert_held();  // the wait holds it when it asks
    return state_ == ZOO_CONNECTED_STATE || state_ == ZOO_EXPIRED_SESSION_STATE;
  });
  return state_ == ZOO_CONNECTED_STATE;
}

bool Session::connected() const {
  MutexLock lock(mu_);
  return state_ == ZOO_CONNECTED_STATE;
}

bool Session::expired() const {
  MutexLock lock(mu_);
  return state_ == ZOO_EXPIRED_SESSION_STATE;
}

bool Session::lost_for(std::chrono::milliseconds d) const {
  MutexLock lock(mu_);
  if (state_ == ZOO_EXPIRED_SESSION_STATE) return true;
  return state_ != ZOO_CONNECTED_STATE && std::chrono::steady_clock::now() - disconnected_at_ >= d;
}

ControlError Session::error(int rc, std::string_view what) const {
  if (rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT) {
    return make_error(
        idl::ErrorCode::UNAVAILABLE,
        fmt::format("lost the connection to ZooKeeper at {} while {} ({})", hosts_, what, zerror(rc)));
  }
  if (rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE || expired()) {
    return make_error(
        idl::ErrorCode::UNAVAILABLE,
        fmt::format("ZooKeeper session expired while {}: this controller must reopen its metadata "
                    "(restart it)",
                    what));
  }
  return make_error(idl::ErrorCode::INTERNAL, fmt::format("ZooKeeper: {}: {}", what, zerror(rc)));
}

Result<std::optional<Znode>> Session::get(const std::string& path) {
  buffer_.resize(kMaxRequestBytes + 1);
  Znode z;
  int len = static_cast<int>(buffer_.size());
  const int rc = zoo_get(zh_, path.c_str(), 0, buffer_.data(), &len, &z.stat);
  if (rc == ZNONODE) return std::optional<Znode>();
  if (rc != ZOK) return error(rc, fmt::format("reading {}", path));
  if (len > 0) z.data.assign(buffer_.data(), static_cast<std::size_t>(len));
  return std::optional<Znode>(std::move(z));
}

Result<std::vector<std::string>> Session::children(const std::string& path) {
  String_vector names{};
  const int rc = zoo_get_children(zh_, path.c_str(), 0, &names);
  if (rc != ZOK) return error(rc, fmt::format("listing {}", path));
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(names.count));
  for (int i = 0; i < names.count; ++i) out.emplace_back(names.data[i]);
  deallocate_String_vector(&names);
  return out;
}

Result<bool> Session::create(const std::string& path, std::string_view data) {
  const int rc = zoo_create(zh_, path.c_str(), data.data(), static_cast<int>(data.size()), open_acl(),
                            ZOO_PERSISTENT, nullptr, 0);
  if (rc == ZNODEEXISTS) return false;
  if (rc != ZOK) return error(rc, fmt::format("creating {}", path));
  return true;
}

Result<std::int32_t> Session::set(const std::string& path, std::string_view data, std::int32_t version) {
  Stat stat{};
  const int rc = zoo_set2(zh_, path.c_str(), data.data(), static_cast<int>(data.size()), version, &stat);
  if (rc != ZOK) {
    auto e = error(rc, fmt::format("writing {}", path));
    if (rc == ZBADVERSION) e.code = idl::ErrorCode::NOT_LEADER;
    return e;
  }
  return stat.version;
}

}  // namespace catena::control::zk
