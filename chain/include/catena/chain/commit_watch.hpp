// The commit watch: a publisher's second session, with the tail of a chain
// of two or more, so its records are acknowledged two hand-offs sooner than
// through the head. Both halves and their messages are here.
//
// Why it is correct: the tail holds a record only once every replica does,
// so whatever it holds is committed. It acknowledges a producer's records as
// soon as it holds them; the head learns of the same commit only when the
// commit word travels back up the chain. The head's acknowledgements stay
// authoritative (errors, duplicates, ring credit); the publisher takes
// whichever comes first and ignores the second.
//
// The exchange:
//   publisher -> tail  CommitWatchHello {channel, partition, route epoch,
//                                        producer id, producer epoch}
//   tail -> publisher  CommitWatchWelcome {status, the tail's epoch}; refused:
//                        not_ready     the hello names a newer epoch than the tail's
//                        moved         the partition moved on (this replica keeps a sealed range)
//                        not_tail      not the tail, or a chain of one (the head acks first anyway)
//                        stale_epoch   the hello names an older epoch
//                        resource_exhausted  max_watchers reached
//   tail -> publisher  PublishAck {ok, first_seq, count, first_offset,
//                                  ring_consumed 0, epoch} per contiguous run
//                      of the producer's records committed since the last
//                      pass (sequences and offsets both consecutive).
//
// What each side may drop:
//   - the tail drops an ack its send queue has no room for (the head's
//     covers the same records), and every watch once it stops being the tail
//     of a chain of two or more (what it holds may no longer be committed);
//     records that fell out of retention before it looked are left to the head;
//   - the publisher drops a watch whose link broke, and one that stays
//     connected but silent while the head resolves kStaleAfter records (a
//     tail cut off the network); it opens another later.
//
// Threading: each half is owned by one thread (the tail's data-plane thread,
// the publishing thread) and never blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include <catena/chain/link.hpp>
#include <catena/chain/partition_log.hpp>
#include <catena/chain/publish.hpp>
#include <catena/chain/tenant_share.hpp>
#include <catena/chain/wire.hpp>

namespace catena::chain {

// --- the messages --------------------------------------------------------------
namespace wire {

struct CommitWatchHello {
  ChannelRef ref;
  std::uint64_t producer_id;
  std::uint64_t producer_epoch;
  std::uint8_t access_secret[kAccessSecretBytes];
};

struct CommitWatchWelcome {
  Status status;
  std::uint16_t reserved0;
  std::uint32_t reserved1;
  std::uint64_t epoch;
};

template <>
constexpr Kind kind_of<CommitWatchHello>() {
  return Kind::commit_watch_hello;
}
template <>
constexpr Kind kind_of<CommitWatchWelcome>() {
  return Kind::commit_watch_welcome;
}

}  // namespace wire

// --- the tail's half ---------------------------------------------------------

// What the replica says about itself when a watch says hello.
struct WatchGate {
  bool authorized = true;            // the hello carries the partition's access secret
  std::uint64_t epoch = 0;           // the replica's epoch
  bool retired = false;              // it keeps a sealed range only (partition handoff)
  bool tail_of_two_or_more = false;  // the tail of a chain of two or more
  std::uint32_t max_watchers = 256;
  SessionSeats* tenant_seats = nullptr;  // the tenant's sessions on this broker; nullptr: none
};

class CommitWatchServer {
 public:
  // A publisher said hello: answers, and keeps the link if it is accepted.
  // Watches start at the commit offset: what is committed before was (or
  // will be) acknowledged by the head.
  void attach(std::unique_ptr<Link> link, const wire::CommitWatchHello& hello, const WatchGate& gate,
              const PartitionLog& log);

  // One pass: notices watches that hung up, then acknowledges each watching
  // producer's records committed since the last pass. Returns the acks sent.
  int do_work(const PartitionLog& log, std::uint64_t epoch);

  // Connection events of the watches' links (a hang-up while idle).
  void poll_events();

  // Not the tail any more: every watch is disconnected.
  void drop_all();

  [[nodiscard]] std::size_t size() const { return watches_.size(); }
  [[nodiscard]] bool empty() const { return watches_.empty(); }

 private:
  struct Watch {
    std::unique_ptr<Link> link;
    std::uint64_t producer_id = 0;
    std::uint64_t producer_epoch = 0;
    // The run of this producer's records seen in this pass, acknowledged at
    // its end or when the next record does not extend it.
    std::uint64_t first_seq = 0;
    std::uint32_t count = 0;
    std::uint64_t first_offset = 0;
    bool closed = false;
    Seat seat;  // one of its tenant's sessions here
  };
  Watch* watch_of(std::uint64_t producer_id, std::uint64_t producer_epoch);
  int flush(Watch& w, std::uint64_t epoch);

  std::vector<std::unique_ptr<Watch>> watches_;
  Cursor cursor_;           // the next record not yet acknowledged to watches
  std::uint64_t next_ = 0;  // its offset
};

// --- the publisher's half ----------------------------------------------------

class CommitWatchClient {
 public:
  // Records the head resolved while the watch said nothing at all: this many
  // means the watch is on a node that no longer gets the chain's records
  // (cut off, and silent rather than disconnected).
  static constexpr std::uint32_t kStaleAfter = 1024;

  // The hello for a producer's watch at the tail of the route at `epoch`.
  [[nodiscard]] static wire::CommitWatchHello hello(std::string_view channel, std::uint32_t partition,
                                                    std::uint64_t epoch, std::uint64_t producer_id,
                                                    std::uint64_t producer_epoch);

  // The tail welcomed the watch (status ok): its acks come on `link`.
  void attach(std::unique_ptr<Link> link) {
    link_ = std::move(link);
    head_first_ = 0;
  }
  [[nodiscard]] bool connected() const { return link_ != nullptr; }
  void drop() {
    link_.reset();
    head_first_ = 0;
  }

  // Reads the tail's acks: on_ack(const wire::PublishAck&) for each. Then
  // drops the watch if its link broke or it went stale; false if it did.
  template <class OnAck>
  bool do_work(OnAck&& on_ack) {
    if (!link_) return false;
    link_->poll_recv(
        [&](const std::byte* msg, std::uint32_t len) {
          auto ack = wire::decode<wire::PublishAck>(msg, len);
          if (!ack) return;
          head_first_ = 0;  // the tail is alive and acking
          on_ack(*ack);
        },
        [](std::uint32_t, std::uint32_t) {});
    if (link_->broken() || head_first_ >= kStaleAfter) {
      drop();
      return false;
    }
    return true;
  }

  // The head resolved `records` records first (the watch said nothing of them).
  void head_resolved(std::uint32_t records) {
    if (link_) head_first_ += records;
  }

 private:
  std::unique_ptr<Link> link_;
  std::uint32_t head_first_ = 0;
};

}  // namespace catena::chain
