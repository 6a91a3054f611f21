// Idle strategies for polling agents. A data-plane thread calls
// `idle(work_count)` after each pass: work resets the back-off, no work spins
// a little, then yields, then parks. On a 2-core box pure spinning starves
// the other processes of a chain (measured: 16 ms round trips instead of
// ~20 us), so every polling loop in Catena uses one of these.
#pragma once

#include <cstdint>
#include <ctime>
#include <sys/prctl.h>
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

// Spin for `spin_ns`, then sched_yield until `yield_ns` have passed without
// work, then sleep with exponential back-off from `min_park_ns` up to
// `max_park_ns`. Both phases are timed, not counted: a pass of a real polling
// loop (a broker's duty cycle, a client's poll) costs far more than a pause
// instruction, and counted spins measured 20-25 us per chain hand-off here
// (the next stage shares the core and waits for the spinner to yield),
// against ~5 us with a timed spin.
//
// A yielding thread gives its core to anything else runnable at once, so a
// long yield phase only burns time the core would otherwise idle away, and it
// keeps the thread awake for the next hand-off (a parked one waits for its
// timer). Past it, an idle thread parks and costs nothing.
class BackoffIdle {
 public:
  struct Config {
    std::uint32_t spin_ns = 3'000;
    std::uint64_t yield_ns = 250'000;
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
    const std::uint64_t now = now_ns();  // vDSO: no system call
    if (idle_since_ns_ == 0) idle_since_ns_ = now;
    const std::uint64_t idle_for = now - idle_since_ns_;
    if (idle_for < cfg_.spin_ns) {
      cpu_relax();
    } else if (idle_for < cfg_.yield_ns) {
      std::this_thread::yield();
    } else {
      // The kernel's default timer slack (50 us) would stretch every short
      // park to ~55 us; a parked data-plane thread wants its wake-up on time.
      static thread_local const bool slack_set = prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0) == 0;
      (void)slack_set;
      timespec ts{0, static_cast<long>(park_ns_)};
      nanosleep(&ts, nullptr);
      park_ns_ = park_ns_ * 2 > cfg_.max_park_ns ? cfg_.max_park_ns : park_ns_ * 2;
    }
  }

  void reset() noexcept {
    idle_since_ns_ = 0;
    park_ns_ = cfg_.min_park_ns;
  }

  [[nodiscard]] const Config& config() const noexcept { return cfg_; }

 private:
  static std::uint64_t now_ns() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
  }

  Config cfg_;
  std::uint64_t idle_since_ns_ = 0;
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
