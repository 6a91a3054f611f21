// One partition's session of a Subscriber (subscriber.cpp): where it reads,
// from which replica, and how it is reaching one.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <catena/broker/routes.hpp>
#include <catena/chain/delivery.hpp>
#include <catena/chain/wire.hpp>

#include "client_worker.hpp"
#include "dial_attempt.hpp"

namespace catena::client_detail {

// One partition's session with the replica it reads from. Owned by the
// subscriber's polling thread.
struct SubSession {
  std::uint32_t partition = 0;
  std::size_t index = 0;  // in the subscriber's sessions (and its MarkerGate)
  Route route;
  chain::DeliveryClient delivery;  // the link to the replica, and the ring it writes into
  std::uint64_t next_offset = 0;
  bool positioned = false;  // next_offset is known
  std::uint32_t replica_pick = 0;
  std::string reading_from;                               // node id of the replica serving us
  std::chrono::steady_clock::time_point last_delivery{};  // or connect
  std::uint64_t committed_at_connect = 0;                 // the replica's commit offset in its welcome
  std::uint64_t range_end = ~0ull;                        // the replica serves a sealed range that ends here
  std::uint64_t range_start = 0;  // where the range (or the chain above) it serves starts
  std::chrono::steady_clock::time_point route_check_at{};
  std::chrono::steady_clock::time_point retry_at{};
  // Where a sealed range's replica said the next range is served (its
  // `moved` answer's wire::NextChainHint: that chain's head and epoch; 0:
  // none), for the position hint_at (the range's end): dialled before the
  // controller is asked. A hint that failed is not taken again (hint_failed).
  std::uint64_t hint_epoch = 0;
  std::string hint_head;
  std::uint64_t hint_at = 0;
  std::uint64_t hint_failed = 0;
  std::chrono::steady_clock::time_point hint_since{};
  bool hint_first = false;  // the last route lookup failed: the hint goes first

  // What the application was last told (SubscriberOptions::on_event).
  std::uint64_t seen_epoch = 0;
  bool seen_connected = false;
  bool ever_connected = false;

  // Reaching a replica without poll() waiting: an attempt in states
  // (route lookup and connect on the subscriber's workers, then the
  // handshake as a Link::Dialing) while there is no link.
  std::uint64_t link_gen = 0;  // bumped whenever the link is dropped
  RouteCall lookup;            // one at a time: an attempt's, or a stall check's
  bool lookup_for_attempt = false;
  bool lookup_for_dial = false;   // a dial waited stall_check: does the route still name its replica?
  std::uint64_t lookup_link = 0;  // link_gen when a stall check asked
  std::uint64_t dial_gen = 0;     // bumped at each dial
  std::uint64_t lookup_dial = 0;  // dial_gen when a dial check asked
  std::chrono::steady_clock::time_point dial_started{};
  Attempt attempt = Attempt::none;
  bool attempt_hinted = false;           // dialling the hint, not a replica of the route
  ReplicaAddress dialled;                // no node id when hinted
  std::uint64_t dial_range_end = ~0ull;  // what range_end and range_start become once connected
  std::uint64_t dial_range_start = 0;
  DialAttempt<chain::wire::SubscriberHello, chain::wire::SubscriberWelcome> dial;

  void drop_link() {
    delivery.drop();
    ++link_gen;
  }
};

}  // namespace catena::client_detail
