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
  return Error{from(e.code), e.message};
}

// What the client API returns: a value or an Error. Built from a
// fabric::Error too, mapped on the way out.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                    // NOLINT(google-explicit-constructor)
  Result(Error err) : v_(std::move(err)) {}                    // NOLINT(google-explicit-constructor)
  Result(const fabric::Error& err) : v_(client::from(err)) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T& value() const& { return std::get<0>(v_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  [[nodiscard]] const Error& error() const { return std::get<1>(v_); }
  [[nodiscard]] ErrorCode code() const noexcept { return ok() ? ErrorCode::ok : std::get<1>(v_).code; }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error err) : err_(std::move(err)) {}                    // NOLINT(google-explicit-constructor)
  Result(const fabric::Error& err) : err_(client::from(err)) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool ok() const noexcept { return err_.code == ErrorCode::ok; }
  explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] const Error& error() const { return err_; }
  [[nodiscard]] ErrorCode code() const noexcept { return err_.code; }

 private:
  Error err_;
};

}  // namespace catena::client
