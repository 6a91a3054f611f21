// catena::connect(): the SDK's way in. Public: the standard library only.
//
//   auto routes = catena::connect("h1:7400,h2:7400");
//   if (!routes) { routes.error().describe(); ... }
//   auto pub = catena::Publisher::create(**routes, "orders");
//
// The RouteSource it returns asks the controllers (any of the list; it
// follows the leader) for channel layouts, routes and producer epochs, and
// caches routes. It does not dial here: the first call does (and each call
// retries the list), so a controller that is down now answers
// controller_unavailable then, not here. It must outlive the publishers and
// subscribers created with it.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <catena/client/api.hpp>
#include <catena/client/error.hpp>
#include <catena/client/routes.hpp>

namespace catena {

struct ConnectOptions {
  // The tenant's (or admin's) token when the controller requires one
  // (README "Tenants"); sent on every new connection.
  std::string token;
  std::chrono::milliseconds connect_timeout{1000};  // per controller address
  std::chrono::milliseconds rpc_timeout{5000};
  std::string client_name = "client";  // for people: in the controller's logs
};

// `controllers`: "host:port[,host:port...]" ("[v6addr]:port" too). Errors:
// invalid_argument for an empty or malformed list (the message names the
// bad address).
[[nodiscard]] CATENA_API client::Result<std::unique_ptr<RouteSource>> connect(
    const std::string& controllers, const ConnectOptions& options = {});

}  // namespace catena
