// HistoryTraffic (bench_parts.hpp): a publisher and a subscriber whose every
// record goes into a HistoryChecker, for the benches that break something
// under traffic.
#include <span>

#include <catena/broker/controller_routes.hpp>

#include "bench_parts.hpp"

namespace catena::cli::bench_detail {

using namespace std::chrono_literals;

bool wait_until(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!cond() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  return cond();
}

HistoryTraffic::HistoryTraffic(const control::ControllerClient::Options& controller, HistoryChecker& history,
                               TrafficOptions options)
    : history_(history), options_(std::move(options)) {
  sub_thread_ = std::thread([this, controller] { subscribe_loop(controller); });
  pub_thread_ = std::thread([this, controller] { publish_loop(controller); });
}

HistoryTraffic::~HistoryTraffic() {
  finish();
}

void HistoryTraffic::subscribe_loop(const control::ControllerClient::Options& controller) {
  broker::ControllerRoutes routes(controller, options_.client_name + "-sub");
  SubscriberOptions so;
  so.provider = options_.provider;
  auto sub = Subscriber::create(routes, options_.channel, so);
  if (!sub) return;
  while (!stop_sub_) {
    if (sub.value()->poll([&](const Message& m) {
          history_.delivered(0, m.partition, m.offset, tagged_id(options_.tag, m.payload), m.payload);
          delivered_.fetch_add(1);
        }) == 0) {
      std::this_thread::sleep_for(50us);
    }
  }
}

void HistoryTraffic::publish_loop(const control::ControllerClient::Options& controller) {
  broker::ControllerRoutes routes(controller, options_.client_name + "-pub");
  PublisherOptions po;
  po.provider = options_.provider;
  if (options_.retry_timeout.count() > 0) po.retry_timeout = options_.retry_timeout;
  if (options_.stall_check.count() > 0) po.stall_check = options_.stall_check;
  auto pub = Publisher::create(routes, options_.channel, po);
  if (!pub) {
    pub_done_ = true;
    return;
  }
  std::uint64_t id = 0;
  while (!stop_pub_) {
    const std::uint64_t acked_bytes = acked_bytes_.load();
    const std::string p = tagged_record(options_.tag, id, options_.record_bytes(acked_bytes));
    const auto bytes = std::span(reinterpret_cast<const std::byte*>(p.data()), p.size());
    auto e = pub.value()->publish_to(0, bytes, [this, id, size = p.size()](const PublishResult& r) {
      if (r.status != PublishStatus::ok) {
        history_.failed(id);
        return;
      }
      history_.acknowledged(id, r.partition, r.offset);
      acked_bytes_.fetch_add(size);
      acked_.fetch_add(1);
      if (options_.on_ack) options_.on_ack(id);
    });
    if (e == client::ErrorCode::ok) {
      history_.published(id, bytes);
      published_.store(++id);
    }
    pub.value()->poll();
    if (const auto pause = options_.pause(acked_bytes); pause.count() > 0) std::this_thread::sleep_for(pause);
  }
  pub.value()->flush(30s);
  pub_done_ = true;
}

void HistoryTraffic::finish(std::chrono::milliseconds flush_wait, std::chrono::milliseconds deliver_wait) {
  if (finished_.exchange(true)) return;
  stop_pub_ = true;
  wait_until([&] { return pub_done_.load(); }, flush_wait);
  wait_until([&] { return delivered_.load() >= acked_.load(); }, deliver_wait);
  std::this_thread::sleep_for(100ms);  // a duplicate delivered late is still counted
  stop_sub_ = true;
  pub_thread_.join();
  sub_thread_.join();
}

}  // namespace catena::cli::bench_detail
