// The calls a client's poll() must not wait for (a route lookup or a failure
// report to the controller, Provider::connect to a head that may be cut
// off), run on worker threads and answered through a Call that poll()
// looks at without waiting.
//
// ClientWorker: the threads running the jobs posted to it, in order of
// posting. One thread unless made with more: then a job posted while every
// thread is busy starts another, up to `max_threads` (the rest queue), so
// that a connect waiting out its timeout on a head that answers nothing
// (stopped, cut off) does not hold up the dial to the head that replaced
// it. Threads, once started, stay until the worker goes. Owned by a
// Publisher or Subscriber (see publisher.hpp for why two per client, and
// none shared between clients); its destructor lets the jobs in progress
// finish (a lookup is bounded by the RouteSource's own timeout, a connect
// by connect_timeout), drops the rest and joins.
//
// Call<T>: the owner thread's side of one call: start() posts it, take()
// returns the answer once it came. A Call is busy until its answer is
// taken or the call is abandoned: abandon() drops it, a job that has not
// started yet does not run, and the answer of one that has is dropped with
// the job, on the worker's thread (a connect's endpoint is closed there).
// Passing a call over costs an allocation, a lock and a wake-up, and its
// answer an atomic load and an uncontended lock: per call, never per
// record.
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
#include <vector>

#include <catena/broker/client_error.hpp>
#include <catena/broker/routes.hpp>
#include <catena/fabric/fabric.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace catena::client_detail {

class ClientWorker {
 public:
  // `name`: the threads' name (15 characters at most).
  explicit ClientWorker(std::string name, std::size_t max_threads = 1)
      : name_(std::move(name)), max_threads_(max_threads == 0 ? 1 : max_threads) {
    MutexLock lk(mu_);
    threads_.emplace_back([this] { run(); });
  }
  ~ClientWorker() {
    std::vector<std::thread> threads;
    {
      MutexLock lk(mu_);
      stopping_ = true;
      jobs_.clear();
      threads.swap(threads_);  // no thread starts once stopping_ is set
    }
    cv_.notify_all();
    for (auto& t : threads) t.join();
  }
  ClientWorker(const ClientWorker&) = delete;
  ClientWorker& operator=(const ClientWorker&) = delete;

  void post(std::function<void()> job) {
    {
      MutexLock lk(mu_);
      jobs_.push_back(std::move(job));
      // More jobs waiting than threads free to take them: one more thread.
      if (jobs_.size() > idle_ && threads_.size() < max_threads_) threads_.emplace_back([this] { run(); });
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
        ++idle_;
        lk.wait(cv_, [&] {
          mu_.assert_held();  // the wait holds it when it asks
          return stopping_ || !jobs_.empty();
        });
        --idle_;
        if (stopping_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  const std::string name_;
  const std::size_t max_threads_;
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_ GUARDED_BY(mu_);
  std::size_t idle_ GUARDED_BY(mu_) = 0;  // threads waiting for a job
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ GUARDED_BY(mu_);
};

// A client's dial worker: as many threads as connects may wait at once for
// peers that answer nothing while the dials that replace them go ahead (a
// partition's head and watch, and those of a few partitions).
inline constexpr std::size_t kDialThreads = 8;

template <class T>
class Call {
 public:
  [[nodiscard]] bool busy() const { return state_ != nullptr; }

  // Runs `fn` (returning a T) on `worker`. The call must not be busy.
  template <class Fn>
  void start(ClientWorker& worker, Fn fn) {
    state_ = std::make_shared<State>();
    worker.post([state = state_, fn = std::move(fn)]() mutable {
      if (state->abandoned.load(std::memory_order_acquire)) return;
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

  // Drops the call (no longer busy): see above.
  void abandon() {
    if (state_) state_->abandoned.store(true, std::memory_order_release);
    state_.reset();
  }

 private:
  struct State {
    Mutex mu;
    std::optional<T> answer GUARDED_BY(mu);
    std::atomic<bool> ready{false};
    std::atomic<bool> abandoned{false};
  };
  std::shared_ptr<State> state_;
};

// Where a session's connection attempt stands (publisher and subscriber).
// none: no attempt (connected, or waiting for the retry); route: its route
// lookup runs; dial: connecting and handshaking (DialAttempt).
enum class Attempt : std::uint8_t { none, route, dial };

using RouteCall = Call<client::Result<Route>>;

}  // namespace catena::client_detail
