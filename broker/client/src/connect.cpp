// catena::connect(): the controller's RouteSource behind the SDK's public
// header (catena/client/connect.hpp), with the address list checked here so
// a typo is an invalid_argument now, not a controller_unavailable later.
#include <memory>
#include <string>
#include <utility>

#include <catena/broker/controller_routes.hpp>
#include <catena/client/connect.hpp>
#include <catena/control/address.hpp>

namespace catena {

client::Result<std::unique_ptr<RouteSource>> connect(const std::string& controllers,
                                                     const ConnectOptions& options) {
  if (controllers.empty()) {
    return client::make_error(client::ErrorCode::invalid_argument,
                              "connect: no controller address (want host:port[,host:port...])");
  }
  if (auto list = control::parse_address_list(controllers); !list) {
    return client::make_error(client::ErrorCode::invalid_argument,
                              "connect: " + list.error().message + " (want host:port[,host:port...])");
  }
  control::ControllerClient::Options o;
  o.address = controllers;
  o.token = options.token;
  o.connect_timeout = options.connect_timeout;
  o.rpc_timeout = options.rpc_timeout;
  return std::unique_ptr<RouteSource>(
      std::make_unique<broker::ControllerRoutes>(std::move(o), options.client_name));
}

}  // namespace catena
