// catena::Clock: the one clock every layer reads. Everything that decides on
// elapsed time (TTL expiry, roll-by-age, failure detection, leases, push
// back-off, retransmission timers, injected delays) reads an injected Clock,
// so tests drive time with ManualClock and the simulation with its own clock
// instead of sleeping.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace catena {

class Clock {
 public:
  using duration = std::chrono::nanoseconds;
  using time_point = std::chrono::time_point<std::chrono::steady_clock, duration>;

  virtual ~Clock() = default;
  // Monotonic.
  [[nodiscard]] virtual time_point now() const noexcept = 0;
  // Setup threads only (connect, accept, injected delays): waits `d` of this
  // clock's time. A clock that only moves when told to moves itself instead.
  virtual void sleep_for(duration d) const = 0;

  // now() as nanoseconds since the clock's arbitrary epoch.
  [[nodiscard]] std::uint64_t now_ns() const noexcept {
    return static_cast<std::uint64_t>(now().time_since_epoch().count());
  }
};

// The monotonic system clock. Stateless; share instance() freely.
class SteadyClock final : public Clock {
 public:
  [[nodiscard]] time_point now() const noexcept override { return std::chrono::steady_clock::now(); }
  void sleep_for(duration d) const override { std::this_thread::sleep_for(d); }
  static const SteadyClock& instance() {
    static const SteadyClock c;
    return c;
  }
};

// A clock that only moves when told to: advance(), or a sleep_for() that
// passes the time at once. Thread-safe: tests advance it from the test
// thread while the code under test reads it from others. Starts an hour in,
// so no reading is ever zero.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(time_point start = time_point{std::chrono::hours(1)})
      : ns_(start.time_since_epoch().count()) {}

  [[nodiscard]] time_point now() const noexcept override {
    return time_point{duration{ns_.load(std::memory_order_acquire)}};
  }
  void sleep_for(duration d) const override { advance(d); }
  void advance(duration d) const noexcept {
    if (d.count() > 0) ns_.fetch_add(d.count(), std::memory_order_acq_rel);
  }

 private:
  mutable std::atomic<duration::rep> ns_;
};

// Wall-clock timestamps for records (what a subscriber compares across
// hosts); never used to measure elapsed time.
inline std::uint64_t wall_clock_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace catena
