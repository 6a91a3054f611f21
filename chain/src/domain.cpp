#include <xxhash.h>

#include <catena/chain/domain.hpp>

namespace catena::chain {

fabric::DomainId domain_of_channel(std::string_view channel) noexcept {
  const auto dot = channel.find('.');
  if (dot == std::string_view::npos || dot == 0) return fabric::kDefaultDomain;
  const std::uint64_t h = XXH64(channel.data(), dot, 0);
  return h == fabric::kDefaultDomain ? 1 : h;
}

}  // namespace catena::chain
