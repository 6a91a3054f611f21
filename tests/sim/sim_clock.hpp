// The simulation's one clock: the chain's, the controller's and the fault
// injector's time all read it, and only the simulation moves it. A fault
// that makes setup wait (a connect to a silent peer) advances it, as if the
// wait had happened; nothing in the simulation ever sleeps.
//
// Threading: the controller reads it from its probe and push tasks while
// the simulation thread is blocked in Controller::tick(); hence atomic.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include <catena/chain/clock.hpp>
#include <catena/control/clock.hpp>
#include <catena/fabric/fault_provider.hpp>

namespace catena::sim {

class SimClock final : public chain::Clock, public control::Clock, public fabric::FaultClock {
 public:
  [[nodiscard]] std::uint64_t now_ns() const noexcept override { return ns_.load(std::memory_order_acquire); }
  [[nodiscard]] time_point now() const noexcept override {
    return time_point{duration{static_cast<duration::rep>(now_ns())}};
  }
  void sleep_for(std::chrono::nanoseconds d) const override { advance(d); }
  void advance(std::chrono::nanoseconds d) const {
    if (d.count() > 0) ns_.fetch_add(static_cast<std::uint64_t>(d.count()), std::memory_order_acq_rel);
  }

 private:
  mutable std::atomic<std::uint64_t> ns_{3'600'000'000'000ull};  // an hour in: no clock reads 0
};

}  // namespace catena::sim
