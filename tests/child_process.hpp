// A program run in the background for a test that signals it while it runs
// (`catena subscribe` members, a subscriber interrupted on some thread):
// started from argv, its stdout and stderr each in a file, and killed with
// SIGKILL and reaped when it goes out of scope, so a test that stops at an
// early ASSERT leaves no process behind.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <vector>

namespace catena::test {

class ChildProcess {
 public:
  // Starts argv[0] (a path) with argv; its stdout goes to `out_path` and its
  // stderr to `err_path`, both truncated. running() is false if fork failed.
  ChildProcess(const std::vector<std::string>& argv, std::string out_path, std::string err_path)
      : out_path_(std::move(out_path)), err_path_(std::move(err_path)) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int efd = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || efd < 0 || dup2(fd, 1) < 0 || dup2(efd, 2) < 0) _exit(126);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~ChildProcess() {
    if (pid_ > 0) (void)signal_and_wait(SIGKILL);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Started and not reaped yet.
  [[nodiscard]] bool running() const { return pid_ > 0; }
  [[nodiscard]] pid_t pid() const { return pid_; }

  // Sends `sig` and waits up to `within` for the process to end; its wait
  // status, or nullopt if it still ran (then it is killed and reaped).
  std::optional<int> signal_and_wait(int sig, std::chrono::milliseconds within = std::chrono::seconds(20)) {
    if (pid_ <= 0) return std::nullopt;
    kill(pid_, sig);
    return wait_for(within);
  }

  // Waits up to `within` for the process to end on its own; as above.
  std::optional<int> wait_for(std::chrono::milliseconds within) {
    if (pid_ <= 0) return std::nullopt;
    int status = 0;
    const auto stop_by = std::chrono::steady_clock::now() + within;
    pid_t done = 0;
    while (((done = waitpid(pid_, &status, WNOHANG)) == 0 || (done < 0 && errno == EINTR)) &&
           std::chrono::steady_clock::now() < stop_by)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (done < 0 && errno != EINTR) {  // not our child any more: no status to report
      pid_ = -1;
      return std::nullopt;
    }
    if (done <= 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      pid_ = -1;
      return std::nullopt;
    }
    pid_ = -1;
    return status;
  }

  // What it printed so far.
  [[nodiscard]] std::string out() const { return slurp(out_path_); }
  [[nodiscard]] std::string err() const { return slurp(err_path_); }
  [[nodiscard]] const std::string& out_path() const { return out_path_; }

  // Removes both files (the process must have ended).
  void remove_files() const {
    std::remove(out_path_.c_str());
    std::remove(err_path_.c_str());
  }

 private:
  static std::string slurp(const std::string& path) {
    std::ifstream in(path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  std::string out_path_;
  std::string err_path_;
  pid_t pid_ = -1;
};

}  // namespace catena::test
