#include <algorithm>
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

Result<std::vector<std::string>> parse_address_list(std::string_view text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = std::min(text.find(',', start), text.size());
    const std::string_view one = text.substr(start, comma - start);
    if (auto r = parse_host_port(one); !r) return r.error();
    out.emplace_back(one);
    start = comma + 1;
  }
  return out;
}

}  // namespace catena::control
