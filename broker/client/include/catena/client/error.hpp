// catena::client::ErrorCode: the one error vocabulary of the client SDK
// (Publisher, Subscriber, GroupSubscriber, RouteSource, connect()). Public:
// the standard library only. Inside the library three vocabularies meet
// below it (the fabric's, the data-plane wire's, the controller's) and are
// mapped to it where the client meets them (catena/broker/client_error.hpp,
// internal), so a caller can tell "the controller is down, retry" from "bad
// argument, fix the call" without knowing which layer spoke.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <catena/client/api.hpp>
#include <catena/expected.hpp>

namespace catena::client {

enum class ErrorCode : std::uint8_t {
  ok = 0,
  // The caller's mistake: retrying the same call fails the same way.
  invalid_argument,     // malformed name, option, partition, offset, address...
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
[[nodiscard]] CATENA_API bool retriable(ErrorCode code) noexcept;
// "invalid_argument", ...: a view of a string literal (NUL-terminated).
[[nodiscard]] CATENA_API std::string_view to_string(ErrorCode code) noexcept;

// How another layer's error type becomes an Error: specialised inside the
// library for its internal error types (a static `Error convert(const F&)`),
// so that a client Result can be returned straight from one. Programs
// using the SDK have no use for it.
template <class F>
struct ErrorFrom;

struct CATENA_API Error {
  Error() = default;
  Error(ErrorCode c, std::string m) : code(c), message(std::move(m)) {}
  template <class F, class = decltype(ErrorFrom<F>::convert(std::declval<const F&>()))>
  Error(const F& e) : Error(ErrorFrom<F>::convert(e)) {}  // NOLINT(google-explicit-constructor)

  ErrorCode code = ErrorCode::ok;
  std::string message;

  [[nodiscard]] bool retriable() const noexcept { return client::retriable(code); }
  // "controller_unavailable: <message>"
  [[nodiscard]] std::string describe() const;
};

[[nodiscard]] inline Error make_error(ErrorCode code, std::string message) {
  return Error{code, std::move(message)};
}

// What the client API returns: a value or an Error (catena::Expected).
template <class T>
using Result = Expected<T, Error>;

}  // namespace catena::client
