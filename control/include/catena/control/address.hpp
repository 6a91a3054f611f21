// "host:port" addresses as they appear in configs and in NodeInfo.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <catena/control/result.hpp>
#include <catena/fabric/host_port.hpp>

namespace catena::control {

using catena::HostPort;

// Accepts "host:port" and "[v6addr]:port". Port 0 is refused unless
// allow_port_zero (listen addresses may ask the kernel for a port).
[[nodiscard]] Result<HostPort> parse_host_port(std::string_view text, bool allow_port_zero = false);

// "host:port[,host:port...]" (the controllers a client may ask), split and
// each checked as parse_host_port; the texts in order.
[[nodiscard]] Result<std::vector<std::string>> parse_address_list(std::string_view text);

}  // namespace catena::control
