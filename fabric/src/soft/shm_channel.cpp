#include "soft/shm_channel.hpp"

#include <utility>

namespace catena::fabric::soft {

Result<OwnChannel> OwnChannel::allocate(std::shared_ptr<Core> core, std::uint32_t capacity) {
  auto off = core->arena().allocate_channel_range(channel_bytes(capacity));
  if (!off) {
    return off.error();
  }
  OwnChannel c;
  c.core_ = std::move(core);
  c.offset_ = off.value();
  c.capacity_ = capacity;
  do {
    c.token_ = random_u64();
  } while (c.token_ == 0);
  // Fresh arena pages are zero: every slot starts at seq 0 ("never posted").
  c.block()->token.store(c.token_, std::memory_order_release);
  return c;
}

OwnChannel& OwnChannel::operator=(OwnChannel&& o) noexcept {
  if (this != &o) {
    release();
    core_ = std::move(o.core_);
    offset_ = std::exchange(o.offset_, 0);
    capacity_ = std::exchange(o.capacity_, 0);
    token_ = std::exchange(o.token_, 0);
  }
  return *this;
}

void OwnChannel::release() {
  if (!core_) {
    return;
  }
  block()->token.store(0, std::memory_order_seq_cst);
  if (core_->quiesce()) {
    core_->arena().free_channel_range(offset_, channel_bytes(capacity_));
  } else {
    core_->arena().quarantine_range(offset_, channel_bytes(capacity_));
  }
  core_.reset();
}

}  // namespace catena::fabric::soft
