// Error values for the fabric layer. Every fallible call returns one of these;
// exceptions are not used below setup code.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace catena::fabric {

enum class Errc : std::uint8_t {
  ok = 0,
  no_device,           // no RDMA device / kernel without RDMA support
  invalid_argument,    // malformed address, bad provider spec, zero length...
  backpressure,        // send queue (or receive queue) is full: retry later
  not_connected,       // endpoint is not (yet / any more) established
  disconnected,        // the peer went away or the connection was cut
  remote_access,       // bad rkey, out of bounds, or missing access right
  local_protection,    // local buffer not inside a registered region
  too_large,           // exceeds the granted max message / inline size
  timeout,             // setup operation did not finish in time
  refused,             // peer refused the connection
  resource_exhausted,  // out of registered memory, queue pairs...
  io_error,            // a system call failed; the message says which
};

[[nodiscard]] std::string_view to_string(Errc e) noexcept;

// An error value with a human readable explanation (errno text, device name).
struct Error {
  Errc code = Errc::ok;
  std::string message;
};

// Minimal expected<T, Error>. C++20 has no std::expected; this is all we need.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Error err) : v_(std::move(err)) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T& value() const& { return std::get<0>(v_); }
  T& operator*() & { return value(); }
  T* operator->() { return &value(); }

  [[nodiscard]] const Error& error() const { return std::get<1>(v_); }
  [[nodiscard]] Errc code() const noexcept { return ok() ? Errc::ok : std::get<1>(v_).code; }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error err) : err_(std::move(err)) {}  // NOLINT(google-explicit-constructor)
  [[nodiscard]] bool ok() const noexcept { return err_.code == Errc::ok; }
  explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] const Error& error() const { return err_; }
  [[nodiscard]] Errc code() const noexcept { return err_.code; }

 private:
  Error err_;
};

inline Error make_error(Errc code, std::string message) {
  return Error{code, std::move(message)};
}

}  // namespace catena::fabric
