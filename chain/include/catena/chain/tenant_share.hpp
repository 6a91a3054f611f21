// A tenant's share of one broker (TenantQuotas' per-node quotas, sent with
// every assignment as ChainAssignment.tenant): the client sessions it may
// hold there and the bytes per second its publishers may append. The
// broker keeps one of each per tenant; the replicas of the tenant's
// partitions and their protocol halves point at them. Data-plane thread
// only: no lock, no system call.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

#include <catena/chain/limits.hpp>

namespace catena::chain {

// The client sessions (publishers, subscribers, commit watches) a tenant
// holds on a broker, and how many it may (TenantQuotas.max_sessions); a
// hello beyond them is refused resource_exhausted.
struct SessionSeats {
  std::uint32_t limit = ~0u;
  std::uint32_t used = 0;
  [[nodiscard]] bool full() const { return used >= limit; }
};

// One seat, held while a session lives (nullptr: the partition has no tenant).
class Seat {
 public:
  Seat() = default;
  explicit Seat(SessionSeats* seats) : seats_(seats) {
    if (seats_ != nullptr) ++seats_->used;
  }
  Seat(Seat&& o) noexcept : seats_(std::exchange(o.seats_, nullptr)) {}
  Seat& operator=(Seat&& o) noexcept {
    if (this != &o) {
      release();
      seats_ = std::exchange(o.seats_, nullptr);
    }
    return *this;
  }
  Seat(const Seat&) = delete;
  Seat& operator=(const Seat&) = delete;
  ~Seat() { release(); }

 private:
  void release() {
    if (seats_ != nullptr) --seats_->used;
    seats_ = nullptr;
  }
  SessionSeats* seats_ = nullptr;
};

// What one tenant's publishers may append on one broker per second
// (TenantQuotas.max_publish_bytes_per_sec: per node, as Kafka's produce
// quotas are per broker), shared by the heads of all its partitions there.
// A token bucket holding a tenth of a second: the head takes a frame's
// bytes before it stages it, and while the bucket is empty (a large frame
// may take it below zero, repaid before the next) the frames wait in their
// publishers' rings: back-pressure for that tenant alone. Data-plane
// thread only; no lock, no system call (the replica's tick clock).
struct RateBudget {
  static constexpr auto kMaxBytesPerSec = static_cast<std::uint64_t>(limits::kMaxPublishBytesPerSec);

  // 0: unlimited. Keeps what the bucket holds, up to the new burst.
  void set_rate(std::uint64_t bytes_per_sec) {
    bytes_per_sec_ = bytes_per_sec > kMaxBytesPerSec ? 0 : bytes_per_sec;
    burst_ = std::max(static_cast<std::int64_t>(bytes_per_sec_ / 10), limits::kMinPublishBytesPerSec);
    tokens_ = std::min(tokens_, burst_);
  }
  [[nodiscard]] std::uint64_t bytes_per_sec() const { return bytes_per_sec_; }
  // Whether a frame of `bytes` may be appended now; if so, they are taken.
  bool take(std::uint64_t bytes, std::uint64_t now_ns) {
    if (bytes_per_sec_ == 0) return true;
    refill(now_ns);
    if (tokens_ <= 0) {
      ++waits_;
      return false;
    }
    tokens_ -= static_cast<std::int64_t>(std::min<std::uint64_t>(bytes, std::uint64_t{1} << 62));
    return true;
  }
  // Times a frame found the bucket empty (for stats).
  [[nodiscard]] std::uint64_t waits() const { return waits_; }

 private:
  void refill(std::uint64_t now_ns) {
    if (now_ns <= refilled_ns_) return;
    const std::uint64_t elapsed = now_ns - refilled_ns_;
    if (elapsed >= 1'000'000'000) {
      tokens_ = burst_;
      refilled_ns_ = now_ns;
      return;
    }
    // elapsed < 1e9 and the rate <= 1e10: the product fits 64 bits.
    const auto add = static_cast<std::int64_t>(elapsed * bytes_per_sec_ / 1'000'000'000);
    if (add == 0) return;  // the fraction is counted at the next refill
    tokens_ = std::min(burst_, tokens_ + add);
    refilled_ns_ = now_ns;
  }

  std::uint64_t bytes_per_sec_ = 0;
  std::int64_t burst_ = 4096;
  std::int64_t tokens_ = 4096;
  std::uint64_t refilled_ns_ = 0;
  std::uint64_t waits_ = 0;
};

}  // namespace catena::chain
