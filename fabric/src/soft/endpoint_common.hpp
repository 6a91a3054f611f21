// Pieces both soft endpoint kinds share: the limits they grant, the local
// buffer check every post makes, and the fixed-capacity ring used for their
// queues (allocated once at endpoint creation; never grows on the hot path).
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include <catena/fabric/fabric.hpp>
#include <catena/fabric/idle.hpp>

#include "nic_write.hpp"
#include "soft/arena.hpp"

namespace catena::fabric::soft {

inline constexpr std::uint32_t kMaxQueueDepth = 4096;
inline constexpr std::uint32_t kMaxInline = 256;
// Largest single write/read/send. Writes and sends are copied straight into
// the target region, so the limit only bounds one frame/copy.
inline constexpr std::uint32_t kMaxMessageSize = 1u << 30;
static_assert(kMaxQueueDepth <= kRegionTableCapacity);
static_assert(std::has_single_bit(kMaxQueueDepth));
// An endpoint's state as its atomic byte holds it.
inline constexpr auto kConnected = static_cast<std::uint8_t>(EndpointState::connected);

inline EndpointCaps grant_caps(const EndpointConfig& cfg) {
  auto clamp = [](std::uint32_t v) { return v == 0 ? 1u : (v > kMaxQueueDepth ? kMaxQueueDepth : v); };
  EndpointCaps c;
  c.send_queue_depth = clamp(cfg.send_queue_depth);
  c.recv_queue_depth = clamp(cfg.recv_queue_depth);
  c.max_inline = cfg.max_inline > kMaxInline ? kMaxInline : cfg.max_inline;
  c.max_message_size = kMaxMessageSize;
  c.max_send_size = kMaxMessageSize;
  return c;
}

// The bytes a local buffer names, if it lies inside its region and that
// region lives in this provider's arena (a region of another provider has
// no meaning here, as an lkey of another protection domain has none on a
// NIC), and is of the connection's protection domain. Zero-length buffers
// need no region.
inline Errc resolve_local(const ArenaView& own, DomainId domain, const LocalBuffer& b,
                          std::byte** out) noexcept {
  if (b.length > kMaxMessageSize) {
    return Errc::too_large;
  }
  if (b.length == 0) {
    *out = nullptr;
    return Errc::ok;
  }
  if (b.mr == nullptr || b.mr->domain() != domain || b.offset > b.mr->size() ||
      b.length > b.mr->size() - b.offset) {
    return Errc::local_protection;
  }
  std::byte* p = b.mr->data() + b.offset;
  if (!own.contains(p, b.length)) {
    return Errc::local_protection;
  }
  *out = p;
  return Errc::ok;
}

// Guards an endpoint's state shared between its data-plane thread and the
// connection manager, which steps in only off the fast path (RNR retry, TCP
// progress while nobody polls). Uncontended in steady state.
class SpinLock {
 public:
  void lock() noexcept {
    for (std::uint32_t spins = 0; flag_.exchange(true, std::memory_order_acquire);) {
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins < 256) {
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  bool try_lock() noexcept {
    return !flag_.load(std::memory_order_relaxed) && !flag_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

// Single-threaded bounded FIFO with power-of-two capacity.
template <class T>
class Ring {
 public:
  explicit Ring(std::uint32_t min_capacity = 1)
      : slots_(std::bit_ceil(min_capacity == 0 ? 1u : min_capacity)), mask_(slots_.size() - 1) {}

  [[nodiscard]] bool empty() const noexcept { return head_ == tail_; }
  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(tail_ - head_); }
  [[nodiscard]] std::size_t capacity() const noexcept { return slots_.size(); }
  [[nodiscard]] bool full() const noexcept { return size() == slots_.size(); }

  T& front() noexcept { return slots_[head_ & mask_]; }
  T& back() noexcept { return slots_[(tail_ - 1) & mask_]; }
  T& at(std::size_t i) noexcept { return slots_[(head_ + i) & mask_]; }
  // Appends a slot (contents left as they were) and returns it.
  T& push() noexcept { return slots_[tail_++ & mask_]; }
  void push(const T& v) noexcept { slots_[tail_++ & mask_] = v; }
  void pop() noexcept { ++head_; }
  void clear() noexcept { head_ = tail_; }

 private:
  std::vector<T> slots_;
  std::size_t mask_;
  std::uint64_t head_ = 0;
  std::uint64_t tail_ = 0;
};

}  // namespace catena::fabric::soft
