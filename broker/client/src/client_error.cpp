#include <catena/broker/client_error.hpp>

namespace catena::client {

bool retriable(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::backpressure:
    case ErrorCode::unavailable:
    case ErrorCode::controller_unavailable:
    case ErrorCode::timeout:
    case ErrorCode::not_ready:
    case ErrorCode::resource_exhausted:
    case ErrorCode::corrupt:
      return true;
    case ErrorCode::ok:
    case ErrorCode::invalid_argument:
    case ErrorCode::unknown_channel:
    case ErrorCode::too_large:
    case ErrorCode::producer_fenced:
    case ErrorCode::position_expired:
    case ErrorCode::data_lost:
    case ErrorCode::no_committed_offset:
    case ErrorCode::not_owner:
    case ErrorCode::unauthenticated:
    case ErrorCode::no_device:
    case ErrorCode::internal:
      return false;
  }
  return false;
}

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::ok:
      return "ok";
    case ErrorCode::invalid_argument:
      return "invalid_argument";
    case ErrorCode::unknown_channel:
      return "unknown_channel";
    case ErrorCode::too_large:
      return "too_large";
    case ErrorCode::producer_fenced:
      return "producer_fenced";
    case ErrorCode::position_expired:
      return "position_expired";
    case ErrorCode::data_lost:
      return "data_lost";
    case ErrorCode::no_committed_offset:
      return "no_committed_offset";
    case ErrorCode::not_owner:
      return "not_owner";
    case ErrorCode::unauthenticated:
      return "unauthenticated";
    case ErrorCode::no_device:
      return "no_device";
    case ErrorCode::internal:
      return "internal";
    case ErrorCode::backpressure:
      return "backpressure";
    case ErrorCode::unavailable:
      return "unavailable";
    case ErrorCode::controller_unavailable:
      return "controller_unavailable";
    case ErrorCode::timeout:
      return "timeout";
    case ErrorCode::not_ready:
      return "not_ready";
    case ErrorCode::resource_exhausted:
      return "resource_exhausted";
    case ErrorCode::corrupt:
      return "corrupt";
  }
  return "unknown";
}

ErrorCode from(fabric::Errc code) noexcept {
  using fabric::Errc;
  switch (code) {
    case Errc::ok:
      return ErrorCode::ok;
    case Errc::no_device:
      return ErrorCode::no_device;
    case Errc::invalid_argument:
      return ErrorCode::invalid_argument;
    case Errc::backpressure:
      return ErrorCode::backpressure;
    case Errc::not_connected:
    case Errc::disconnected:
    case Errc::refused:
    case Errc::io_error:  // a failed connect, send or receive: the network, not the caller
      return ErrorCode::unavailable;
    case Errc::too_large:
      return ErrorCode::too_large;
    case Errc::timeout:
      return ErrorCode::timeout;
    case Errc::resource_exhausted:
      return ErrorCode::resource_exhausted;
    case Errc::remote_access:
    case Errc::local_protection:
      return ErrorCode::internal;
  }
  return ErrorCode::internal;
}

ErrorCode from(chain::wire::Status status) noexcept {
  using chain::wire::Status;
  switch (status) {
    case Status::ok:
      return ErrorCode::ok;
    case Status::unknown_channel:
      return ErrorCode::unknown_channel;
    case Status::stale_epoch:
    case Status::not_head:
    case Status::not_tail:
    case Status::not_ready:
      return ErrorCode::not_ready;
    case Status::sequence_gap:
      return ErrorCode::internal;  // the publisher resyncs; seen here it is a bug
    case Status::producer_fenced:
      return ErrorCode::producer_fenced;
    case Status::too_large:
      return ErrorCode::too_large;
    case Status::log_full:
      return ErrorCode::backpressure;
    case Status::corrupt:
      return ErrorCode::corrupt;
    case Status::position_expired:
      return ErrorCode::position_expired;
    case Status::bad_request:
      return ErrorCode::invalid_argument;
    case Status::unavailable:
      return ErrorCode::unavailable;
    case Status::data_lost:
      return ErrorCode::data_lost;
    case Status::resource_exhausted:
      return ErrorCode::resource_exhausted;
    case Status::unauthenticated:
      return ErrorCode::unauthenticated;
    case Status::moved:
      return ErrorCode::not_ready;  // clients follow a move themselves; seen only if they cannot
    case Status::remap:
      return ErrorCode::not_ready;  // internal to the publisher: it maps its keys again
  }
  return ErrorCode::internal;
}

Error from(const fabric::Error& e) {
  return Error{from(e.code), e.message};
}

std::string Error::describe() const {
  std::string out(to_string(code));
  if (!message.empty()) out += ": " + message;
  return out;
}

}  // namespace catena::client
