#include "link_secret.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <string>

namespace catena::control {

std::optional<std::string> new_link_key() {
  std::string key(kLinkKeyBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(key.size())) != 1)
    return std::nullopt;
  return key;
}

std::string link_secret(const std::string& key, const std::string& channel, std::int32_t partition,
                        std::int64_t epoch) {
  // Length-prefixed fields, so no two (channel, partition, epoch) share a message.
  const std::string message = "catena-link/" + std::to_string(channel.size()) + ":" + channel + "/" +
                              std::to_string(partition) + "/" + std::to_string(epoch);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  return std::string(reinterpret_cast<const char*>(mac), kLinkSecretBytes);
}

}  // namespace catena::control
