// "host:port", as every address in Catena is written (configs, NodeInfo,
// fabric addresses, the CLI): the one parser. Each layer adds what it needs
// on top (the soft provider resolves names, verbs wants an IP literal, the
// control plane its own error type), none splits a string itself.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace catena {

struct HostPort {
  std::string host;  // a name, an IPv4 address, or an IPv6 address without brackets
  std::uint16_t port = 0;
  bool has_port = true;  // false only where the port may be left out

  // "host:port", IPv6 hosts in brackets.
  [[nodiscard]] std::string to_string() const {
    const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
    return h + ":" + std::to_string(port);
  }
};

enum class PortRule : std::uint8_t {
  required,          // "host:port", port 1..65535
  zero_allowed,      // a listen address: port 0 asks the kernel for one
  optional_zero_ok,  // "host" alone too (has_port false, port 0)
};

// Accepts "host:port" and "[v6]:port" (an IPv6 host needs its brackets,
// "::1:80" is ambiguous). On error returns nullopt and says why in *why.
inline std::optional<HostPort> split_host_port(std::string_view text, std::string* why,
                                               PortRule rule = PortRule::required) {
  auto bad = [&](const char* reason) -> std::optional<HostPort> {
    if (why != nullptr) *why = reason;
    return std::nullopt;
  };
  HostPort out;
  std::string_view port_text;
  bool has_port = true;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) return bad("unterminated IPv6 bracket");
    out.host = std::string(text.substr(1, close - 1));
    if (close + 1 == text.size()) {
      has_port = false;
    } else if (text[close + 1] != ':') {
      return bad("unexpected text after the IPv6 bracket");
    } else {
      port_text = text.substr(close + 2);
    }
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      has_port = false;
      out.host = std::string(text);
    } else {
      out.host = std::string(text.substr(0, colon));
      port_text = text.substr(colon + 1);
    }
    if (out.host.find(':') != std::string::npos) return bad("IPv6 hosts need brackets");
  }
  if (out.host.empty()) return bad("empty host");
  if (out.host.find_first_of(" \t[]") != std::string::npos) return bad("bad character in host");
  if (!has_port) {
    if (rule != PortRule::optional_zero_ok) return bad("missing ':port'");
    out.has_port = false;
    return out;
  }
  unsigned value = 0;
  const char* end = port_text.data() + port_text.size();
  const auto [ptr, ec] = std::from_chars(port_text.data(), end, value);
  if (port_text.empty() || ec != std::errc{} || ptr != end || value > 65535)
    return bad("port must be 0..65535");
  if (value == 0 && rule == PortRule::required) return bad("port 0");
  out.port = static_cast<std::uint16_t>(value);
  return out;
}

}  // namespace catena
