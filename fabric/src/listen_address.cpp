#include <ifaddrs.h>

#include <algorithm>
#include <arpa/inet.h>
#include <filesystem>
#include <fstream>
#include <net/if.h>
#include <netinet/in.h>
#include <set>

#include <catena/fabric/host_port.hpp>
#include <catena/fabric/listen_address.hpp>

#include "soft/core.hpp"

namespace catena::fabric {
namespace {

namespace fs = std::filesystem;

// Network interfaces an RDMA device runs over, from sysfs:
//  - RoCE and soft-RoCE: each port's GID table names the netdev of every GID
//    (VLAN interfaces included);
//  - rxe and siw: the "parent" attribute names the netdev they were added on;
//  - InfiniBand (IPoIB) and physical RoCE NICs: the PCI function's net/ entries.
std::set<std::string> netdevs_of(const fs::path& dev) {
  std::set<std::string> names;
  auto add_line = [&](const fs::path& file) {
    std::ifstream in(file);
    std::string name;
    if (std::getline(in, name) && !name.empty()) names.insert(name);
  };
  std::error_code ec;
  for (const auto& port : fs::directory_iterator(dev / "ports", ec)) {
    std::error_code ec2;
    for (const auto& ndev : fs::directory_iterator(port.path() / "gid_attrs" / "ndevs", ec2))
      add_line(ndev.path());
  }
  add_line(dev / "parent");
  for (const auto& net : fs::directory_iterator(dev / "device" / "net", ec)) {
    names.insert(net.path().filename().string());
  }
  return names;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// Canonical text of an IP address ("" if `host` is not one), so "10.0.2.015"
// style variants and IPv6 spellings compare equal.
std::string canonical_ip(std::string_view host, bool* loopback, bool* wildcard) {
  std::string h(host);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  char buf[INET6_ADDRSTRLEN] = {};
  in_addr a4{};
  in6_addr a6{};
  if (inet_pton(AF_INET, h.c_str(), &a4) == 1) {
    *loopback = (ntohl(a4.s_addr) >> 24) == 127;
    *wildcard = a4.s_addr == INADDR_ANY;
    return inet_ntop(AF_INET, &a4, buf, sizeof buf) ? buf : "";
  }
  if (inet_pton(AF_INET6, h.c_str(), &a6) == 1) {
    *loopback = IN6_IS_ADDR_LOOPBACK(&a6);
    *wildcard = IN6_IS_ADDR_UNSPECIFIED(&a6);
    return inet_ntop(AF_INET6, &a6, buf, sizeof buf) ? buf : "";
  }
  return "";
}

// The provider a fault:<inner> or fault(<options>):<inner> spec wraps ("" if
// it wraps none).
std::string_view without_fault(std::string_view spec) {
  while (spec.starts_with("fault")) {
    const auto colon = spec.find(':', spec.starts_with("fault(") ? spec.find(')') : 0);
    if (colon == std::string_view::npos) return {};
    spec.remove_prefix(colon + 1);
  }
  return spec;
}

}  // namespace

std::uint64_t soft_huge_arena_bytes(std::string_view spec) {
  spec = without_fault(spec);
  if (!spec.starts_with("soft:")) return 0;
  auto o = soft::parse_options(spec.substr(5));
  return o ? o->huge_bytes : 0;
}

std::string_view verbs_device_of(std::string_view spec) {
  spec = without_fault(spec);
  if (!spec.starts_with("verbs:")) return {};
  spec.remove_prefix(6);
  return spec.substr(0, spec.find(','));  // "verbs:<dev>,oob"
}

Result<std::vector<std::string>> device_addresses(std::string_view device) {
  const fs::path dev = fs::path("/sys/class/infiniband") / std::string(device);
  std::error_code ec;
  if (device.empty() || !fs::exists(dev, ec)) {
    return make_error(Errc::no_device,
                      "no RDMA device '" + std::string(device) + "' (" +
                          (fs::exists("/sys/class/infiniband", ec) ? "not in /sys/class/infiniband"
                                                                   : "this kernel has no RDMA devices") +
                          ")");
  }
  const auto netdevs = netdevs_of(dev);
  std::vector<std::string> v4, v6;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return make_error(Errc::io_error, "getifaddrs failed");
  for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || !netdevs.contains(ifa->ifa_name)) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (ifa->ifa_addr->sa_family == AF_INET) {
      const auto* sin = reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr);
      if (inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf)) v4.emplace_back(buf);
    } else if (ifa->ifa_addr->sa_family == AF_INET6) {
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(ifa->ifa_addr);
      // A link-local address needs a scope id a peer's connect cannot carry.
      if (IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr)) continue;
      if (inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof buf)) v6.emplace_back(buf);
    }
  }
  freeifaddrs(list);
  v4.insert(v4.end(), v6.begin(), v6.end());
  return v4;
}

Result<std::string> choose_verbs_listen_address(std::string_view device,
                                                const std::vector<std::string>& served,
                                                std::string_view requested) {
  const std::string dev(device);
  if (served.empty()) {
    return make_error(Errc::invalid_argument,
                      "RDMA device '" + dev +
                          "' has no IP address: give its network interface an address "
                          "(rdma_cm reaches a device through it)");
  }
  if (requested.empty()) {
    const std::string& a = served.front();
    return (a.find(':') != std::string::npos ? "[" + a + "]" : a) + ":0";
  }
  // "host:port", "[v6]:port", "host", "[v6]", and a bare IPv6 address.
  std::string host(requested);
  std::string port = "0";
  const bool bare_v6 = !requested.starts_with('[') && requested.find(':') != requested.rfind(':');
  if (!bare_v6) {
    std::string why;
    const auto hp = split_host_port(requested, &why, PortRule::optional_zero_ok);
    if (!hp) {
      return make_error(Errc::invalid_argument, "listen address '" + std::string(requested) + "': " + why);
    }
    host = hp->host;
    if (hp->has_port) port = std::to_string(hp->port);
  }
  bool loopback = false, wildcard = false;
  const std::string ip = canonical_ip(host, &loopback, &wildcard);
  if (ip.empty()) {
    return make_error(Errc::invalid_argument, "listen address '" + std::string(requested) +
                                                  "' is not an IP address (the device's: " + join(served) +
                                                  ")");
  }
  if (std::find(served.begin(), served.end(), ip) == served.end()) {
    std::string why = loopback   ? "a loopback address is not served by any RDMA device"
                      : wildcard ? "a wildcard address cannot be given to peers as this node's address"
                                 : "RDMA device '" + dev + "' does not serve it";
    return make_error(Errc::invalid_argument, "cannot listen on " + std::string(host) + " with verbs:" + dev +
                                                  ": " + why + "; the device's addresses: " + join(served) +
                                                  " (or leave the listen address out to use the first)");
  }
  return (ip.find(':') != std::string::npos ? "[" + ip + "]" : ip) + ":" + port;
}

Result<std::string> listen_address_for(std::string_view spec, std::string_view requested) {
  const std::string_view device = verbs_device_of(spec);
  if (device.empty()) return requested.empty() ? std::string("127.0.0.1:0") : std::string(requested);
  auto served = device_addresses(device);
  if (!served) return served.error();
  return choose_verbs_listen_address(device, served.value(), requested);
}

}  // namespace catena::fabric
