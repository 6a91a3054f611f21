// Where a provider's listener can be reached. An RDMA device is reached
// through the IP addresses of the network interface it runs over (RoCE and
// soft-RoCE: its Ethernet interface or VLANs; InfiniBand: its IPoIB
// interface). A verbs listener bound anywhere else (127.0.0.1, another NIC)
// starts fine on most devices, and every connect to it then fails, so the
// daemon checks its listen address here before it starts, and picks the
// device's own address when none is given.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <catena/fabric/result.hpp>

namespace catena::fabric {

// The RDMA device a provider spec runs on ("verbs:<dev>", also inside
// "fault(...):"); empty for the soft provider.
[[nodiscard]] std::string_view verbs_device_of(std::string_view spec);

// The bytes of the soft provider's arena on huge pages that `spec` asks for
// (`soft:...,huge=<MiB>`, also under `fault:`), 0 for a spec without them.
// Every provider a process opens with such a spec reserves that much.
[[nodiscard]] std::uint64_t soft_huge_arena_bytes(std::string_view spec);

// The IP addresses of the interfaces RDMA device `device` runs over, IPv4
// first, from sysfs and getifaddrs (no verbs call). Errc::no_device if the
// device does not exist (or the kernel has no RDMA).
Result<std::vector<std::string>> device_addresses(std::string_view device);

// The rule, given a device's addresses: `requested` is "host:port", "host"
// (port 0) or "" (the device's first address, port 0). A host the device
// does not serve, a wildcard and a loopback address are refused with
// Errc::invalid_argument naming the device's addresses.
Result<std::string> choose_verbs_listen_address(std::string_view device,
                                                const std::vector<std::string>& served,
                                                std::string_view requested);

// The address a listener of provider `spec` should bind: for verbs the rule
// above on the device's real addresses; for soft `requested`, or
// 127.0.0.1:0 when it is empty.
Result<std::string> listen_address_for(std::string_view spec, std::string_view requested);

}  // namespace catena::fabric
