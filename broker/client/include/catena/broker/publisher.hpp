// catena::Publisher: publishes records to a channel, idempotently.
//
// A record is acknowledged only once it is committed (held by every replica
// of its partition's chain); the acknowledgement carries its offset. Each
// publisher has a producer id and an epoch that the controller issues when
// the publisher is created (RouteSource::init_producer), newer than any
// before: a restarted publisher's records are new data, and an older
// instance with the same id is fenced. Every record gets the next 64-bit
// sequence number of its partition, so a retry after a failover is stored
// once and acknowledged with its original offset.
//
// Sequences follow the head: its welcome says which sequence it expects
// next, and records the head never stored (they failed after the retry
// timeout, or a new head holds none of this producer's records) are
// renumbered from there, so a failed batch never wedges the partition with
// sequence gaps.
//
// Records with the same key go to the same partition (xxh64 of the key
// modulo the partition count of the channel generation the publisher maps
// by); records without a key are spread round-robin.
//
// A channel alter (`catena channel alter`) changes the partition count from
// a marker in each partition on. A head whose marker is newer than the
// publisher's generation refuses its records (`remap`, internal: never a
// callback's status) and says the new count. The publisher then stops
// sending (publish() answers backpressure), waits until every in-flight
// record of every partition is answered, adopts the new generation and
// sends the refused records again in publish order, keyed ones to their
// new partition: per key, the records before the marker of its old
// partition, the rest after the marker of its new one, in publish order,
// none twice. A publish_to record whose partition the alter removed fails
// with bad_request (invalid_argument).
//
// Threading: a Publisher is a polling agent owned by one thread. publish()
// frames the record straight into registered memory and, unless lingering,
// hands it to the fabric at once; poll() (also called by flush() and
// publish()) processes acknowledgements and runs callbacks on that thread.
// A PublishFuture (publish() without a callback) is resolved by poll() too;
// its get() and wait_for() call poll() themselves until it is, so they
// belong to the owner thread as well, and `pub.publish(k, v).get()` needs no
// poll loop (it also resolves every other record the poll() calls reach:
// their callbacks run inside get()). create()
// may run on another thread: the first call after it takes ownership, and in
// builds with CATENA_THREAD_CHECKS a call from any other thread aborts.
//
// poll() never waits on the network or the controller, so one partition's
// failover never stalls the others. Per partition it makes at most:
// non-blocking polls of the head link's send and receive completions and of
// the commit watch's receive completions (or one look for a handshake's
// answer in their place), the posts of records not yet flushed, one
// look at the answer of a route lookup or connect in progress (an atomic
// load, and an uncontended lock once the answer came), handing the next
// call to a worker (an allocation, a lock, a wake-up: per lookup or
// connect, never per record), and, when a connection comes up, its setup
// (Link buffers, the hello, the resend).
// Everything that may wait runs on two workers the publisher owns (their
// threads start with the calls and end 10 s after the last one):
// RouteSource calls (route lookups, failure reports) on one, and
// Provider::connect (which waits up to connect_timeout for a head that is
// cut off) on the other; their answers are picked up by poll(). Two, so
// that a controller that hangs does not hold up connects and a dead head
// does not hold up lookups; the publisher's own, not shared through the
// RouteSource, because they also use its provider (and a RouteSource may
// serve clients of several threads
// that should not queue behind each other). Each partition has at most one
// lookup and two connects (head and watch) in progress, besides the
// failure reports it queued (one per lost head or failed connect; its next
// lookup queues behind them). Lookups run one at a time; connects run on
// up to 8 threads, so one that waits out connect_timeout on a head that
// answers nothing holds up no other. A head dial that waited stall_check
// re-reads the route, and leaves the dial (abandoned on its thread) for the
// route's new head if it names one. create()
// still waits (setup) for the layout and the producer epoch; a partition's
// session is started by its first record (which waits in the partition's
// ring meanwhile) and brought up by poll(), like a reconnect (see
// PublisherOptions::ring_bytes). ~Publisher waits for a lookup in progress
// (the RouteSource's own timeout at most), not for a connect: that one ends
// on its own thread, holding the process's provider until then.
//
// Public (client SDK): the standard library and the SDK's headers only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include <catena/broker/client_event.hpp>
#include <catena/client/api.hpp>
#include <catena/client/error.hpp>
#include <catena/client/headers.hpp>
#include <catena/client/routes.hpp>

