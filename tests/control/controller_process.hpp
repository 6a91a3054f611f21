// The catena-controller binary as a child process of a test: spawned with
// a port file, waited for, stopped by a signal.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <vector>

extern char** environ;

namespace catena::control::testing {

// Polls pred every 20 ms until it holds or timeout passes.
template <class Pred>
bool process_eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

class ControllerProcess {
 public:
  ControllerProcess(const std::filesystem::path& data_dir, const std::filesystem::path& port_file)
      : ControllerProcess({"--data-dir", data_dir.string()}, port_file) {}
  // store: the flags that say where the metadata is.
  ControllerProcess(std::vector<std::string> store, const std::filesystem::path& port_file)
      : port_file_(port_file) {
    std::filesystem::remove(port_file);
    // The test does not heartbeat: a long timeout keeps its node alive.
    std::vector<std::string> args = {CATENA_CONTROLLER_BIN,
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--port-file",
                                     port_file.string(),
                                     "--log-level",
                                     "warn",
                                     "--heartbeat-timeout-ms",
                                     "60000"};
    args.insert(args.end(), store.begin(), store.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (::posix_spawn(&pid_, CATENA_CONTROLLER_BIN, nullptr, nullptr, argv.data(), environ) != 0) pid_ = -1;
  }
  ~ControllerProcess() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  ControllerProcess(const ControllerProcess&) = delete;
  ControllerProcess& operator=(const ControllerProcess&) = delete;

  // The bound port once the server listens, 0 if it never did.
  std::uint16_t wait_for_port() {
    std::uint16_t port = 0;
    process_eventually([&] {
      std::ifstream in(port_file_);
      return static_cast<bool>(in >> port);
    });
    return port;
  }
  // Exit status after sig, or -1 if it did not exit within 10 s.
  int stop(int sig) {
    ::kill(pid_, sig);
    return wait_exit();
  }
  int wait_exit() {
    int status = -1;
    const bool done = process_eventually([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; });
    if (!done) return -1;
    exited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  [[nodiscard]] bool spawned() const { return pid_ > 0; }
  [[nodiscard]] pid_t pid() const { return pid_; }

 private:
  std::filesystem::path port_file_;
  pid_t pid_ = -1;
  bool exited_ = false;
};

}  // namespace catena::control::testing
