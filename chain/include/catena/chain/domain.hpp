// The fabric protection domain (fabric.hpp) of a channel's memory and
// connections: one per tenant. A channel named "T.rest" is in tenant T's
// namespace (README "Tenants"), so its segments, publisher rings, link
// buffers and every connection to its replicas are in T's domain, on every
// node and client alike: a queue pair of one tenant's connection cannot
// reach another tenant's memory (verbs: one ibv_pd per tenant). A name
// without '.' is in the default domain.
#pragma once

#include <string_view>

#include <catena/fabric/fabric.hpp>

namespace catena::chain {

// 0 (the default domain) for a name without '.', else a 64-bit hash of the
// part before the first '.', never 0. The same on every node and client.
[[nodiscard]] fabric::DomainId domain_of_channel(std::string_view channel) noexcept;

}  // namespace catena::chain
