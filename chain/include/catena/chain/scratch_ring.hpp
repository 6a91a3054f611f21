// Sources of small one-sided writes (commit words up the chain, pads into
// subscribers' rings): slots of one registered region, reused round-robin.
// A slot is rewritten kSlots writes later; a write's source must stay
// intact until it completes, so a replica keeps fewer than kSlots small
// writes in flight (one commit word per link, one pad per subscriber: see
// ReplicaLimits::max_subscribers).
//
// Threading: the replica's data-plane thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include <catena/fabric/fabric.hpp>

namespace catena::chain {

class ScratchRing {
 public:
  static constexpr std::uint32_t kSlotBytes = 64;
  static constexpr std::uint32_t kSlots = 256;

  static fabric::Result<ScratchRing> create(fabric::Provider& provider,
                                            fabric::DomainId domain = fabric::kDefaultDomain) {
    auto region = provider.allocate(std::size_t{kSlotBytes} * kSlots, fabric::kLocalWrite, domain);
    if (!region) return region.error();
    ScratchRing r;
    r.region_ = std::move(region.value());
    return r;
  }

  // Copies `len` (at most kSlotBytes) bytes into the next slot and returns
  // it as the source of a write.
  fabric::LocalBuffer stage(const void* bytes, std::uint32_t len) {
    const std::uint32_t n = std::min(len, kSlotBytes);
    const std::size_t at = std::size_t{next_++ % kSlots} * kSlotBytes;
    std::memcpy(region_->data() + at, bytes, n);
    return {region_.get(), at, n};
  }

 private:
  std::unique_ptr<fabric::MemoryRegion> region_;
  std::uint32_t next_ = 0;
};

}  // namespace catena::chain
