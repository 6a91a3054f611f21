// How a userspace provider lands a peer's one-sided write in a registered
// region (shared by the soft and dpdk providers).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace catena::fabric {

// Lands a peer's one-sided write in a region the way a NIC's DMA does, but
// inside the C++ memory model: the owner may be polling those bytes in place
// at the same moment (a replica's commit word, read with acquire loads and
// validated), and a plain memcpy racing with those loads is a data race
// (ThreadSanitizer reports it; the compiler may tear or reorder the copy).
// Aligned 8-byte words are stored whole with relaxed atomic stores, the
// bytes around them one at a time; ordering comes from the completion that
// follows, as on a NIC.
inline void nic_write(std::byte* dst, const std::byte* src, std::size_t n) {
  auto store_byte = [](std::byte* d, std::byte v) {
    std::atomic_ref<std::byte>(*d).store(v, std::memory_order_relaxed);
  };
  for (; n > 0 && reinterpret_cast<std::uintptr_t>(dst) % 8 != 0; --n) store_byte(dst++, *src++);
  for (; n >= 8; n -= 8, dst += 8, src += 8) {
    std::uint64_t word;
    std::memcpy(&word, src, 8);
    std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(dst))
        .store(word, std::memory_order_relaxed);
  }
  for (; n > 0; --n) store_byte(dst++, *src++);
}

}  // namespace catena::fabric
