// Time as the control plane sees it. Everything that decides on elapsed time
// (failure detection, push back-off) reads a Clock, so tests drive time with
// ManualClock instead of sleeping.
#pragma once

#include <atomic>
#include <chrono>

namespace catena::control {

class Clock {
 public:
  using duration = std::chrono::nanoseconds;
  using time_point = std::chrono::time_point<std::chrono::steady_clock, duration>;

  virtual ~Clock() = default;
  [[nodiscard]] virtual time_point now() const noexcept = 0;
};

// The monotonic system clock. Stateless; share one instance freely.
class SteadyClock final : public Clock {
 public:
  [[nodiscard]] time_point now() const noexcept override { return std::chrono::steady_clock::now(); }
};

// A clock that only moves when told to. Thread-safe: tests advance it from
// the test thread while a controller reads it from others.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(time_point start = time_point{std::chrono::hours(1)})
      : ns_(start.time_since_epoch().count()) {}

  [[nodiscard]] time_point now() const noexcept override {
    return time_point{duration{ns_.load(std::memory_order_acquire)}};
  }
  void advance(duration d) noexcept { ns_.fetch_add(d.count(), std::memory_order_acq_rel); }

 private:
  std::atomic<duration::rep> ns_;
};

}  // namespace catena::control
