#include <fmt/format.h>
#include <thrift/TApplicationException.h>
#include <thrift/protocol/TProtocolException.h>
#include <thrift/transport/TTransportException.h>

#include <catena/control/address.hpp>
#include <catena/control/idl/BrokerAdmin.h>
#include <catena/control/thrift_broker_admin.hpp>

#include "thrift_socket.hpp"

namespace catena::control {

struct ThriftBrokerAdmin::Connection {
  Mutex mu;  // one call at a time on the connection
  detail::ThriftConnection link GUARDED_BY(mu);
  std::unique_ptr<idl::BrokerAdminClient> client GUARDED_BY(mu);
  // What the connection authenticated with (BrokerAdmin.authenticate);
  // empty: nothing yet.
  std::string secret GUARDED_BY(mu);
  std::int64_t controller_epoch GUARDED_BY(mu) = 0;
};

ThriftBrokerAdmin::~ThriftBrokerAdmin() {
  MutexLock lock(mu_);
  for (auto& [addr, conn] : connections_) {
    MutexLock conn_lock(conn->mu);
    conn->client.reset();
    conn->link.close();
  }
}

template <class Fn>
Result<void> ThriftBrokerAdmin::call(const BrokerTarget& to, std::chrono::milliseconds connect_timeout,
                                     std::chrono::milliseconds timeout, Fn&& fn) {
  auto peer = parse_host_port(to.admin_addr);
  if (!peer) return peer.error();
  std::shared_ptr<Connection> conn;
  {
    MutexLock lock(mu_);
    auto& slot = connections_[to.admin_addr];
    if (!slot) slot = std::make_shared<Connection>();
    conn = slot;
  }
  MutexLock conn_lock(conn->mu);
  auto drop = [&] {
    conn->mu.assert_held();  // called below, under conn_lock
    conn->client.reset();
    conn->link.close();
    conn->secret.clear();
  };
  if (conn->client && conn->link.stale()) drop();
  if (!conn->client) {
    auto link = detail::open_connection(*peer, connect_timeout, timeout);
    if (!link) return link.error();
    conn->link = std::move(*link);
    conn->client = std::make_unique<idl::BrokerAdminClient>(conn->link.protocol);
  }
  conn->link.set_timeout(timeout);
  try {
    // A new connection, or a caller with another epoch (a controller of
    // this process elected again): authenticate first.
    if (!to.admin_secret.empty() &&
        (conn->secret != to.admin_secret || conn->controller_epoch != to.controller_epoch)) {
      conn->secret.clear();
      conn->client->authenticate(to.admin_secret, to.controller_epoch);
      conn->secret = to.admin_secret;
      conn->controller_epoch = to.controller_epoch;
    }
    fn(*conn->client);
    return {};
  } catch (const idl::CatenaError& e) {
    // An answer: the connection is in sync. A broker that did not take the
    // credentials (it registered after this connection authenticated, or
    // heard of a newer epoch) is asked again on the next call.
    if (e.code == idl::ErrorCode::UNAUTHENTICATED || e.code == idl::ErrorCode::NOT_LEADER)
      conn->secret.clear();
    return ControlError::from_thrift(e);
  } catch (const apache::thrift::transport::TTransportException& e) {
    drop();
    return make_error(idl::ErrorCode::UNAVAILABLE,
                      fmt::format("{} ({}): {}", to.admin_addr, to.node_id, e.what()));
  } catch (const std::exception& e) {
    // Protocol or application errors leave the stream in an unknown state.
    drop();
    return make_error(idl::ErrorCode::INTERNAL,
                      fmt::format("{} ({}): {}", to.admin_addr, to.node_id, e.what()));
  }
}

Result<void> ThriftBrokerAdmin::configure_chain(const BrokerTarget& to,
                                                const idl::ChainAssignment& assignment) {
  return call(to, options_.connect_timeout, options_.rpc_timeout,
              [&](idl::BrokerAdminClient& c) { c.configureChain(assignment); });
}

Result<void> ThriftBrokerAdmin::fence(const BrokerTarget& to, const std::string& channel,
                                      std::int32_t partition, std::int64_t epoch) {
  return call(to, options_.connect_timeout, options_.rpc_timeout,
              [&](idl::BrokerAdminClient& c) { c.fence(channel, partition, epoch); });
}

Result<idl::SealReply> ThriftBrokerAdmin::seal(const BrokerTarget& to, const std::string& channel,
                                               std::int32_t partition, std::int64_t epoch) {
  idl::SealReply reply;
  auto r = call(to, options_.connect_timeout, options_.rpc_timeout,
                [&](idl::BrokerAdminClient& c) { c.seal(reply, channel, partition, epoch); });
  if (!r) return r.error();
  return reply;
}

Result<idl::MarkerReply> ThriftBrokerAdmin::append_marker(const BrokerTarget& to, const std::string& channel,
                                                          std::int32_t partition, std::int64_t epoch,
                                                          const MarkerRequest& marker) {
  idl::MarkerReply reply;
  auto r = call(to, options_.connect_timeout, options_.rpc_timeout, [&](idl::BrokerAdminClient& c) {
    c.appendMarker(reply, channel, partition, epoch, marker.generation, marker.from_partitions,
                   marker.to_partitions);
  });
  if (!r) return r.error();
  return reply;
}

bool ThriftBrokerAdmin::refuses_connections(const BrokerTarget& to) {
  auto peer = parse_host_port(to.admin_addr);
  return peer && detail::refuses_connections(*peer, options_.probe_timeout);
}

Result<idl::NodeStats> ThriftBrokerAdmin::ping(const BrokerTarget& to) {
  idl::NodeStats stats;
  auto r = call(to, options_.probe_timeout, options_.probe_timeout,
                [&](idl::BrokerAdminClient& c) { c.ping(stats); });
  if (!r) return r.error();
  return stats;
}

}  // namespace catena::control
