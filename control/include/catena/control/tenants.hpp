// Tenants (README "Tenants"): a tenant T owns the channels and groups whose
// names start with "T." (its namespace) and is known by a bearer token the
// controller issued; the controller keeps only the token's SHA-256.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <catena/control/result.hpp>

namespace catena::control {

inline constexpr char kTenantSeparator = '.';
inline constexpr std::size_t kMaxTenantNameLength = 64;
inline constexpr std::size_t kTokenBytes = 32;  // random bytes; the token is their hex

// [A-Za-z0-9_-]{1,64}: a channel-name character set without the separator.
[[nodiscard]] Result<void> validate_tenant_name(std::string_view name);
// Whether name (a channel or group) lies in tenant's namespace.
[[nodiscard]] bool in_namespace(std::string_view tenant, std::string_view name) noexcept;
// The tenant whose namespace would hold name: what precedes the first
// separator, or empty when name has none.
[[nodiscard]] std::string_view namespace_of(std::string_view name) noexcept;
// kTokenBytes from the system's random source as 2 * kTokenBytes hex
// digits; nullopt if the random source failed.
[[nodiscard]] std::optional<std::string> new_token();
// The 32-byte SHA-256 of token.
[[nodiscard]] std::string token_sha256(std::string_view token);
// The token in a file (surrounding whitespace dropped): INVALID_ARGUMENT if
// it cannot be read or holds fewer than 16 characters.
[[nodiscard]] Result<std::string> read_token_file(const std::string& path);
// a == b in time that depends only on their lengths.
[[nodiscard]] bool same_secret(std::string_view a, std::string_view b) noexcept;

}  // namespace catena::control
