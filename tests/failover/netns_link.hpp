// The failover tests use the network-namespace link that `catena chaos`
// uses too; it lives in the local-cluster library.
#pragma once

#include <catena/broker/netns_link.hpp>

namespace catena::testing {
using catena::NetnsLink;
}  // namespace catena::testing
