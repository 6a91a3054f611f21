// `catena bench --rescale`'s subscriber group: GroupSubscriber members that
// join and leave while the channel is altered (bench_parts.hpp).
#include <atomic>
#include <fmt/format.h>
#include <thread>

#include <catena/broker/controller_routes.hpp>
#include <catena/broker/group_subscriber.hpp>

#include "bench_parts.hpp"

namespace catena::cli::bench_detail {

using namespace std::chrono_literals;

namespace {
constexpr const char* kRescaleGroup = "rescale-bench-group";
constexpr std::size_t kGroupAnomaliesShown = 8;
}  // namespace

struct RescaleGroup::Member {
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<bool> joined{false};
  std::string error;  // set before `joined`, read after it
};

RescaleGroup::RescaleGroup(control::ControllerClient::Options controller, std::string provider,
                           std::string channel, std::size_t max_records, int keys)
    : controller_(std::move(controller)),
      provider_(std::move(provider)),
      channel_(std::move(channel)),
      keys_(keys),
      times_(max_records, 0),
      last_seq_(static_cast<std::size_t>(keys), -1) {}

RescaleGroup::~RescaleGroup() {
  leave_all();
}

std::string RescaleGroup::join() {
  auto m = std::make_unique<Member>();
  Member* member = m.get();
  const int n = next_member_++;
  member->thread = std::thread([this, member, n] {
    const control::ControllerClient::Options co = controller_;
    broker::ControllerRoutes routes(co, fmt::format("rescale-bench-member-{}", n));
    GroupSubscriberOptions go;
    go.controller = controller_.address;
    go.token = std::string(controller_.token);  // GCC 12 -O2: a false maybe-uninitialized on copy-assigning
    go.group = kRescaleGroup;
    go.member_name = fmt::format("bench-{}", n);
    go.subscriber.provider = provider_;
    go.subscriber.start = Start::earliest;
    auto sub = GroupSubscriber::create(routes, channel_, go);
    if (!sub) member->error = "group member: " + sub.error().message;
    member->joined = true;
    if (!sub) return;
    while (!member->stop) {
      if (sub.value()->poll([this](const Message& msg) { deliver(msg); }) == 0)
        std::this_thread::sleep_for(50us);
    }
    // ~GroupSubscriber commits where it stopped and leaves the group.
  });
  while (!member->joined) std::this_thread::sleep_for(1ms);
  std::string error = member->error;
  members_.push_back(std::move(m));
  return error;
}

void RescaleGroup::leave_oldest() {
  if (members_.empty()) return;
  members_.front()->stop = true;
  members_.front()->thread.join();
  members_.erase(members_.begin());
}

void RescaleGroup::leave_all() {
  while (!members_.empty()) leave_oldest();
}

std::uint64_t RescaleGroup::delivered() const {
  MutexLock lock(mu_);
  return delivered_;
}

void RescaleGroup::deliver(const Message& m) {
  const std::uint64_t id = tagged_id("rs", m.payload);
  int key = 0;
  std::uint64_t seq = 0;
  MutexLock lock(mu_);
  if (id >= times_.size() || !parse_keyed(m.payload, &key, &seq) || key >= keys_) {
    ++foreign_;
    return;
  }
  if (times_[id] > 0 && anomalies_.size() < kGroupAnomaliesShown)
    anomalies_.push_back(fmt::format("group: record {} delivered again at {}@{}", id, m.partition, m.offset));
  if (times_[id] < 255) ++times_[id];
  auto& last = last_seq_[static_cast<std::size_t>(key)];
  if (static_cast<std::int64_t>(seq) < last) {
    ++order_violations_;
    if (anomalies_.size() < kGroupAnomaliesShown) {
      anomalies_.push_back(fmt::format("group: key {}: sequence {} at {}@{} after sequence {}", key, seq,
                                       m.partition, m.offset, last));
    }
  }
  last = std::max(last, static_cast<std::int64_t>(seq));
  ++delivered_;
}

RescaleGroup::Result RescaleGroup::check(const std::vector<std::uint8_t>& acked,
                                         std::uint64_t published) const {
  MutexLock lock(mu_);
  Result r;
  for (std::uint64_t id = 0; id < published && id < times_.size(); ++id) {
    if (acked[id] != 0 && times_[id] == 0) ++r.lost;
    if (times_[id] > 1) ++r.duplicated;
  }
  r.order_violations = order_violations_;
  r.anomalies = anomalies_;
  if (foreign_ > 0) r.anomalies.push_back(fmt::format("group: {} records not the bench's", foreign_));
  return r;
}

}  // namespace catena::cli::bench_detail
