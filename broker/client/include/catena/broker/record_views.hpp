// Internal: the public record views (catena/client/headers.hpp) over the
// chain's (chain/record.hpp). The public HeaderField is a separate
// definition laid out as chain::HeaderField, so a span of one is viewed as
// a span of the other (checked here); Headers reads the attributes block
// chain::HeaderFields decoded.
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>

#include <catena/chain/record.hpp>
#include <catena/client/headers.hpp>

namespace catena {

static_assert(std::is_standard_layout_v<HeaderField> && std::is_standard_layout_v<chain::HeaderField>);
static_assert(sizeof(HeaderField) == sizeof(chain::HeaderField));
static_assert(alignof(HeaderField) == alignof(chain::HeaderField));
static_assert(offsetof(HeaderField, name) == offsetof(chain::HeaderField, name));
static_assert(offsetof(HeaderField, value) == offsetof(chain::HeaderField, value));

// The public headers as the chain's (the same bytes: no copy).
inline std::span<const chain::HeaderField> chain_headers(std::span<const HeaderField> h) noexcept {
  return {reinterpret_cast<const chain::HeaderField*>(h.data()), h.size()};
}

namespace detail {
struct HeadersAccess {
  static Headers make(const chain::HeaderFields& h) noexcept {
    return Headers(h.data(), static_cast<std::uint16_t>(h.size()));
  }
};
}  // namespace detail

// A decoded record's headers as the public view (same block, in place).
inline Headers public_headers(const chain::HeaderFields& h) noexcept {
  return detail::HeadersAccess::make(h);
}

}  // namespace catena
