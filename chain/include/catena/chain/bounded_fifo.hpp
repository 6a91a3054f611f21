// BoundedFifo: a first-in first-out queue of fixed capacity over storage
// allocated once, for the records or runs a frame ring has in flight (the
// publisher's unacknowledged records, the head's unacknowledged runs).
// Pushing never allocates: a full queue is the caller's back-pressure.
//
// The storage is allocated, not initialised: a slot is constructed the
// first time it is pushed into (slots are used in order, so the constructed
// ones are always a prefix). Making a queue of thousands of slots costs one
// allocation, not a pass writing every page of it: a publisher builds a
// session per partition an alter adds while its records wait.
//
// Threading: single-threaded, owned by the session's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace catena::chain {

template <class T>
class BoundedFifo {
 public:
  BoundedFifo() = default;
  explicit BoundedFifo(std::uint32_t capacity)
      : slots_(capacity == 0 ? nullptr : std::allocator<T>{}.allocate(capacity)), capacity_(capacity) {}
  ~BoundedFifo() { release(); }
  BoundedFifo(const BoundedFifo&) = delete;
  BoundedFifo& operator=(const BoundedFifo&) = delete;
  BoundedFifo(BoundedFifo&& other) noexcept { take(other); }
  BoundedFifo& operator=(BoundedFifo&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }

  [[nodiscard]] std::uint32_t size() const noexcept { return count_; }
  [[nodiscard]] std::uint32_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  [[nodiscard]] bool full() const noexcept { return count_ == capacity_; }

  // i-th oldest entry (0 is the front); i < size().
  T& operator[](std::uint32_t i) noexcept { return slots_[(head_ + i) % capacity_]; }
  const T& operator[](std::uint32_t i) const noexcept { return slots_[(head_ + i) % capacity_]; }
  T& front() noexcept { return (*this)[0]; }
  // The newest entry, or nullptr if empty.
  T* back() noexcept { return count_ ? &(*this)[count_ - 1] : nullptr; }

  // Requires !full().
  void push_back(T value) noexcept(
      std::is_nothrow_move_constructible_v<T>&& std::is_nothrow_move_assignable_v<T>) {
    const std::uint32_t at = (head_ + count_) % capacity_;
    if (at == constructed_) {
      ::new (static_cast<void*>(slots_ + at)) T(std::move(value));
      ++constructed_;
    } else {
      slots_[at] = std::move(value);
    }
    ++count_;
  }
  // Requires !empty(). The slot keeps its (moved-from or stale) value until reused.
  void pop_front() noexcept {
    head_ = (head_ + 1) % capacity_;
    --count_;
  }

 private:
  void release() noexcept {
    if (slots_ == nullptr) return;
    std::destroy(slots_, slots_ + constructed_);
    std::allocator<T>{}.deallocate(slots_, capacity_);
    slots_ = nullptr;
  }
  void take(BoundedFifo& other) noexcept {
    slots_ = std::exchange(other.slots_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    constructed_ = std::exchange(other.constructed_, 0);
    head_ = std::exchange(other.head_, 0);
    count_ = std::exchange(other.count_, 0);
  }

  T* slots_ = nullptr;
  std::uint32_t capacity_ = 0;
  std::uint32_t constructed_ = 0;  // slots [0, constructed_) hold a T
  std::uint32_t head_ = 0;
  std::uint32_t count_ = 0;
};

}  // namespace catena::chain
