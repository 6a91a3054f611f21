// catena::Subscriber: receives committed records of a channel's partitions,
// in offset order per partition, from a replica of each chain (the tail by
// default: it commits first).
//
// Replicas push records into a ring of registered memory here with one-sided
// writes; poll() validates each frame (header and payload checksums, offset
// continuity) before handing it out, and returns ring space as credit. If a
// replica is lost, the subscriber reconnects to another (refreshing the route)
// at the offset after the last record it delivered: no gap, no duplicate.
// If that position has expired meanwhile, the handler sees a Notice.
//
// Across a channel alter (catena channel alter), each key's records are
// delivered in order: a partition that delivered its marker waits there
// until each partition feeding keys into it (its parents, chain/key_map.hpp)
// that this subscriber reads has delivered its own marker. Parents it does
// not read never hold it back: a subscriber of a subset of the partitions
// keeps per-key order among those only. See MarkerGate (marker_gate.hpp in
// the client's sources) for when a parent's generation is known.
//
// Threading: a polling agent owned by one thread; handlers run in poll().
// create() may run on another thread: the first call after it takes
// ownership, and in builds with CATENA_THREAD_CHECKS a call from any other
// thread aborts.
//
// poll() never waits on the network or the controller, so a partition whose
// replica is lost never stalls the others. Per partition it makes at most:
// one non-blocking poll of each completion queue of the replica's link (or
// one look for a handshake's answer), one credit message, one look at the
// answer of a route lookup or connect in progress (an atomic load, and an
// uncontended lock once the answer came), handing the next call to a
// worker (per lookup or connect, never per record), and, when a connection
// comes up, its setup (Link buffers, the ring's key, the hello). Route
// lookups and failure reports run on one worker thread the subscriber owns
// (threads start with the calls and end 10 s after the last one),
// Provider::connect (up to connect_timeout for a replica that is cut off)
// on up to 8 others, for the reasons given in publisher.hpp; each partition
// has at most one lookup and one connect in progress, besides its failure
// reports. create() and commit() still wait on the controller (setup, and
// an explicit call); ~Subscriber waits for a lookup in progress, not for a
// connect (as ~Publisher, publisher.hpp).
//
// Public (client SDK): the standard library and the SDK's headers only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <catena/broker/client_event.hpp>
#include <catena/client/api.hpp>
#include <catena/client/error.hpp>
#include <catena/client/headers.hpp>
#include <catena/client/routes.hpp>

