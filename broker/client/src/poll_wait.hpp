// A poll that waits: calls a non-blocking poll until it delivers something
// or `timeout` passes, idling between tries as every polling loop here does
// (fabric::BackoffIdle: a few microseconds of spinning, then yielding, then
// parking in steps that double up to 1 ms). Subscriber::poll_for and
// GroupSubscriber::poll_for.
#pragma once

#include <algorithm>
#include <chrono>

#include <catena/fabric/idle.hpp>

namespace catena::client_detail {

template <typename Poll>
int poll_waiting(Poll&& poll, std::chrono::milliseconds timeout) {
  // A year at most: a larger one (INT64_MAX ms from C) would overflow the
  // clock into the past and not wait at all.
  timeout = std::min(timeout, std::chrono::milliseconds(std::chrono::hours(24 * 365)));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  fabric::BackoffIdle idle;
  for (;;) {
    const int n = poll();
    if (n != 0 || std::chrono::steady_clock::now() >= deadline) return n;
    idle.idle();
  }
}

}  // namespace catena::client_detail
