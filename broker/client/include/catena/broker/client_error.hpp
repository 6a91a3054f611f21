// catena::client::ErrorCode: the one error vocabulary of the client API
// (Publisher, Subscriber, RouteSource). Three vocabularies meet below it:
// the fabric's (fabric::Errc), the data-plane wire's (chain::wire::Status)
// and the controller's (control::ErrorCode, mapped where the client talks to
// the controller: broker::ControllerRoutes). They are mapped here, at the
// API boundary, so a caller can tell "the controller is down, retry" from
// "bad argument, fix the call" without knowing which layer spoke.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <catena/chain/wire.hpp>
#include <catena/fabric/result.hpp>

namespace catena::client {

enum class ErrorCode : std::uint8_t {
  ok = 0,
  // The caller's mistake: retrying the same call fails the same way.
  invalid_argument,     // malformed name, option, partition, offset...
  unknown_channel,      // no channel by that name
  too_large,            // a record larger than its partition takes
  producer_fenced,      // a newer publisher with this producer id runs
  position_expired,     // the records at this position passed their TTL: seek
  data_lost,            // every replica holding these records failed
  no_committed_offset,  // the group never committed a position here
  not_owner,            // a subscriber group took the partition (or the member) away: join again
  unauthenticated,      // refused as an impostor (a replica link without the secret)
  no_device,            // the fabric provider has no device to run on
  internal,             // a bug or a protocol violation: see the message
  // Transient: the same call may succeed later.
  backpressure,            // a window or ring is full: poll() and retry
  unavailable,             // a partition's replicas cannot be reached now
  controller_unavailable,  // the controller cannot be reached now
  timeout,                 // an operation did not finish in time
  not_ready,               // the partition is being reconfigured (new chain, new head)
  resource_exhausted,      // a broker is at a session, producer or memory limit
  corrupt,                 // data failed validation in flight; it is sent again
};

// Whether the same call may succeed later, unchanged.
[[nodiscard]] bool retriable(ErrorCode code) noexcept;
[[nodiscard]] std::string_view to_string(ErrorCode code) noexcept;

[[nodiscard]] ErrorCode from(fabric::Errc code) noexcept;
[[nodiscard]] ErrorCode from(chain::wire::Status status) noexcept;

struct Error {
  Error() = default;
  Error(ErrorCode c, std::string m) : code(c), message(std::move(m)) {}
  // A fabric error seen at the API boundary, mapped (implicit, so a client
  // Result can be returned straight from a fabric error).
  Error(const fabric::Error& e);  // NOLINT(google-explicit-constructor)

  ErrorCode code = ErrorCode::ok;
  std::string message;

  [[nodiscard]] bool retriable() const noexcept { return client::retriable(code); }
  // "controller_unavailable: <message>"
  [[nodiscard]] std::string describe() const;
};

[[nodiscard]] inline Error make_error(ErrorCode code, std::string message) {
  return Error{code, std::move(message)};
}
// A fabric error seen at the API boundary.
[[nodiscard]] inline Error from(const fabric::Error& e) {
  return Error(e);
}

// What the client API returns: a value or an Error (the one result
// template, catena::Expected). Built from a fabric::Error too, mapped on the
// way out.
template <class T>
using Result = Expected<T, Error>;

}  // namespace catena::client
