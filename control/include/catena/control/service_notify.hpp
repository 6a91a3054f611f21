// systemd's readiness protocol for both daemons (sd_notify(3), libsystemd),
// so that their units can be Type=notify: READY=1 once the daemon serves,
// STATUS= lines on its state changes, STOPPING=1 when it begins to stop,
// and WATCHDOG=1 pings while WatchdogSec= is set (sd_watchdog_enabled(3)).
//
// Without $NOTIFY_SOCKET (not started by systemd as Type=notify) every call
// is a no-op. A failed send is logged once and otherwise ignored: a daemon
// never stops over its supervisor's socket. Each message is one datagram;
// calls from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <string_view>

namespace catena::control {

class ServiceNotifier {
 public:
  ServiceNotifier();

  // READY=1 with a STATUS= line.
  void ready(std::string_view status);
  void status(std::string_view status);
  // STOPPING=1 with a STATUS= line.
  void stopping(std::string_view status);

  // WatchdogSec= for this process (zero: no watchdog), and how often to
  // ping (half of it).
  [[nodiscard]] std::chrono::microseconds watchdog_timeout() const { return watchdog_; }
  [[nodiscard]] std::chrono::microseconds watchdog_period() const { return watchdog_ / 2; }
  // WATCHDOG=1, at most once per watchdog_period() (callers may call it
  // more often); nothing without a watchdog.
  void watchdog();

 private:
  void send(const std::string& message);

  std::chrono::microseconds watchdog_{0};
  std::atomic<std::int64_t> last_ping_us_{0};
  std::atomic<bool> failure_logged_{false};
};

}  // namespace catena::control
