// catena::ClientEvent: what a Publisher or Subscriber tells the application
// about a partition's connection, beside the records and their results:
// the route changed, the link to the head (or the replica read from) was
// lost or came back, acknowledgements stalled, records failed because the
// partition stayed unreachable, the head holds records back (a full log,
// the node's segment memory, the tenant's rate). For logs, metrics and alerts; nothing needs
// to act on them (the client recovers on its own).
//
// Set PublisherOptions::on_event / SubscriberOptions::on_event. The callback
// runs on the client's owner thread, from poll() (and so from flush() and a
// PublishFuture's get()), once per change of a partition's state, never per
// record; it may publish (a Publisher's) but must not destroy the client.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace catena {

struct ClientEvent {
  enum class Kind : std::uint8_t {
    route_changed,          // the partition's route has a newer epoch (message: old and new epoch, head)
    disconnected,           // the link to the head (publisher) or replica (subscriber) was lost; reconnecting
    reconnected,            // a link is up again after create(): records flow again
    ack_stalled,            // records await their ack past stall_check; the route is re-read
    partition_unavailable,  // pending records failed with `unavailable` after retry_timeout
    // The head holds the partition's records back, unread, and says why
    // (publisher only; told when it starts, again after the head has not
    // said so for 1 s). Nothing fails: they are appended once it passes,
    // and publish() reports backpressure meanwhile.
    log_full,             // every segment holds records within ttl + grace (message: when the oldest frees)
    segment_memory_full,  // the head's node spent its segment memory budget ([storage] segment_memory_mb)
    rate_limited,         // the channel's tenant is at its publish rate on the head's node
  };
  Kind kind = Kind::route_changed;
  std::uint32_t partition = 0;
  std::string message;  // for people: what happened, with node ids and epochs
};

[[nodiscard]] constexpr std::string_view to_string(ClientEvent::Kind k) noexcept {
  switch (k) {
    case ClientEvent::Kind::route_changed:
      return "route_changed";
    case ClientEvent::Kind::disconnected:
      return "disconnected";
    case ClientEvent::Kind::reconnected:
      return "reconnected";
    case ClientEvent::Kind::ack_stalled:
      return "ack_stalled";
    case ClientEvent::Kind::partition_unavailable:
      return "partition_unavailable";
    case ClientEvent::Kind::log_full:
      return "log_full";
    case ClientEvent::Kind::segment_memory_full:
      return "segment_memory_full";
    case ClientEvent::Kind::rate_limited:
      return "rate_limited";
  }
  return "?";
}

using ClientEventHandler = std::function<void(const ClientEvent&)>;

}  // namespace catena
