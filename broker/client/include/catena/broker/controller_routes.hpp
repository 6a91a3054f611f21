// catena::RouteSource backed by the controller (Thrift ControllerClient):
// what the client library and the CLI use to find chains. Routes are cached
// per partition and refreshed when a client reports the one it has as stale.
// The controller's error codes become client::ErrorCodes here, where the
// client meets the controller (client_error_of).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <catena/broker/routes.hpp>
#include <catena/control/controller_client.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace catena::broker {

// What a client is told of a controller error code: UNAVAILABLE (the
// controller could not be reached) becomes controller_unavailable, which is
// retriable; INVALID_ARGUMENT and UNKNOWN_CHANNEL are not.
[[nodiscard]] client::ErrorCode client_error_of(control::ErrorCode code) noexcept;
// A controller error as a client error: that code, and the controller's
// description as the message.
[[nodiscard]] client::Error to_client_error(const control::ControlError& e);

class ControllerRoutes final : public RouteSource {
 public:
  explicit ControllerRoutes(control::ControllerClient::Options options, std::string client_name = "client");

  client::Result<ChannelLayout> layout(const std::string& channel) override;
  client::Result<Route> route(const std::string& channel, std::uint32_t partition,
                              std::uint64_t known_epoch) override;
  client::Result<ProducerIdentity> init_producer(std::uint64_t producer_id) override;
  void report_unreachable(const std::string& node_id, const Route& route, const std::string& reason) override;
  client::Result<void> commit_offset(const std::string& group, const std::string& channel,
                                     std::uint32_t partition, std::uint64_t offset) override;
  client::Result<std::uint64_t> committed_offset(const std::string& group, const std::string& channel,
                                                 std::uint32_t partition) override;

  control::ControllerClient& client() { return client_; }

  static Route to_route(const control::idl::PartitionRoute& r);
  // The partition count and the last complete generation (0: none).
  static ChannelLayout to_layout(const control::idl::ChannelInfo& info);

 private:
  control::ControllerClient client_;
  std::string name_;
  Mutex mu_;
  std::map<std::pair<std::string, std::uint32_t>, Route> cache_ GUARDED_BY(mu_);
};

}  // namespace catena::broker
