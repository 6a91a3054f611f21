// CRC-32C (Castagnoli), the checksum of WAL records and snapshots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace catena::control::detail {

// Extends crc (0 to start) over data.
[[nodiscard]] std::uint32_t crc32c(std::uint32_t crc, const void* data, std::size_t size) noexcept;

[[nodiscard]] inline std::uint32_t crc32c(std::string_view data) noexcept {
  return crc32c(0, data.data(), data.size());
}

}  // namespace catena::control::detail
