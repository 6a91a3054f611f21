// The soft provider's connection manager: one thread per provider that waits
// in epoll for everything off the data path — incoming connections and their
// handshakes, end-of-file on the control socket of a shared-memory endpoint
// (peer death or disconnect), and TCP endpoints whose owner is not polling
// (it then drives their progress so one-sided operations still complete).
//
// Watchers register a file descriptor and/or a timer. Callbacks run on the
// manager thread, one at a time. remove() waits until a callback in flight
// for that watcher has returned, so a watcher may be destroyed right after.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <sys/epoll.h>
#include <thread>
#include <vector>

#include <catena/fabric/result.hpp>

namespace catena::fabric::soft {

using Clock = std::chrono::steady_clock;

class Watcher {
 public:
  virtual ~Watcher() = default;
  // The registered fd is ready (epoll event bits). Manager thread.
  virtual void on_ready(std::uint32_t events) = 0;
  // A timer set with ConnectionManager::set_timer expired. Manager thread.
  virtual void on_timer() {}

  // The registration's token; set by add() before any callback can run.
  [[nodiscard]] std::uint64_t watch_token() const noexcept { return watch_token_; }

 private:
  friend class ConnectionManager;
  std::uint64_t watch_token_ = 0;
};

class ConnectionManager {
 public:
  static Result<std::unique_ptr<ConnectionManager>> create();
  ~ConnectionManager();
  ConnectionManager(const ConnectionManager&) = delete;
  ConnectionManager& operator=(const ConnectionManager&) = delete;

  // Watches `fd` for `events` (EPOLL* bits; EPOLLONESHOT allowed; fd -1 for a
  // timer-only watcher). Sets w->watch_token(), which names the registration.
  Result<void> add(int fd, std::uint32_t events, Watcher* w);
  // Re-enables a one-shot registration, possibly with other events.
  void rearm(std::uint64_t token, std::uint32_t events);
  // Calls w->on_timer() once at `when` (replaces an earlier timer).
  void set_timer(std::uint64_t token, Clock::time_point when);
  // Stops watching. Waits for a callback in flight unless called from one.
  // Token 0 (a watcher never added) is ignored.
  void remove(std::uint64_t token);

  [[nodiscard]] bool on_manager_thread() const noexcept { return std::this_thread::get_id() == thread_id_; }

  // Returns once the manager has run a whole pass of its loop that started
  // after the call, so every fd that was ready then has been dispatched
  // (Provider::settle). Not from a callback.
  void sync();

 private:
  struct Entry {
    int fd = -1;
    Watcher* watcher = nullptr;
    Clock::time_point timer{};
    bool timer_set = false;
  };
  using TimerItem = std::pair<Clock::time_point, std::uint64_t>;

  ConnectionManager() = default;
  void run();
  void wake();
  void dispatch(std::uint64_t token, std::uint32_t events, bool timer);

  int epfd_ = -1;
  int wakefd_ = -1;
  std::thread thread_;
  std::thread::id thread_id_;

  std::mutex mu_;
  std::condition_variable idle_cv_;
  std::map<std::uint64_t, Entry> entries_;
  std::priority_queue<TimerItem, std::vector<TimerItem>, std::greater<>> timers_;
  std::uint64_t next_token_ = 1;
  std::uint64_t in_callback_ = 0;  // token whose callback is running, 0 if none
  // sync(): passes of the loop started (before epoll_wait) and completed;
  // passes up to sync_until_ poll without blocking.
  std::uint64_t passes_started_ = 0;
  std::uint64_t passes_done_ = 0;
  std::uint64_t sync_until_ = 0;
  bool stop_ = false;
};

}  // namespace catena::fabric::soft