namespace catena {

// A record's outcome, in the client vocabulary (retriable(), to_string()).
using PublishStatus = client::ErrorCode;

struct PublishResult {
  PublishStatus status = PublishStatus::ok;
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;  // valid when status == ok (~0: retried beyond the dedup window)
  std::uint64_t sequence = 0;

  // The status (the same value: kept for callers that used it).
  [[nodiscard]] client::ErrorCode error() const noexcept { return status; }
};

using PublishCallback = std::function<void(const PublishResult&)>;

// A record with attributes: its key (partitions it as publish(key, ...)
// does, and is delivered with it) and headers (name/value byte strings:
// trace context, schema ids), delivered as Message::key and
// Message::headers. Limits: chain/limits.hpp (key up to 4096 bytes, up to
// 64 headers, names 1..256 bytes, values up to 8192); the key and headers
// count toward the record's size. Everything is copied into the ring by
// publish(): the spans need only live through the call.
struct Record {
  std::span<const std::byte> key;
  std::span<const HeaderField> headers;
  std::span<const std::byte> payload;
};

class Publisher;

// The result of one publish() without a callback. Like the publisher it is
// used on the publisher's owner thread: get() and wait_for() drive the
// publisher's poll() until the record is resolved (acknowledged, or failed:
// at the latest `unavailable` after PublisherOptions::retry_timeout), so no
// other poll loop is needed. A future must not be waited on after its
// Publisher is destroyed, except that one whose record the destroyed
// publisher dropped unresolved answers `unavailable` without polling. Not
// from inside a publish callback or an event handler (poll() is running
// there; calling it again from within is not supported). One
// shared state per record (an allocation): the callback form has none.
class CATENA_API PublishFuture {
 public:
  PublishFuture() = default;

  // False for a default-constructed future and after get().
  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }
  // Resolved already (no polling: poll(), flush() or another future's wait
  // resolves it too).
  [[nodiscard]] bool ready() const noexcept;
  // Polls the publisher until the record is resolved, then returns its
  // result and leaves the future invalid. On an invalid future: bad_request.
  PublishResult get();
  // Polls for up to `timeout`: ready, or timeout (still pending). An invalid
  // future answers ready at once (its get() says bad_request).
  std::future_status wait_for(std::chrono::nanoseconds timeout);

 private:
  friend class Publisher;
  struct State {
    bool done = false;
    PublishResult result;
  };
  PublishFuture(Publisher* pub, std::shared_ptr<State> state) : pub_(pub), state_(std::move(state)) {}
  // The publisher dropped the record (destroyed with it unresolved).
  [[nodiscard]] bool orphaned() const noexcept { return !state_->done && state_.use_count() == 1; }

  Publisher* pub_ = nullptr;
  std::shared_ptr<State> state_;
};

// --- zero-copy publish: Publisher::try_claim / commit / abort ---------------
// A frame claimed in a partition's staging ring (registered memory), for
// the application to fill in place: no copy of the payload. Returned by
// Publisher::try_claim(); `if (!claim)` it holds the error instead
// (error()). commit() makes it a record exactly as publish() would; abort()
// (or destroying an open claim) leaves no record, consumes no sequence and
// sends nothing. Movable, not copyable; it must not outlive its Publisher
// and belongs to the publisher's owner thread. buffer() is valid until the
// claim is committed or aborted, across poll() calls.
class CATENA_API Claim {
 public:
  Claim() = default;
  Claim(Claim&& other) noexcept { *this = std::move(other); }
  Claim& operator=(Claim&& other) noexcept;
  Claim(const Claim&) = delete;
  Claim& operator=(const Claim&) = delete;
  ~Claim();

  // Open: buffer() may be filled, then committed or aborted.
  [[nodiscard]] explicit operator bool() const noexcept { return pub_ != nullptr; }
  // Why try_claim() gave no claim (ok for an open one, or one closed since).
  [[nodiscard]] client::ErrorCode error() const noexcept { return error_; }
  // The record's payload, exactly `length` bytes (uninitialised: fill all of it).
  [[nodiscard]] std::span<std::byte> buffer() const noexcept { return buffer_; }
  [[nodiscard]] std::uint32_t partition() const noexcept { return partition_; }

