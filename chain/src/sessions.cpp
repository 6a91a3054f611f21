// Replica: where publishers, subscribers and commit watches attach.
#include <catena/chain/commit_watch.hpp>
#include <catena/chain/delivery.hpp>
#include <catena/chain/publish.hpp>
#include <catena/chain/replica.hpp>

namespace catena::chain {

// Where each client session attaches: the protocols are in publish.hpp,
// delivery.hpp and commit_watch.hpp; the replica says what it is (a gate)
// and lends what they read from and append to.
void Replica::attach_publisher(std::unique_ptr<Link> link, const wire::PublisherHello& hello) {
  CATENA_ST_CHECK(owner_);
  PublishGate gate;
  gate.authorized = wire::access_allowed(hello.access_secret, cfg_.access_secret);
  gate.epoch = cfg_.epoch;
  gate.head = cfg_.is_head();
  gate.sealed = sealed_;
  gate.head_addr = cfg_.head_addr;
  gate.next_epoch = next_epoch_;
  gate.next_head = next_head_;
  gate.segment_bytes = cfg_.log.segment_bytes;
  gate.marker_generation = log_->marker().generation;
  gate.max_publishers = cfg_.limits.max_publishers;
  gate.max_producers = cfg_.limits.max_producers;
  gate.budget = &budget_st();
  gate.tenant_budget = cfg_.tenant_budget;
  gate.tenant_seats = cfg_.tenant_seats;
  publishes_.attach(provider_, std::move(link), hello, gate, producers_);
}

void Replica::attach_subscriber(std::unique_ptr<Link> link, const wire::SubscriberHello& hello) {
  CATENA_ST_CHECK(owner_);
  DeliveryGate gate;
  gate.authorized = wire::access_allowed(hello.access_secret, cfg_.access_secret);
  gate.epoch = cfg_.epoch;
  gate.range_end = range_end_;
  gate.next_epoch = next_epoch_;
  gate.next_head = next_head_;
  gate.max_subscribers = cfg_.limits.max_subscribers;
  gate.segment_bytes = cfg_.log.segment_bytes;
  gate.tenant_seats = cfg_.tenant_seats;
  deliveries_.attach(std::move(link), hello, gate, *log_);
}

void Replica::attach_watcher(std::unique_ptr<Link> link, const wire::CommitWatchHello& hello) {
  CATENA_ST_CHECK(owner_);
  WatchGate gate;
  gate.authorized = wire::access_allowed(hello.access_secret, cfg_.access_secret);
  gate.epoch = cfg_.epoch;
  gate.retired = range_end_ != kOpenRange;
  gate.tail_of_two_or_more = cfg_.is_tail() && cfg_.chain_length >= 2;
  gate.max_watchers = cfg_.limits.max_watchers;
  gate.tenant_seats = cfg_.tenant_seats;
  watches_.attach(std::move(link), hello, gate, *log_);
}

}  // namespace catena::chain
