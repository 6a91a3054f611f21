// The simulation's clock: the chain, the controller and the fault injector
// all read it, and only the simulation moves it. A fault
// that makes setup wait (a connect to a silent peer) advances it, as if the
// wait had happened; nothing in the simulation ever sleeps.
//
// Threading: the controller reads it from its probe and push tasks while
// the simulation thread is blocked in Controller::tick(); hence atomic.
#pragma once

#include <cstdint>

#include <catena/fabric/clock.hpp>

namespace catena::sim {

// ManualClock: it starts an hour in (no reading is zero), sleep_for()
// advances it, and it is atomic.
using SimClock = catena::ManualClock;

inline constexpr std::uint64_t kMs = 1'000'000;  // one millisecond of it, in ns

}  // namespace catena::sim
