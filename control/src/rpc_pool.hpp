// The controller's BrokerAdmin calls run here: a fixed number of threads
// (Controller::Options::broker_rpc_threads) on Boost.Asio's thread_pool,
// so a push or probe round to many brokers never starts a thread per
// broker. submit() returns the task's future; the round waits for every
// future before it takes the controller's lock.
//
// Thread: submit() is thread-safe. The destructor waits for queued tasks.
#pragma once

#include <cstddef>
#include <functional>
#include <future>
#include <memory>
#include <type_traits>

namespace boost::asio {
class thread_pool;
}

namespace catena::control {

class RpcPool {
 public:
  explicit RpcPool(std::size_t threads);
  ~RpcPool();
  RpcPool(const RpcPool&) = delete;
  RpcPool& operator=(const RpcPool&) = delete;

  template <class Fn>
  auto submit(Fn fn) -> std::future<std::invoke_result_t<Fn&>> {
    auto task = std::make_shared<std::packaged_task<std::invoke_result_t<Fn&>()>>(std::move(fn));
    auto done = task->get_future();
    post([task] { (*task)(); });
    return done;
  }

 private:
  void post(std::function<void()> fn);

  std::unique_ptr<boost::asio::thread_pool> pool_;
};

}  // namespace catena::control
