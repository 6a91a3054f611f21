#include <charconv>
#include <fmt/format.h>

#include <catena/control/address.hpp>

namespace catena::control {

std::string HostPort::to_string() const {
  if (host.find(':') != std::string::npos) {
    return fmt::format("[{}]:{}", host, port);
  }
  return fmt::format("{}:{}", host, port);
}

Result<HostPort> parse_host_port(std::string_view text, bool allow_port_zero) {
  auto bad = [&](std::string_view why) {
    return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                      fmt::format("address '{}' is not host:port ({})", text, why));
  };
  HostPort out;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return bad("unterminated IPv6 bracket");
    }
    out.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return bad("missing ':port'");
    }
    out.host = std::string(text.substr(0, colon));
    if (out.host.find(':') != std::string::npos) {
      return bad("IPv6 hosts need brackets");
    }
    port_text = text.substr(colon + 1);
  }
  if (out.host.empty()) {
    return bad("empty host");
  }
  unsigned value = 0;
  const auto* end = port_text.data() + port_text.size();
  const auto [ptr, ec] = std::from_chars(port_text.data(), end, value);
  if (port_text.empty() || ec != std::errc{} || ptr != end || value > 65535) {
    return bad("port must be 0..65535");
  }
  if (value == 0 && !allow_port_zero) {
    return bad("port 0");
  }
  out.port = static_cast<std::uint16_t>(value);
  return out;
}

}  // namespace catena::control
