// catena::GroupSubscriber: one member of a subscriber group. The controller
// assigns the group's partitions to its members (controller_groups.hpp);
// this member consumes the partitions it is given, one Subscriber each,
// and gives back the ones it is told to revoke after committing where it
// stopped, so their next owner starts exactly there.
//
// Guarantees (the README's "Subscriber groups" says the same):
//   - A partition moved between live members (a join, a leave, a revoke) is
//     delivered once: the old owner stops it, commits its position, reports
//     it released, and only then does the new owner start from that offset.
//   - A member that dies, or is cut off for a session timeout, hands over at
//     its last committed offset: records it delivered after that commit are
//     delivered again by the next owner (at-least-once), never skipped.
//   - A member that has not been heard by the controller for a session
//     timeout minus one heartbeat interval stops consuming on its own, so
//     it is not still consuming when the controller gives its partitions
//     to another member.
//   - Per-key order across a channel alter (`catena channel alter`): a
//     member holds a partition at an alter's marker (and commits the
//     marker's offset) until the controller releases it, which it does
//     once the group has committed every parent partition of that alter
//     (the partitions its new keys came from) up to their own markers. So
//     the group delivers all of a key's records from its old partition
//     before any from its new one, whichever members read them. A
//     partition a shrink removed stays assigned until the group read it up
//     to its marker. Holding costs a commit and a few fast heartbeats (an
//     eighth of the interval) per alter.
//
// Threads: poll(), commit_async() and partitions() are for the one polling
// thread, and never wait on the controller or the network (one atomic load
// per poll when nothing changed; a lock once per assignment change and per
// commit interval). The member's worker thread (catena-grp) joins,
// heartbeats, creates and destroys the per-partition Subscribers, and
// commits offsets in batches (one controller call for every partition).
// create() waits for the first assignment; ~GroupSubscriber commits what
// was delivered and leaves the group (waits on the controller).
//
// Public (client SDK): the standard library and the SDK's headers only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <catena/broker/subscriber.hpp>

namespace catena {

struct GroupSubscriberOptions {
  std::string controller = "127.0.0.1:7400";  // the group coordinator (the controller)
  // The tenant's (or admin's) token when the controller requires one
  // (README "Tenants"); the group and channel must be in its namespace.
  std::string token;
  std::string group;
  std::string member_name = "member";  // for people (catena group describe)
  // Provider, ring size, which replica to read; `start` says where a
  // partition the group never committed begins (earliest or latest).
  SubscriberOptions subscriber;
  // Positions are committed this often (and on every revoke, and when the
  // member leaves); zero: only by commit_async(). A commit poll() decides
  // on (the interval, an alter's marker) is taken at the start of the next
  // poll(): it covers what earlier polls delivered, never records of the
  // poll still running.
  std::chrono::milliseconds commit_interval{1000};
  // Called on the polling thread (inside poll(), commit_async() or the
  // destructor) just before the member takes its positions to commit: at
  // a channel alter's marker, a revoke, the commit interval, commit_async()
  // and when it leaves. A consumer that buffers what it was handed (stdio,
  // a batch) writes it out here, so that no committed position covers a
  // record it has not finished with: a member killed after a commit loses
  // nothing the group will not deliver again.
  std::function<void()> before_commit;
  // create() keeps trying the first join this long while the controller is
  // unreachable or restarting (a join whose answer was lost is tried again;
  // the controller forgets the orphan after a session timeout).
  std::chrono::milliseconds join_timeout{30000};
};

class CATENA_API GroupSubscriber {
 public:
  static client::Result<std::unique_ptr<GroupSubscriber>> create(RouteSource& routes,
                                                                 const std::string& channel,
                                                                 const GroupSubscriberOptions& opts);
  ~GroupSubscriber();
  GroupSubscriber(const GroupSubscriber&) = delete;
  GroupSubscriber& operator=(const GroupSubscriber&) = delete;

  // Delivers up to `max` records of the partitions this member consumes now.
  int poll(const Subscriber::Handler& on_message, int max = 1024);
  // As poll(), waiting up to `timeout` for the first record (as
  // Subscriber::poll_for).
  int poll_for(const Subscriber::Handler& on_message, std::chrono::milliseconds timeout, int max = 1024);
  // Hands the positions of every partition to the worker to commit (one
  // batch); returns at once.
  void commit_async();
  // The partitions this member consumes now, and those it was assigned
  // that the next poll() starts (right after create(): its first assignment).
  [[nodiscard]] std::vector<std::uint32_t> partitions() const;

  struct Stats {
    std::uint64_t joins = 0;
    std::uint64_t commits = 0;          // batches the controller accepted
    std::uint64_t commit_refusals = 0;  // batches it refused (the partition had moved on)
    std::uint64_t revoked = 0;          // partitions given back after a commit
  };
  [[nodiscard]] Stats stats() const;  // any thread

  class Impl;

 private:
  explicit GroupSubscriber(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace catena
