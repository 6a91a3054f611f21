// Error values for the fabric layer. Every fallible call returns one of these;
// exceptions are not used below setup code.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <catena/fabric/expected.hpp>

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

// A value or a fabric Error (the one result template, catena::Expected).
template <class T>
using Result = Expected<T, Error>;

inline Error make_error(Errc code, std::string message) {
  return Error{code, std::move(message)};
}

}  // namespace catena::fabric
