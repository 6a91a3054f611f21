// BoundedFifo: a first-in first-out queue of fixed capacity over storage
// allocated once, for the records or runs a frame ring has in flight (the
// publisher's unacknowledged records, the head's unacknowledged runs).
// Pushing never allocates: a full queue is the caller's back-pressure.
//
// Threading: single-threaded, owned by the session's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace catena::chain {

template <class T>
class BoundedFifo {
 public:
  BoundedFifo() = default;
  explicit BoundedFifo(std::uint32_t capacity) : slots_(capacity) {}

  [[nodiscard]] std::uint32_t size() const noexcept { return count_; }
  [[nodiscard]] std::uint32_t capacity() const noexcept { return static_cast<std::uint32_t>(slots_.size()); }
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  [[nodiscard]] bool full() const noexcept { return count_ == slots_.size(); }

  // i-th oldest entry (0 is the front); i < size().
  T& operator[](std::uint32_t i) noexcept { return slots_[(head_ + i) % slots_.size()]; }
  const T& operator[](std::uint32_t i) const noexcept { return slots_[(head_ + i) % slots_.size()]; }
  T& front() noexcept { return (*this)[0]; }
  // The newest entry, or nullptr if empty.
  T* back() noexcept { return count_ ? &(*this)[count_ - 1] : nullptr; }

  // Requires !full().
  void push_back(T value) noexcept(std::is_nothrow_move_assignable_v<T>) {
    slots_[(head_ + count_) % slots_.size()] = std::move(value);
    ++count_;
  }
  // Requires !empty(). The slot keeps its (moved-from or stale) value until reused.
  void pop_front() noexcept {
    head_ = static_cast<std::uint32_t>((head_ + 1) % slots_.size());
    --count_;
  }

 private:
  std::vector<T> slots_;
  std::uint32_t head_ = 0;
  std::uint32_t count_ = 0;
};

}  // namespace catena::chain
