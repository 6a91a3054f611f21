#include <fmt/format.h>

#include <catena/control/address.hpp>

namespace catena::control {

Result<HostPort> parse_host_port(std::string_view text, bool allow_port_zero) {
  std::string why;
  auto hp = split_host_port(text, &why, allow_port_zero ? PortRule::zero_allowed : PortRule::required);
  if (!hp) {
    return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                      fmt::format("address '{}' is not host:port ({})", text, why));
  }
  return *std::move(hp);
}

}  // namespace catena::control
