// Clang's thread-safety annotations (as in LevelDB's port/thread_annotations.h
// and Abseil's base/thread_annotations.h), and a mutex that carries them.
//
// State a mutex protects is declared `GUARDED_BY(mu_)`; a function that must
// be called with it held is `REQUIRES(mu_)`, one that takes it itself
// `EXCLUDES(mu_)`. Clang checks these with -Wthread-safety (on in every
// Clang build, an error with CATENA_WERROR: see the top CMakeLists.txt);
// GCC has no such analysis and the macros expand to nothing there.
//
// std::mutex carries no annotations in libstdc++, so the analysis cannot see
// it taken: annotated state is protected by catena::Mutex and locked with
// catena::MutexLock (or catena::UniqueLock, which a condition variable can
// wait on).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#if defined(__clang__)
#define CATENA_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define CATENA_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) CATENA_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY CATENA_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) CATENA_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) CATENA_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) CATENA_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) CATENA_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define REQUIRES(...) CATENA_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) CATENA_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) CATENA_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) CATENA_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) CATENA_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) CATENA_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) CATENA_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) CATENA_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) CATENA_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) CATENA_THREAD_ANNOTATION(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS CATENA_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace catena {

// A std::mutex the analysis knows. Same cost, same semantics.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds the lock where it cannot see it (no
  // check at run time).
  void assert_held() const ASSERT_CAPABILITY(this) {}

  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
};

// std::lock_guard for a Mutex.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// A held lock a condition variable can wait on: wait() releases and retakes
// the mutex inside, which the analysis treats as held throughout (as Abseil's
// CondVar does).
class SCOPED_CAPABILITY UniqueLock {
 public:
  explicit UniqueLock(Mutex& mu) ACQUIRE(mu) : lk_(mu.native()) {}
  ~UniqueLock() RELEASE() {}
  UniqueLock(const UniqueLock&) = delete;
  UniqueLock& operator=(const UniqueLock&) = delete;

  template <class Pred>
  void wait(std::condition_variable& cv, Pred pred) {
    cv.wait(lk_, std::move(pred));
  }
  template <class Rep, class Period, class Pred>
  bool wait_for(std::condition_variable& cv, const std::chrono::duration<Rep, Period>& d, Pred pred) {
    return cv.wait_for(lk_, d, std::move(pred));
  }
  template <class Clock, class Duration, class Pred>
  bool wait_until(std::condition_variable& cv, const std::chrono::time_point<Clock, Duration>& t, Pred pred) {
    return cv.wait_until(lk_, t, std::move(pred));
  }

 private:
  std::unique_lock<std::mutex> lk_;
};

}  // namespace catena
