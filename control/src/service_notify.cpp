#include <cstring>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <catena/control/service_notify.hpp>

namespace catena::control {
namespace {

// STATUS= is one line: systemd shows it in `systemctl status`.
std::string status_line(std::string_view status) {
  std::string line(status);
  for (char& ch : line) {
    if (ch == '\n') ch = ' ';
  }
  return "STATUS=" + line;
}

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

ServiceNotifier::ServiceNotifier() {
  std::uint64_t usec = 0;
  if (sd_watchdog_enabled(/*unset_environment=*/0, &usec) > 0) watchdog_ = std::chrono::microseconds(usec);
}

void ServiceNotifier::ready(std::string_view status) {
  send("READY=1\n" + status_line(status));
}

void ServiceNotifier::status(std::string_view status) {
  send(status_line(status));
}

void ServiceNotifier::stopping(std::string_view status) {
  send("STOPPING=1\n" + status_line(status));
}

void ServiceNotifier::watchdog() {
  if (watchdog_.count() == 0) return;
  const std::int64_t now = now_us();
  std::int64_t last = last_ping_us_.load(std::memory_order_relaxed);
  if (last != 0 && now - last < watchdog_period().count()) return;
  if (!last_ping_us_.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
  send("WATCHDOG=1");
}

void ServiceNotifier::send(const std::string& message) {
  const int r = sd_notify(/*unset_environment=*/0, message.c_str());
  if (r < 0 && !failure_logged_.exchange(true)) {
    spdlog::warn("sd_notify to $NOTIFY_SOCKET failed: {} (further failures not logged)", std::strerror(-r));
  }
}

}  // namespace catena::control
