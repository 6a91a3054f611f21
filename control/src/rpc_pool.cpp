#include "rpc_pool.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

namespace catena::control {

RpcPool::RpcPool(std::size_t threads) : pool_(std::make_unique<boost::asio::thread_pool>(threads)) {}

RpcPool::~RpcPool() {
  pool_->join();
}

void RpcPool::post(std::function<void()> fn) {
  boost::asio::post(*pool_, std::move(fn));
}

}  // namespace catena::control