 private:
  friend class Publisher;
  Publisher* pub_ = nullptr;
  std::span<std::byte> buffer_;
  std::uint32_t partition_ = 0;
  std::uint64_t ticket_ = 0;  // which claim of its partition
  client::ErrorCode error_ = client::ErrorCode::ok;
};

struct PublisherOptions {
  std::string provider = "soft";
  // 0: the controller issues an id. Otherwise 1..2^62-1, e.g. an id that
  // stays the same across restarts; the epoch is issued either way.
  std::uint64_t producer_id = 0;
  // A partition's staging ring, at most (at the publisher, and registered
  // at its head). No partition has one until its first record: it starts
  // at 64 KiB (chain::kMinRingBytes; larger if that record needs it, a
  // frame taking at most half a ring) and doubles, up to this, when records
  // find it full, once its records in flight are acknowledged (a new
  // session with the head, same producer id and epoch).
  std::uint32_t ring_bytes = 4u << 20;
  // A ring whose records took at most a quarter of it for this long is
  // halved, down to 64 KiB, the same way (a new session once its records
  // are acknowledged; new records wait meanwhile), so that what a burst
  // took (here, and registered at the head) goes back; it grows again when
  // records find it full. 0: rings never shrink.
  std::chrono::milliseconds ring_shrink_after{60000};
  // The sum of this publisher's rings (ring_bytes_in_use()). A ring does not
  // grow past it, and the growth of one leaves 64 KiB for every partition
  // that has no ring yet; create() refuses (invalid_argument) a budget
  // below 64 KiB per partition. A partition a channel alter adds whose
  // 64 KiB do not fit answers resource_exhausted. A record too large for
  // the ring the budget allows is too_large.
  std::uint64_t ring_budget_bytes = 64ull << 20;
  // Batching: records published within `linger` are sent in one write, up to
  // max_batch_bytes. linger 0 sends each record at once (lowest latency).
  std::chrono::microseconds linger{0};
  std::uint32_t max_batch_bytes = 256u << 10;
  // Unacknowledged records per partition; capped to the head's dedup window
  // (chain::ProducerState::kWindow) so a retry always finds its offset.
  std::uint32_t max_in_flight = 8192;
  // Open a commit watch with each partition's tail, which then acknowledges
  // records as soon as it holds them (two hand-offs sooner than the head).
  // Off: only the head acknowledges.
  bool tail_acks = true;
  // Mark every record for stage tracing: each replica adds the record's age
  // (from its publish, this host's wall clock) to its node's histogram for
  // its chain position, which NodeStats.stage_latency reports (catena bench
  // does this for its commit-ack rows). Costs a clock read per record at
  // each replica.
  bool trace_stages = false;
  std::chrono::milliseconds connect_timeout{3000};
  // How long a partition may stay unreachable before its pending records
  // fail with `unavailable`. Such a record may or may not have been stored
  // (the head may have taken it just before the link broke). Pending
  // records also fail, with `data_lost`, when every copy of their partition
  // was lost and it was rebuilt: they may have been committed in the lost
  // chain, and resending them could store them twice.
  std::chrono::milliseconds retry_timeout{30000};
  // While records await their ack and none came for this long, re-read the
  // partition's route: a head cut off the network goes silent without
  // breaking the connection, and a new head in the route means moving on.
  // (A head that holds records back says so every 250 ms: no stall.)
  // Likewise while a head dial has waited this long for its answer (again
  // every stall_check): a new head in the route ends the dial.
  std::chrono::milliseconds stall_check{250};
  // Partition events (client_event.hpp): route_changed, disconnected,
  // reconnected, ack_stalled, partition_unavailable, log_full,
  // segment_memory_full, rate_limited; on this thread, from
  // poll(), never per record. Empty: none.
  ClientEventHandler on_event;
};

class CATENA_API Publisher {
 public:
  // Errors: invalid_argument, unknown_channel (fix the call), or
  // controller_unavailable, unavailable... (retriable(): try again later).
  static client::Result<std::unique_ptr<Publisher>> create(RouteSource& routes, const std::string& channel,
                                                           const PublisherOptions& opts = {});
  ~Publisher();