namespace catena {

// A record's headers: HeaderField and Headers (catena/client/headers.hpp).

struct Message {
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  std::uint64_t timestamp_ns = 0;  // publisher's wall clock
  std::uint64_t producer_id = 0;
  std::uint64_t sequence = 0;
  std::span<const std::byte> payload;  // valid during the handler only
  // The key and headers the record was published with (publish(Record));
  // empty for records published without (publish(key, payload) partitions
  // by its key without storing it). Valid during the handler only.
  std::span<const std::byte> key;
  Headers headers;
  // A channel alter's marker (only with SubscriberOptions::control_records):
  // producer_id 0, sequence the channel generation it brings in; its payload
  // is the broker's encoding of the alter, not the application's (the C API
  // and Python hand out none).
  bool marker = false;
};

enum class Start : std::uint8_t { earliest, latest, offset, committed };

struct SubscriberOptions {
  std::string provider = "soft";
  Start start = Start::earliest;
  std::uint64_t start_offset = 0;         // for Start::offset
  std::string group;                      // for Start::committed and commit()
  std::vector<std::uint32_t> partitions;  // empty: all
  std::uint32_t ring_bytes = 8u << 20;    // per partition
  enum class ReadFrom : std::uint8_t { tail, head, spread } read_from = ReadFrom::tail;
  std::chrono::milliseconds connect_timeout{3000};
  // With nothing delivered for this long, re-read the route: a replica cut
  // off the network goes silent without breaking the connection, and one
  // that left the chain means reading from another. Likewise while a dial
  // has waited this long for its answer (again every stall_check): a route
  // that no longer names the replica ends the dial.
  std::chrono::milliseconds stall_check{1000};
  // A replica that said records up to some offset are committed and has
  // delivered none of them for this long is not serving this subscriber
  // (a stuck connection): read from another replica of the chain.
  std::chrono::milliseconds delivery_stall{3000};
  // Deliver control records too (channel alters' markers, Message::marker);
  // otherwise they are skipped.
  bool control_records = false;
  // Each partition stops at every alter marker of a generation newer than
  // release_markers() named for it (GroupSubscriber's members: the group's
  // coordinator releases a marker once the group has read the partition's
  // parents up to theirs). Otherwise the subscriber decides from the
  // partitions it reads itself.
  bool markers_released_by_caller = false;
  // Partition events (client_event.hpp): route_changed, disconnected (the
  // replica read from was lost or left the chain), reconnected (reading
  // again, at the next offset); on this thread, from poll(), never per
  // record. Empty: none.
  ClientEventHandler on_event;
};

// Something the subscriber must know that is not a record. A record whose
// key and headers do not decode (a malformed attributes block: heads refuse
// them, so only a faulty or older broker could serve one) is skipped with a
// `corrupt` notice: lost_from its offset, next_offset the one after.
struct Notice {
  std::uint32_t partition = 0;
  // position_expired: records before next_offset passed their TTL.
  // data_lost: every replica of the partition failed at once and it was
  // rebuilt; records [lost_from, next_offset) are gone for good.
  // corrupt: a record skipped (see above).
  client::ErrorCode status = client::ErrorCode::ok;
  std::uint64_t next_offset = 0;  // where delivery resumes
  std::uint64_t lost_from = 0;    // data_lost: the first offset lost

  // The status (the same value: kept for callers that used it).
  [[nodiscard]] client::ErrorCode error() const noexcept { return status; }
};

class CATENA_API Subscriber {
 public:
  using Handler = std::function<void(const Message&)>;
  using NoticeHandler = std::function<void(const Notice&)>;

  // Errors as Publisher::create's, in client::ErrorCode.
  static client::Result<std::unique_ptr<Subscriber>> create(RouteSource& routes, const std::string& channel,
                                                            const SubscriberOptions& opts = {});
  ~Subscriber();

  // Delivers up to `max` records, reconnecting partitions whose replica
  // was lost, never waiting (see the bound above); returns how many.
  int poll(const Handler& on_message, int max = 1024);
  // As poll(), and if nothing is ready waits up to `timeout` for the first
  // record, idling between tries (spinning a few microseconds, then
  // yielding, then parking in steps that grow to 1 ms: a record that comes
  // during a long wait may be handed over up to 1 ms late; a program that
  // wants every microsecond calls poll() in its own loop). Returns how many
  // (0 at the timeout).
  int poll_for(const Handler& on_message, std::chrono::milliseconds timeout, int max = 1024);
  // Notices (Notice) are handed to `h` from poll(), on this thread; those
  // found while create() connected (a start position that expired) come
  // with the first poll().
  void on_notice(NoticeHandler h);

  // Next offset to be delivered, per partition. A partition held at an
  // alter's marker stands at the marker: its offset (what to commit, so
  // that a reader that resumes there is held at it too).
  [[nodiscard]] std::uint64_t position(std::uint32_t partition) const;
  // The generation of the last alter marker the partition delivered since
  // it started or jumped (0: none), and whether it is held there.
  [[nodiscard]] std::uint64_t marker_reached(std::uint32_t partition) const;
  [[nodiscard]] bool held_at_marker(std::uint32_t partition) const;
  // With markers_released_by_caller: the partition may pass markers up to
  // this generation (it never goes back down).
  void release_markers(std::uint32_t partition, std::uint64_t generation);
  // Seeks a partition (reconnects at that offset).
  void seek(std::uint32_t partition, std::uint64_t offset);
  // Stores the group's position of every partition (requires options.group).
  client::Result<void> commit();

  [[nodiscard]] std::vector<std::uint32_t> partitions() const;

  class Impl;

 private:
  explicit Subscriber(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace catena
