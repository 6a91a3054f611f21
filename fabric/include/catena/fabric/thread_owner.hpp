// ThreadOwner: the check behind a `_st` (single-thread) function, as eRPC
// asserts in_dispatch() in its own.
//
// An object whose `_st` functions belong to one thread (a broker's
// data-plane thread for a Replica, the polling thread for a Publisher or
// Subscriber) holds a ThreadOwner and starts each `_st` entry point with
// CATENA_ST_CHECK(owner_). The owner is the first thread that passes a check,
// or the one that called bind_to_current_thread() (a thread that starts to
// own an object says so before anything runs). release() hands the object
// over: the next thread to pass a check owns it from then on. A check on any
// other thread prints the function and both thread ids and aborts.
//
// Builds with CATENA_THREAD_CHECKS (CMake option; on in Debug and sanitizer
// builds) check; others compile the checks to nothing, and the member is an
// empty object. The owner is an atomic so that the check itself is no data
// race under ThreadSanitizer: it is read by the thread about to misbehave.
#pragma once

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>

namespace catena::fabric {

#if defined(CATENA_THREAD_CHECKS) && CATENA_THREAD_CHECKS

class ThreadOwner {
 public:
  ThreadOwner() = default;
  ThreadOwner(const ThreadOwner&) = delete;
  ThreadOwner& operator=(const ThreadOwner&) = delete;

  void bind_to_current_thread() { owner_.store(std::this_thread::get_id(), std::memory_order_release); }
  void release() { owner_.store(std::thread::id{}, std::memory_order_release); }

  // Binds to the calling thread if nobody owns the object yet; aborts if
  // another thread does. `what` names the function (for the message).
  void check(const char* what) const {
    const std::thread::id self = std::this_thread::get_id();
    std::thread::id owner = owner_.load(std::memory_order_acquire);
    if (owner == self) return;
    if (owner == std::thread::id{} &&
        owner_.compare_exchange_strong(owner, self, std::memory_order_acq_rel, std::memory_order_acquire)) {
      return;
    }
    std::fprintf(
        stderr,
        "catena: thread check failed: %s called on thread %zx, but the object is owned by thread %zx "
        "(a _st function runs only on its owner thread)\n",
        what, std::hash<std::thread::id>{}(self), std::hash<std::thread::id>{}(owner));
    std::fflush(stderr);
    std::abort();
  }

 private:
  mutable std::atomic<std::thread::id> owner_{};
};

#define CATENA_ST_CHECK(owner) (owner).check(__PRETTY_FUNCTION__)

#else

class ThreadOwner {
 public:
  void bind_to_current_thread() {}
  void release() {}
  void check(const char*) const {}
};

#define CATENA_ST_CHECK(owner) ((void)(owner))

#endif

}  // namespace catena::fabric