  // Queues one record. Returns ok, backpressure (window or ring full, or a
  // channel alter's switch under way: poll and retry), too_large, invalid_argument (no such partition), or
  // unavailable (partition unreachable past the retry timeout). The callback runs on this thread from poll().
  [[nodiscard]] client::ErrorCode publish(std::span<const std::byte> key, std::span<const std::byte> payload,
                                          PublishCallback cb);
  // A record with a key and headers (Record), placed by its key as above.
  // invalid_argument also when the key or a header exceeds its limit.
  [[nodiscard]] client::ErrorCode publish(const Record& record, PublishCallback cb);
  // Same, to an explicit partition.
  [[nodiscard]] client::ErrorCode publish_to(std::uint32_t partition, std::span<const std::byte> payload,
                                             PublishCallback cb);
  // A Record to an explicit partition (its key is carried, not used to place it).
  [[nodiscard]] client::ErrorCode publish_to(std::uint32_t partition, const Record& record,
                                             PublishCallback cb);
  // Future flavour: waits (polling) while back-pressured, then returns a
  // future whose get() polls until the ack, e.g.
  //   auto r = pub.publish(key, payload).get();  // r.offset
  // A record refused outright (too_large, unavailable) gives a future that
  // is ready with that status.
  [[nodiscard]] PublishFuture publish(std::span<const std::byte> key, std::span<const std::byte> payload);
  [[nodiscard]] PublishFuture publish(const Record& record);

  // --- zero-copy publish (Claim, above) ---
  // Claims `length` payload bytes in `partition`'s ring. At most one claim
  // per partition is open at a time: while it is, try_claim, publish and
  // publish_to to that partition answer invalid_argument (keyless records
  // go round-robin over the other partitions). Errors as publish():
  // backpressure (window or ring full, or a channel alter's switch: poll()
  // and retry), too_large, invalid_argument (no such partition, or a claim
  // open there), unavailable (unreachable past the retry timeout). No
  // allocation, lock or system call.
  [[nodiscard]] Claim try_claim(std::uint32_t partition, std::size_t length);
  // The same, placed by `key` as publish(Record) does (round-robin without
  // one), the key and headers carried with the record; buffer() is the
  // payload after them. invalid_argument also when one exceeds its limit.
  [[nodiscard]] Claim try_claim(std::span<const std::byte> key, std::span<const HeaderField> headers,
                                std::size_t length);
  // Makes the filled claim the partition's next record, with its sequence
  // number, acknowledgement, retries and batching as publish() (stamped now).
  // ok, or unavailable (the partition unreachable past the retry timeout:
  // no record), or invalid_argument (the claim is not open). The claim is
  // closed either way. While a claim is open, poll() goes on with its
  // partition's acks, but a reconnect (resending its records to a new
  // head) and a channel alter's switch wait until it is closed.
  [[nodiscard]] client::ErrorCode commit(Claim& claim, PublishCallback cb);
  // Closes the claim: no record, no sequence consumed, nothing sent. A
  // closed or empty claim is left as it is.
  void abort(Claim& claim) noexcept;

  // Sends lingering batches, processes acknowledgements, follows redirects
  // and reconnects, never waiting (see the bound above). Returns the number
  // of acknowledgements handled.
  int poll();
  // Polls until every published record is acknowledged (or failed).
  bool flush(std::chrono::milliseconds timeout = std::chrono::milliseconds(30000));

  // The partition count of the channel generation keys are mapped by.
  [[nodiscard]] std::uint32_t partitions() const;
  [[nodiscard]] std::uint64_t producer_id() const;
  [[nodiscard]] std::uint64_t producer_epoch() const;
  [[nodiscard]] std::uint64_t in_flight() const;
  // Bytes of the partitions' staging rings (PublisherOptions::ring_bytes,
  // ring_budget_bytes): the publisher's own; each head registers as much
  // for the partitions it leads.
  [[nodiscard]] std::uint64_t ring_bytes_in_use() const;

  class Impl;

 private:
  explicit Publisher(std::unique_ptr<Impl> impl);
  PublishFuture publish_future(std::span<const std::byte> key, std::span<const std::byte> payload,
                               const Record* record);
  std::unique_ptr<Impl> impl_;
};

}  // namespace catena
