// Error values for the control plane. The controller core, the broker-admin
// seam and ControllerClient return these; only the Thrift edges translate
// them to and from the CatenaError exception on the wire.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <catena/control/idl/catena_types.h>
#include <catena/fabric/expected.hpp>

namespace catena::control {

using ErrorCode = idl::ErrorCode::type;

[[nodiscard]] std::string_view code_name(ErrorCode code) noexcept;

// An error with its wire code, a message for people and, for STALE_EPOCH,
// the route the refusing side holds so the caller can go there directly
// (for NOT_LEADER from a follower, the leader's address).
struct ControlError {
  ErrorCode code = idl::ErrorCode::INTERNAL;
  std::string message;
  std::optional<idl::PartitionRoute> current_route;
  std::optional<std::string> leader_address;

  [[nodiscard]] idl::CatenaError to_thrift() const;
  [[nodiscard]] static ControlError from_thrift(const idl::CatenaError& e);
  [[nodiscard]] std::string describe() const;  // "STALE_EPOCH: message"
};

[[nodiscard]] inline ControlError make_error(ErrorCode code, std::string message) {
  return ControlError{code, std::move(message), std::nullopt, std::nullopt};
}
// The caller's request is wrong (INVALID_ARGUMENT): the message says how.
[[nodiscard]] inline ControlError invalid_argument(std::string message) {
  return make_error(idl::ErrorCode::INVALID_ARGUMENT, std::move(message));
}

// A value or a ControlError (the one result template, catena::Expected).
template <class T>
using Result = Expected<T, ControlError>;

}  // namespace catena::control
