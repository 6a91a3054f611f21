#include <fmt/format.h>

#include <catena/control/result.hpp>

namespace catena::control {

std::string_view code_name(ErrorCode code) noexcept {
  switch (code) {
    case idl::ErrorCode::OK:
      return "OK";
    case idl::ErrorCode::UNKNOWN_CHANNEL:
      return "UNKNOWN_CHANNEL";
    case idl::ErrorCode::CHANNEL_EXISTS:
      return "CHANNEL_EXISTS";
    case idl::ErrorCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case idl::ErrorCode::STALE_EPOCH:
      return "STALE_EPOCH";
    case idl::ErrorCode::NOT_ENOUGH_NODES:
      return "NOT_ENOUGH_NODES";
    case idl::ErrorCode::UNKNOWN_NODE:
      return "UNKNOWN_NODE";
    case idl::ErrorCode::FENCED:
      return "FENCED";
    case idl::ErrorCode::NOT_LEADER:
      return "NOT_LEADER";
    case idl::ErrorCode::NOT_HEAD:
      return "NOT_HEAD";
    case idl::ErrorCode::INTERNAL:
      return "INTERNAL";
    case idl::ErrorCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case idl::ErrorCode::NO_OFFSET:
      return "NO_OFFSET";
    case idl::ErrorCode::UNKNOWN_MEMBER:
      return "UNKNOWN_MEMBER";
    case idl::ErrorCode::NOT_OWNER:
      return "NOT_OWNER";
    case idl::ErrorCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case idl::ErrorCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case idl::ErrorCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
  }
  return "UNKNOWN_ERROR_CODE";
}

idl::CatenaError ControlError::to_thrift() const {
  idl::CatenaError e;
  e.__set_code(code);
  e.__set_message(message);
  if (current_route) e.__set_current_route(*current_route);
  if (leader_address) e.__set_leader_address(*leader_address);
  return e;
}

ControlError ControlError::from_thrift(const idl::CatenaError& e) {
  ControlError out{e.code, e.message, std::nullopt, std::nullopt};
  if (e.__isset.current_route) out.current_route = e.current_route;
  if (e.__isset.leader_address) out.leader_address = e.leader_address;
  return out;
}

std::string ControlError::describe() const {
  return fmt::format("{}: {}", code_name(code), message);
}

}  // namespace catena::control
