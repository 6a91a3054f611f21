// Injected time. TTL expiry, roll-by-age and failure detection read time only
// through a Clock, so tests drive it with ManualClock instead of sleeping.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace catena::chain {

class Clock {
 public:
  virtual ~Clock() = default;
  // Nanoseconds since an arbitrary epoch; monotonic.
  [[nodiscard]] virtual std::uint64_t now_ns() const noexcept = 0;
};

class SteadyClock final : public Clock {
 public:
  [[nodiscard]] std::uint64_t now_ns() const noexcept override {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
  }
  static SteadyClock& instance() {
    static SteadyClock c;
    return c;
  }
};

// Wall-clock timestamps for records (what a subscriber compares across hosts).
inline std::uint64_t wall_clock_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

class ManualClock final : public Clock {
 public:
  explicit ManualClock(std::uint64_t start_ns = 1'000'000'000) : now_(start_ns) {}
  [[nodiscard]] std::uint64_t now_ns() const noexcept override {
    return now_.load(std::memory_order_acquire);
  }
  void advance(std::chrono::nanoseconds d) { now_.fetch_add(static_cast<std::uint64_t>(d.count())); }

 private:
  std::atomic<std::uint64_t> now_;
};

}  // namespace catena::chain
