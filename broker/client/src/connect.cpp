// catena::connect(): the controller's RouteSource behind the SDK's public
// header (catena/client/connect.hpp), with the address list checked here so
// a typo is an invalid_argument now, not a controller_unavailable later.
#include <memory>
#include <string>
#include <utility>

#include <catena/broker/controller_routes.hpp>
#include <catena/client/connect.hpp>
#include <catena/control/address.hpp>

#include "controller_options.hpp"

namespace catena {

namespace client_detail {

client::Result<control::ControllerClient::Options> controller_options(const std::string& controllers,
                                                                      const ConnectOptions& options,
                                                                      const char* what) {
  if (controllers.empty()) {
    return client::make_error(client::ErrorCode::invalid_argument,
                              std::string(what) + ": no controller address (want host:port[,host:port...])");
  }
  if (auto list = control::parse_address_list(controllers); !list) {
    return client::make_error(
        client::ErrorCode::invalid_argument,
        std::string(what) + ": " + list.error().message + " (want host:port[,host:port...])");
  }
  control::ControllerClient::Options o;
  o.address = controllers;
  o.token = options.token;
  o.connect_timeout = options.connect_timeout;
  o.rpc_timeout = options.rpc_timeout;
  return o;
}

}  // namespace client_detail

client::Result<std::unique_ptr<RouteSource>> connect(const std::string& controllers,
                                                     const ConnectOptions& options) {
  auto o = client_detail::controller_options(controllers, options, "connect");
  if (!o) return o.error();
  return std::unique_ptr<RouteSource>(
      std::make_unique<broker::ControllerRoutes>(std::move(o.value()), options.client_name));
}

}  // namespace catena
