// catena-controller's serving half: the Controller service on a ThriftServer
// plus the maintenance loop that calls Controller::tick() every
// tick_interval on its own thread.
//
// Lifecycle: construct, start(), port(), stop() (idempotent; the destructor
// calls it). The Controller must outlive the server.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include <catena/control/controller.hpp>
#include <catena/control/result.hpp>
#include <catena/control/thrift_server.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace catena::control {

class ControllerServer {
 public:
  struct Options {
    ThriftServer::Options thrift{.host = "127.0.0.1", .port = 7400};
    std::chrono::milliseconds tick_interval{50};  // maintenance period; 0 disables the loop
  };

  ControllerServer(Controller& controller, Options options);
  ~ControllerServer();
  ControllerServer(const ControllerServer&) = delete;
  ControllerServer& operator=(const ControllerServer&) = delete;

  [[nodiscard]] Result<void> start();
  [[nodiscard]] std::uint16_t port() const noexcept { return server_.port(); }
  [[nodiscard]] std::string address() const { return server_.address(); }
  void stop();

 private:
  void maintenance_loop() EXCLUDES(mu_);

  Controller& controller_;
  const std::chrono::milliseconds tick_interval_;
  ThriftServer server_;
  std::thread maintenance_thread_;
  Mutex mu_;
  std::condition_variable wake_;
  bool stopping_ GUARDED_BY(mu_) = false;
};

}  // namespace catena::control
