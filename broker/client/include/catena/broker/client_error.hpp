// The client's error vocabulary (catena::client::ErrorCode, public:
// <catena/client/error.hpp>) and, internal to the library, how the layers
// below map to it: the fabric's (fabric::Errc) and the data-plane wire's
// (chain::wire::Status) here; the controller's (control::ErrorCode) where
// the client talks to the controller (broker::ControllerRoutes).
#pragma once

#include <catena/chain/wire.hpp>
#include <catena/client/error.hpp>
#include <catena/fabric/result.hpp>

namespace catena::client {

[[nodiscard]] ErrorCode from(fabric::Errc code) noexcept;
[[nodiscard]] ErrorCode from(chain::wire::Status status) noexcept;
// A fabric error seen at the API boundary.
[[nodiscard]] Error from(const fabric::Error& e);

// A fabric error converts to a client Error (mapped), so a client Result
// can be returned straight from a fabric error.
template <>
struct ErrorFrom<fabric::Error> {
  static Error convert(const fabric::Error& e) { return from(e); }
};

}  // namespace catena::client
