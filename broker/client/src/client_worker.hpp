// The calls a client's poll() must not wait for (a route lookup or a failure
// report to the controller, Provider::connect to a head that may be cut
// off), run on a worker thread and answered through a Call that poll()
// looks at without waiting.
//
// ClientWorker: one thread running the jobs posted to it in order. Owned by
// a Publisher or Subscriber (see publisher.hpp for why two per client, and
// none shared between clients); its destructor lets the job in progress
// finish (a lookup is bounded by the RouteSource's own timeout, a connect
// by connect_timeout), drops the rest and joins.
//
// Call<T>: the owner thread's side of one call: start() posts it, take()
// returns the answer once it came. A Call is busy until its answer is
// taken; a client never abandons one, so each session has at most one call
// of each kind queued or running, and an answer that came too late (the
// session moved on meanwhile) is taken and dropped by its owner. Passing a
// call over costs an allocation, a lock and a wake-up, and its answer an
// atomic load and an uncontended lock: per call, never per record.
#pragma once

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include <catena/broker/client_error.hpp>
#include <catena/broker/routes.hpp>
#include <catena/fabric/fabric.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace catena::client_detail {

class ClientWorker {
 public:
  // `name`: the thread's name (15 characters at most).
  explicit ClientWorker(std::string name) : name_(std::move(name)), thread_([this] { run(); }) {}
  ~ClientWorker() {
    {
      MutexLock lk(mu_);
      stopping_ = true;
      jobs_.clear();
    }
    cv_.notify_all();
    thread_.join();
  }
  ClientWorker(const ClientWorker&) = delete;
  ClientWorker& operator=(const ClientWorker&) = delete;

  void post(std::function<void()> job) {
    {
      MutexLock lk(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

 private:
  void run() {
    pthread_setname_np(pthread_self(), name_.c_str());
    for (;;) {
      std::function<void()> job;
      {
        UniqueLock lk(mu_);
        lk.wait(cv_, [&] {
          mu_.assert_held();  // the wait holds it when it asks
          return stopping_ || !jobs_.empty();
        });
        if (stopping_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  const std::string name_;
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the members above exist
};

template <class T>
class Call {
 public:
  [[nodiscard]] bool busy() const { return state_ != nullptr; }

  // Runs `fn` (returning a T) on `worker`. The call must not be busy.
  template <class Fn>
  void start(ClientWorker& worker, Fn fn) {
    state_ = std::make_shared<State>();
    worker.post([state = state_, fn = std::move(fn)]() mutable {
      T answer = fn();
      {
        MutexLock lk(state->mu);
        state->answer.emplace(std::move(answer));
      }
      state->ready.store(true, std::memory_order_release);
    });
  }

  // The answer, once it came (the call is then over); nullopt while it runs
  // or when no call was started. Never waits.
  std::optional<T> take() {
    if (!state_ || !state_->ready.load(std::memory_order_acquire)) return std::nullopt;
    std::optional<T> out;
    {
      MutexLock lk(state_->mu);
      out = std::move(state_->answer);
    }
    state_.reset();
    return out;
  }

 private:
  struct State {
    Mutex mu;
    std::optional<T> answer GUARDED_BY(mu);
    std::atomic<bool> ready{false};
  };
  std::shared_ptr<State> state_;
};

// Where a session's connection attempt stands (publisher and subscriber).
// none: no attempt (connected, or waiting for the retry); route: its route
// lookup runs; dial: connecting and handshaking (DialAttempt).
enum class Attempt : std::uint8_t { none, route, dial };

using RouteCall = Call<client::Result<Route>>;

}  // namespace catena::client_detail
