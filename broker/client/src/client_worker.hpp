// The calls a client's poll() must not wait for (a route lookup or a failure
// report to the controller, Provider::connect to a head that may be cut
// off), run on worker threads and answered through a Call that poll()
// looks at without waiting.
//
// ClientWorker: the threads running the jobs posted to it, in order of
// posting. At most one thread unless made with more: then a job posted
// while every thread is busy starts another, up to `max_threads` (the rest
// queue), so that a connect waiting out its timeout on a head that answers
// nothing (stopped, cut off) does not hold up the dial to the head that
// replaced it. Threads start with the jobs that need them and end after
// `idle_exit` without one: a client whose sessions are up holds none (a
// group member runs a Subscriber per partition, each with two workers).
// Owned by a Publisher or Subscriber (see publisher.hpp for why two per
// client, and none shared between clients); its destructor drops the jobs
// not started and, by default, waits for the ones in progress to finish
// and their threads to let go of them (a lookup is bounded by the
// RouteSource's own timeout). A worker made with Ending::leave_running
// (the dial workers) does not wait: its threads end once their job returns
// (a connect to a peer that answers nothing: up to connect_timeout later),
// so its jobs must own everything they touch (DialAttempt's hold the
// provider). Threads are detached; what they share lives in a State they
// hold too.
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
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <spdlog/spdlog.h>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include <catena/broker/client_error.hpp>
#include <catena/broker/routes.hpp>
#include <catena/fabric/fabric.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace catena::client_detail {

class ClientWorker {
 public:
  enum class Ending : std::uint8_t { join, leave_running };
  static constexpr std::chrono::milliseconds kIdleExit{10000};

  // `name`: the threads' name (15 characters at most).
  explicit ClientWorker(std::string name, std::size_t max_threads = 1, Ending ending = Ending::join,
                        std::chrono::milliseconds idle_exit = kIdleExit)
      : state_(std::make_shared<State>(std::move(name), max_threads == 0 ? 1 : max_threads, idle_exit)),
        ending_(ending) {}
  ~ClientWorker() {
    State& st = *state_;
    UniqueLock lk(st.mu);
    st.stopping = true;
    st.jobs.clear();
    st.cv.notify_all();
    if (ending_ == Ending::join) {
      lk.wait(st.ended, [&] {
        st.mu.assert_held();  // the wait holds it when it asks
        return st.live == 0;
      });
    }
  }
  ClientWorker(const ClientWorker&) = delete;
  ClientWorker& operator=(const ClientWorker&) = delete;

  void post(std::function<void()> job) {
    State& st = *state_;
    {
      MutexLock lk(st.mu);
      st.jobs.push_back(std::move(job));
      // More jobs waiting than threads free to take them: one more thread.
      if (st.jobs.size() > st.idle && st.live < st.max_threads) {
        try {
          std::thread([s = state_] { run(*s); }).detach();
          ++st.live;
        } catch (const std::system_error& e) {
          // The job waits for a thread that ends its job, or for the next
          // post to start one.
          spdlog::warn("{}: could not start a thread ({}): the call waits", st.name, e.what());
        }
      }
    }
    st.cv.notify_one();
  }

  // Threads running now (tests).
  [[nodiscard]] std::size_t threads() const {
    MutexLock lk(state_->mu);
    return state_->live;
  }

 private:
  struct State {
    State(std::string n, std::size_t max, std::chrono::milliseconds idle)
        : name(std::move(n)), max_threads(max), idle_exit(idle) {}
    const std::string name;
    const std::size_t max_threads;
    const std::chrono::milliseconds idle_exit;
    Mutex mu;
    std::condition_variable cv;
    std::condition_variable ended;  // a thread let go of its last job
    std::deque<std::function<void()>> jobs GUARDED_BY(mu);
    std::size_t idle GUARDED_BY(mu) = 0;  // threads waiting for a job
    std::size_t live GUARDED_BY(mu) = 0;  // threads running
    bool stopping GUARDED_BY(mu) = false;
  };

  static void run(State& st) {
    pthread_setname_np(pthread_self(), st.name.c_str());
    for (;;) {
      std::function<void()> job;  // destroyed before the thread takes another or ends
      {
        UniqueLock lk(st.mu);
        ++st.idle;
        const bool got = lk.wait_for(st.cv, st.idle_exit, [&] {
          st.mu.assert_held();  // the wait holds it when it asks
          return st.stopping || !st.jobs.empty();
        });
        --st.idle;
        if (st.stopping || !got) {
          --st.live;
          st.ended.notify_all();
          return;
        }
        job = std::move(st.jobs.front());
        st.jobs.pop_front();
      }
      job();
    }
  }

  std::shared_ptr<State> state_;
  const Ending ending_;
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
