// Idle strategies for polling agents. A data-plane thread calls
// `idle(work_count)` after each pass: work resets the back-off, no work spins
// a little, then yields, then parks. On a 2-core box pure spinning starves
// the other processes of a chain (measured: 16 ms round trips instead of
// ~20 us), so every polling loop in Catena uses one of these.
#pragma once

#include <cstdint>
#include <ctime>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace catena::fabric {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Spin `spins` times, then sched_yield `yields` times, then sleep with
// exponential back-off from `min_park_ns` up to `max_park_ns`.
class BackoffIdle {
 public:
  struct Config {
    std::uint32_t spins = 200;
    std::uint32_t yields = 50;
    std::uint32_t min_park_ns = 1'000;
    std::uint32_t max_park_ns = 1'000'000;
  };

  BackoffIdle() : BackoffIdle(Config{}) {}
  explicit BackoffIdle(Config cfg) : cfg_(cfg), park_ns_(cfg.min_park_ns) {}

  void idle(int work_count) noexcept {
    if (work_count > 0) {
      reset();
      return;
    }
    idle();
  }

  void idle() noexcept {
    if (spins_ < cfg_.spins) {
      ++spins_;
      cpu_relax();
    } else if (yields_ < cfg_.yields) {
      ++yields_;
      std::this_thread::yield();
    } else {
      timespec ts{0, static_cast<long>(park_ns_)};
      nanosleep(&ts, nullptr);
      park_ns_ = park_ns_ * 2 > cfg_.max_park_ns ? cfg_.max_park_ns : park_ns_ * 2;
    }
  }

  void reset() noexcept {
    spins_ = 0;
    yields_ = 0;
    park_ns_ = cfg_.min_park_ns;
  }

 private:
  Config cfg_;
  std::uint32_t spins_ = 0;
  std::uint32_t yields_ = 0;
  std::uint32_t park_ns_;
};

// Pure spinning; only for pinned threads that own a core (benchmarks).
class BusySpinIdle {
 public:
  void idle(int) noexcept { cpu_relax(); }
  void idle() noexcept { cpu_relax(); }
  void reset() noexcept {}
};

}  // namespace catena::fabric
