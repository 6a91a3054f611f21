#include "soft/conn_manager.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <sys/eventfd.h>

namespace catena::fabric::soft {

Result<std::unique_ptr<ConnectionManager>> ConnectionManager::create() {
  std::unique_ptr<ConnectionManager> m(new ConnectionManager());
  m->epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (m->epfd_ < 0) {
    return make_error(Errc::io_error, std::string("epoll_create1: ") + std::strerror(errno));
  }
  m->wakefd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (m->wakefd_ < 0) {
    return make_error(Errc::io_error, std::string("eventfd: ") + std::strerror(errno));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  if (epoll_ctl(m->epfd_, EPOLL_CTL_ADD, m->wakefd_, &ev) != 0) {
    return make_error(Errc::io_error, std::string("epoll_ctl: ") + std::strerror(errno));
  }
  m->thread_ = std::thread([p = m.get()] { p->run(); });
  m->thread_id_ = m->thread_.get_id();
  return m;
}

ConnectionManager::~ConnectionManager() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  if (thread_.joinable()) {
    wake();
    thread_.join();
  }
  if (wakefd_ >= 0) {
    close(wakefd_);
  }
  if (epfd_ >= 0) {
    close(epfd_);
  }
}

void ConnectionManager::wake() {
  std::uint64_t one = 1;
  (void)!write(wakefd_, &one, sizeof one);
}

Result<void> ConnectionManager::add(int fd, std::uint32_t events, Watcher* w) {
  std::lock_guard lock(mu_);
  std::uint64_t token = next_token_++;
  if (fd >= 0) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = token;
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      return make_error(Errc::io_error, std::string("epoll_ctl(ADD): ") + std::strerror(errno));
    }
  }
  entries_[token] = Entry{fd, w, {}, false};
  w->watch_token_ = token;
  return {};
}

void ConnectionManager::rearm(std::uint64_t token, std::uint32_t events) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(token);
  if (it == entries_.end() || it->second.fd < 0) {
    return;
  }
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  epoll_ctl(epfd_, EPOLL_CTL_MOD, it->second.fd, &ev);
}

void ConnectionManager::set_timer(std::uint64_t token, Clock::time_point when) {
  bool earliest = false;
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(token);
    if (it == entries_.end()) {
      return;
    }
    it->second.timer = when;
    it->second.timer_set = true;
    earliest = timers_.empty() || when < timers_.top().first;
    timers_.emplace(when, token);
  }
  if (earliest && !on_manager_thread()) {
    wake();
  }
}

void ConnectionManager::remove(std::uint64_t token) {
  if (token == 0) {
    return;  // never registered
  }
  std::unique_lock lock(mu_);
  auto it = entries_.find(token);
  if (it != entries_.end()) {
    if (it->second.fd >= 0) {
      epoll_ctl(epfd_, EPOLL_CTL_DEL, it->second.fd, nullptr);
    }
    entries_.erase(it);
  }
  if (!on_manager_thread()) {
    idle_cv_.wait(lock, [&] { return in_callback_ != token; });
  }
}

void ConnectionManager::sync() {
  if (on_manager_thread()) return;
  std::unique_lock lock(mu_);
  // The pass running now may have polled before the caller's events were
  // ready; the next one starts after this call and polls without blocking.
  const std::uint64_t target = passes_started_ + 1;
  sync_until_ = std::max(sync_until_, target);
  lock.unlock();
  wake();
  lock.lock();
  idle_cv_.wait(lock, [&] { return passes_done_ >= target || stop_; });
}

void ConnectionManager::dispatch(std::uint64_t token, std::uint32_t events, bool timer) {
  Watcher* w = nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(token);
    if (it == entries_.end()) {
      return;
    }
    w = it->second.watcher;
    in_callback_ = token;
  }
  if (timer) {
    w->on_timer();
  } else {
    w->on_ready(events);
  }
  {
    std::lock_guard lock(mu_);
    in_callback_ = 0;
  }
  idle_cv_.notify_all();
}

void ConnectionManager::run() {
  constexpr int kMaxEvents = 64;
  epoll_event evs[kMaxEvents];
  for (;;) {
    int timeout_ms = -1;
    {
      std::lock_guard lock(mu_);
      if (stop_) {
        return;
      }
      if (!timers_.empty()) {
        auto left = timers_.top().first - Clock::now();
        auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
        timeout_ms = ms < 0 ? 0 : static_cast<int>(ms);
      }
      if (++passes_started_ <= sync_until_) timeout_ms = 0;
    }
    int n = epoll_wait(epfd_, evs, kMaxEvents, timeout_ms);
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.u64 == 0) {
        std::uint64_t v;
        (void)!read(wakefd_, &v, sizeof v);
        continue;
      }
      dispatch(evs[i].data.u64, evs[i].events, false);
    }
    for (;;) {
      std::uint64_t due = 0;
      {
        std::lock_guard lock(mu_);
        auto now = Clock::now();
        while (!timers_.empty() && timers_.top().first <= now) {
          auto [when, token] = timers_.top();
          timers_.pop();
          auto it = entries_.find(token);
          // Stale items (timer replaced or watcher gone) are skipped.
          if (it == entries_.end() || !it->second.timer_set || it->second.timer != when) {
            continue;
          }
          it->second.timer_set = false;
          due = token;
          break;
        }
      }
      if (due == 0) {
        break;
      }
      dispatch(due, 0, true);
    }
    {
      std::lock_guard lock(mu_);
      ++passes_done_;
    }
    idle_cv_.notify_all();
  }
}

}  // namespace catena::fabric::soft
