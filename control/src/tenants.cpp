#include <algorithm>
#include <fmt/format.h>
#include <fstream>
#include <iterator>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <catena/control/tenants.hpp>

namespace catena::control {

Result<void> validate_tenant_name(std::string_view name) {
  const auto ok = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  };
  if (name.empty() || name.size() > kMaxTenantNameLength || !std::all_of(name.begin(), name.end(), ok)) {
    return invalid_argument(
        fmt::format("tenant name must be 1..{} characters of [A-Za-z0-9_-] (no '{}'), "
                    "got '{}' ({} characters)",
                    kMaxTenantNameLength, kTenantSeparator, name.substr(0, 160), name.size()));
  }
  return {};
}

bool in_namespace(std::string_view tenant, std::string_view name) noexcept {
  return !tenant.empty() && name.size() > tenant.size() + 1 && name.substr(0, tenant.size()) == tenant &&
         name[tenant.size()] == kTenantSeparator;
}

std::string_view namespace_of(std::string_view name) noexcept {
  const auto at = name.find(kTenantSeparator);
  return at == std::string_view::npos ? std::string_view{} : name.substr(0, at);
}

std::optional<std::string> new_token() {
  unsigned char bytes[kTokenBytes];
  if (RAND_bytes(bytes, static_cast<int>(kTokenBytes)) != 1) return std::nullopt;
  std::string out;
  out.reserve(2 * kTokenBytes);
  for (const unsigned char b : bytes) out += fmt::format("{:02x}", b);
  OPENSSL_cleanse(bytes, sizeof(bytes));
  return out;
}

std::string token_sha256(std::string_view token) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest);
  return std::string(reinterpret_cast<const char*>(digest), sizeof(digest));
}

Result<std::string> read_token_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_argument(fmt::format("token file {}: cannot be read", path));
  std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!token.empty() && space(token.back())) token.pop_back();
  std::size_t first = 0;
  while (first < token.size() && space(token[first])) ++first;
  token.erase(0, first);
  if (token.size() < 16) {
    return invalid_argument(
        fmt::format("token file {}: holds {} characters, fewer than 16", path, token.size()));
  }
  return token;
}

bool same_secret(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace catena::control
