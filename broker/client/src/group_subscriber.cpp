#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <map>
#include <set>
#include <spdlog/spdlog.h>
#include <thread>
#include <utility>

#include <catena/broker/client_error.hpp>
#include <catena/broker/controller_routes.hpp>
#include <catena/broker/group_subscriber.hpp>
#include <catena/control/controller_client.hpp>
#include <catena/fabric/thread_annotations.hpp>
#include <catena/fabric/thread_owner.hpp>

#include "poll_wait.hpp"

namespace catena {

namespace idl = control::idl;
using Steady = std::chrono::steady_clock;

namespace {

constexpr std::chrono::milliseconds kMaxJoinBackoff{500};

bool lost_membership(const control::ControlError& e) {
  return e.code == idl::ErrorCode::UNKNOWN_MEMBER || e.code == idl::ErrorCode::NOT_OWNER;
}

}  // namespace

class CATENA_LOCAL GroupSubscriber::Impl {
 public:
  Impl(RouteSource& routes, std::string channel, GroupSubscriberOptions opts)
      : routes_(routes),
        channel_(std::move(channel)),
        opts_(std::move(opts)),
        controller_(control::ControllerClient::Options{opts_.controller, std::chrono::milliseconds(1000),
                                                       std::chrono::milliseconds(5000), opts_.token}) {}

  ~Impl() {
    {
      MutexLock lk(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (worker_.joinable()) worker_.join();
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // Setup, on the creating thread: the first join and its partitions.
  client::Result<void> start() {
    if (opts_.group.empty())
      return client::make_error(client::ErrorCode::invalid_argument, "a group is required");
    const auto deadline = Steady::now() + opts_.join_timeout;
    for (auto backoff = std::chrono::milliseconds(20);; backoff = std::min(backoff * 2, kMaxJoinBackoff)) {
      auto r = join_wk();
      if (r) break;
      if (!client::retriable(r.error().code) || Steady::now() + backoff >= deadline) return r;
      spdlog::info("group {}: join: {} (trying again)", opts_.group, r.error().message);
      std::this_thread::sleep_for(backoff);
    }
    worker_ = std::thread([this] { run_wk(); });
    return {};
  }

  // --- the polling thread ---

  int poll_st(const Subscriber::Handler& on_message, int max) {
    CATENA_ST_CHECK(owner_);
    if (for_poll_.load(std::memory_order_acquire)) take_changes_st();
    // What the last poll decided to commit (an alter's marker reached, the
    // interval) is taken before this one delivers more: a commit covers
    // only records earlier polls handed out, also to a caller that
    // buffers a whole poll's records before it consumes them (the Python
    // module's poll returns a list).
    if (commit_due_) {
      commit_due_ = false;
      commit_async_st();
    }
    int delivered = 0;
    bool at_marker = false, held = false;
    for (auto& o : owned_) {
      if (delivered >= max) break;
      const int n = o.sub->poll(on_message, max - delivered);
      if (n > 0 || o.sub->position(o.partition) != 0) o.known = true;
      delivered += n;
      // A marker reached is committed at once: members held at the
      // partitions it feeds wait for that commit (controller_groups.cpp).
      if (const std::uint64_t g = o.sub->marker_reached(o.partition); g != o.marker_reached) {
        o.marker_reached = g;
        o.known = true;
        at_marker = true;
      }
      held = held || o.sub->held_at_marker(o.partition);
    }
    if (held != holding_.load(std::memory_order_relaxed)) holding_.store(held, std::memory_order_relaxed);
    const auto now = Steady::now();
    if (at_marker || (opts_.commit_interval.count() > 0 && now >= next_commit_)) {
      commit_due_ = true;
      if (opts_.commit_interval.count() > 0) next_commit_ = now + opts_.commit_interval;
    }
    return delivered;
  }

  void commit_async_st() {
    CATENA_ST_CHECK(owner_);
    commit_due_ = false;
    if (opts_.before_commit) opts_.before_commit();
    bool any = false;
    {
      MutexLock lk(mu_);
      for (const auto& o : owned_) {
        if (!o.known) continue;
        to_commit_[o.partition] = o.sub->position(o.partition);
        any = true;
      }
    }
    if (any) wake_.notify_one();
  }

  // What it consumes, and what it was assigned that the next poll takes
  // (the first assignment, right after create(); not what it must give back).
  std::vector<std::uint32_t> partitions_st() const {
    CATENA_ST_CHECK(owner_);
    std::vector<std::uint32_t> out;
    for (const auto& o : owned_) out.push_back(o.partition);
    if (for_poll_.load(std::memory_order_acquire)) {
      MutexLock lk(mu_);
      for (const auto& a : adopt_) out.push_back(a.partition);
      std::erase_if(out, [&](std::uint32_t p) {
        mu_.assert_held();  // called here, under the lock
        return revoke_.contains(p) || drop_.contains(p);
      });
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  // Stops the worker, commits the final positions in one batch and leaves
  // (on the owner's thread, from the destructor).
  void close_st() {
    {
      MutexLock lk(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (worker_.joinable()) worker_.join();
    if (for_poll_.load(std::memory_order_acquire)) take_changes_st();
    if (opts_.before_commit) opts_.before_commit();
    std::map<std::uint32_t, std::uint64_t> final_positions;
    {
      MutexLock lk(mu_);
      final_positions = std::move(to_commit_);
    }
    for (const auto& o : owned_) {
      if (o.known) final_positions[o.partition] = o.sub->position(o.partition);
    }
    std::erase_if(final_positions, [&](const auto& c) { return !held_.contains(c.first); });
    if (!final_positions.empty()) commit_final(std::move(final_positions));
    if (!member_id_.empty()) {
      if (auto r = controller_.leave_group(opts_.group, member_id_); !r) {
        spdlog::warn("group {}: member {} could not leave ({}); its session will expire", opts_.group,
                     member_id_, r.error().describe());
      }
    }
    owned_.clear();
  }

  Stats stats() const {
    return Stats{joins_.load(), commits_.load(), commit_refusals_.load(), revoked_.load()};
  }

 private:
  struct Owned {
    std::uint32_t partition = 0;
    std::unique_ptr<Subscriber> sub;
    // Its position is one to commit: it started at a commit or at the
    // earliest offset, or has been positioned since (delivered, resolved).
    bool known = false;
    std::uint64_t markers_released = 0;  // the assignment's, when it was created
    std::uint64_t marker_reached = 0;    // the last Subscriber::marker_reached seen
  };

  // What the worker changed: partitions to adopt, revoke, or drop.
  void take_changes_st() {
    // A revoke below commits positions (changes are rare: per assignment,
    // not per record).
    if (opts_.before_commit) opts_.before_commit();
    std::vector<std::unique_ptr<Subscriber>> dead;
    {
      MutexLock lk(mu_);
      for_poll_.store(false, std::memory_order_relaxed);
      const auto stop = [&](std::uint32_t p, bool commit) {
        auto it =
            std::find_if(owned_.begin(), owned_.end(), [&](const Owned& o) { return o.partition == p; });
        if (it == owned_.end()) return;
        mu_.assert_held();  // called below, under the lock
        if (commit && it->known) to_commit_[p] = it->sub->position(p);
        dead.push_back(std::move(it->sub));
        owned_.erase(it);
      };
      for (const std::uint32_t p : drop_) stop(p, false);
      drop_.clear();
      for (const std::uint32_t p : revoke_) {
        stop(p, true);
        stopped_.insert(p);
      }
      revoke_.clear();
      for (auto& a : adopt_) {
        a.sub->release_markers(a.partition, a.markers_released);
        owned_.push_back(std::move(a));
      }
      adopt_.clear();
      for (const auto& [p, generation] : release_) {
        for (auto& o : owned_) {
          if (o.partition == p) o.sub->release_markers(p, generation);
        }
      }
      release_.clear();
      // ~Subscriber waits for its worker calls: the group worker runs it.
      for (auto& d : dead) graveyard_.push_back(std::move(d));
    }
    wake_.notify_one();
  }

  // --- the worker thread (and setup, before it starts) ---

  client::Result<void> join_wk() {
    std::vector<std::int32_t> claim;
    for (const std::uint32_t p : held_) claim.push_back(static_cast<std::int32_t>(p));
    const auto sent = Steady::now();
    auto a = controller_.join_group(opts_.group, channel_, opts_.member_name, claim);
    if (!a) return broker::to_client_error(a.error());
    ++joins_;
    spdlog::info("group {}: joined as {} (generation {}), claiming [{}]", opts_.group, a->member_id,
                 a->generation, fmt::join(claim, ","));
    apply_wk(*a, sent);
    return {};
  }

  void heartbeat_wk() {
    const auto sent = Steady::now();
    auto a = controller_.group_heartbeat(opts_.group, member_id_, released_);
    if (!a) {
      if (a.code() == idl::ErrorCode::UNKNOWN_MEMBER) {
        // The controller forgot us (restart) or dropped us (silence): join
        // again naming what we still consume, if our session may still hold.
        spdlog::info("group {}: {}: {}", opts_.group, member_id_, a.error().describe());
        member_id_.clear();
        released_.clear();
      } else {
        spdlog::debug("group {}: heartbeat: {}", opts_.group, a.error().describe());
      }
      return;
    }
    released_.clear();
    apply_wk(*a, sent);
  }

  // The assignment says what to consume and what to give back.
  void apply_wk(const idl::GroupAssignment& a, Steady::time_point sent) {
    member_id_ = a.member_id;
    generation_ = a.generation;
    last_ok_ = sent;
    session_ = std::chrono::milliseconds(a.session_timeout_ms);
    interval_ = std::chrono::milliseconds(a.heartbeat_interval_ms);
    const std::set<std::uint32_t> assigned(a.partitions.begin(), a.partitions.end());
    const std::set<std::uint32_t> revoke(a.revoke.begin(), a.revoke.end());
    const auto released_of = [&](std::uint32_t p) -> std::uint64_t {
      const auto r = a.markers_released.find(static_cast<std::int32_t>(p));
      return r == a.markers_released.end() ? 0
                                           : static_cast<std::uint64_t>(std::max<std::int64_t>(r->second, 0));
    };
    // Markers the coordinator released in partitions already consumed.
    std::map<std::uint32_t, std::uint64_t> releases;
    for (const std::uint32_t p : held_) {
      const std::uint64_t g = released_of(p);
      if (!assigned.contains(p) || g <= markers_released_[p]) continue;
      markers_released_[p] = g;
      releases[p] = g;
    }
    std::vector<Owned> adopt;
    std::set<std::uint32_t> to_revoke, to_drop;
    for (const std::uint32_t p : held_) {
      if (revoke.contains(p)) {
        if (!revoking_.contains(p)) to_revoke.insert(p);
      } else if (!assigned.contains(p)) {
        to_drop.insert(p);  // another member has it (we were forgotten and rejoined): stop, commit nothing
      }
    }
    for (const std::uint32_t p : revoke) {
      if (!held_.contains(p)) released_.push_back(static_cast<std::int32_t>(p));  // our report was lost
    }
    for (const std::uint32_t p : to_drop) {
      held_.erase(p);
      markers_released_.erase(p);
    }
    for (const std::uint32_t p : to_revoke) revoking_.insert(p);
    // Each Subscriber::create asks the controller and sets up a ring, here
    // on the worker: many partitions at once would hold its heartbeats up
    // past the session (and the controller would drop the member). At most
    // half a heartbeat interval of them per assignment (one at least); the
    // rest with the next heartbeats, sent sooner meanwhile (starting_).
    const auto start_until = Steady::now() + interval_ / 2;
    bool started_one = false;
    starting_ = false;
    for (const std::uint32_t p : assigned) {
      if (held_.contains(p)) continue;
      if (started_one && Steady::now() >= start_until) {
        starting_ = true;
        break;
      }
      started_one = true;
      SubscriberOptions so = opts_.subscriber;
      so.partitions = {p};
      so.group.clear();
      so.markers_released_by_caller = true;
      bool known = false;
      if (auto s = a.start_offsets.find(static_cast<std::int32_t>(p)); s != a.start_offsets.end()) {
        so.start = Start::offset;
        so.start_offset = static_cast<std::uint64_t>(s->second);
        known = true;
      } else if (so.start != Start::latest) {
        so.start = Start::earliest;
        known = true;  // offset 0 (or the oldest one kept): a position to commit
      }
      auto sub = Subscriber::create(routes_, channel_, so);
      if (!sub) {
        spdlog::warn("group {}: partition {} of {}: {} (tried again on the next heartbeat)", opts_.group, p,
                     channel_, sub.error().message);
        continue;
      }
      held_.insert(p);
      markers_released_[p] = released_of(p);
      adopt.push_back(Owned{p, std::move(*sub), known, markers_released_[p], 0});
    }
    if (!releases.empty()) {
      spdlog::info("group {}: markers released: [{}]", opts_.group, fmt::join(releases, ","));
      {
        MutexLock lk(mu_);
        for (const auto& [p, g] : releases) release_[p] = std::max(release_[p], g);
      }
      for_poll_.store(true, std::memory_order_release);
    }
    if (adopt.empty() && to_revoke.empty() && to_drop.empty()) return;
    spdlog::info("group {}: {} at generation {}: starts [{}], revokes [{}], drops [{}]", opts_.group,
                 member_id_, generation_, fmt::join(assigned, ","), fmt::join(to_revoke, ","),
                 fmt::join(to_drop, ","));
    {
      MutexLock lk(mu_);
      for (auto& o : adopt) adopt_.push_back(std::move(o));
      revoke_.insert(to_revoke.begin(), to_revoke.end());
      drop_.insert(to_drop.begin(), to_drop.end());
    }
    for_poll_.store(true, std::memory_order_release);
  }

  control::Result<void> send_commit(const std::map<std::uint32_t, std::uint64_t>& positions) {
    std::vector<idl::PartitionOffset> batch;
    for (const auto& [p, offset] : positions) {
      idl::PartitionOffset po;
      po.__set_partition(static_cast<std::int32_t>(p));
      po.__set_offset(static_cast<std::int64_t>(offset));
      batch.push_back(po);
    }
    return controller_.commit_offsets(opts_.group, channel_, member_id_, generation_, batch);
  }

  // The last commit, from close. If the controller no longer knows this
  // member (it restarted, or the commit raced a session expiry), the member
  // joins again claiming what it consumed, starts nothing, and commits as
  // that member: otherwise the next owners would start at an older commit
  // and deliver again what this member delivered.
  void commit_final(std::map<std::uint32_t, std::uint64_t> positions) {
    if (!member_id_.empty()) {
      auto r = send_commit(positions);
      if (r) {
        ++commits_;
        return;
      }
      if (!lost_membership(r.error())) {
        spdlog::warn("group {}: final commit: {}", opts_.group, r.error().describe());
        return;
      }
    }
    std::vector<std::int32_t> claim;
    for (const auto& [p, offset] : positions) claim.push_back(static_cast<std::int32_t>(p));
    auto a = controller_.join_group(opts_.group, channel_, opts_.member_name, claim);
    if (!a) {
      spdlog::warn(
          "group {}: could not join again to commit where it stopped ({}): its partitions restart "
          "at their last commit",
          opts_.group, a.error().describe());
      return;
    }
    member_id_ = a->member_id;
    generation_ = a->generation;
    const std::set<std::int32_t> ours = [&] {
      std::set<std::int32_t> o(a->partitions.begin(), a->partitions.end());
      o.insert(a->revoke.begin(), a->revoke.end());
      return o;
    }();
    std::erase_if(positions,
                  [&](const auto& c) { return !ours.contains(static_cast<std::int32_t>(c.first)); });
    if (positions.empty()) return;
    if (auto r = send_commit(positions); r) {
      ++commits_;
    } else {
      spdlog::warn("group {}: final commit as {}: {}", opts_.group, member_id_, r.error().describe());
    }
  }

  // True if the controller took the batch.
  bool commit_wk(const std::map<std::uint32_t, std::uint64_t>& positions) {
    auto r = send_commit(positions);
    if (r) {
      ++commits_;
      return true;
    }
    if (lost_membership(r.error())) {
      ++commit_refusals_;
      spdlog::warn("group {}: commit refused: {}", opts_.group, r.error().describe());
      return true;  // nothing to retry: those partitions are no longer ours
    }
    spdlog::debug("group {}: commit: {} (retried)", opts_.group, r.error().describe());
    return false;
  }

  // Not heard for a session timeout (less a heartbeat, for the poll thread
  // to act): the controller may hand our partitions to another member, so
  // stop consuming all of them, commit nothing, and join again.
  void fence_wk() {
    spdlog::warn("group {}: {} not heard by the controller for {} ms: stops consuming [{}]", opts_.group,
                 member_id_, session_.count(), fmt::join(held_, ","));
    {
      MutexLock lk(mu_);
      for (auto& a : adopt_) graveyard_.push_back(std::move(a.sub));
      adopt_.clear();
      revoke_.clear();
      drop_.insert(held_.begin(), held_.end());
      drop_.insert(revoking_.begin(), revoking_.end());
      to_commit_.clear();
      stopped_.clear();
    }
    for_poll_.store(true, std::memory_order_release);
    held_.clear();
    revoking_.clear();
    released_.clear();
    member_id_.clear();
  }

  void run_wk() {
    pthread_setname_np(pthread_self(), "catena-grp");
    Steady::time_point last_heartbeat = Steady::now();
    for (;;) {
      std::map<std::uint32_t, std::uint64_t> commits;
      std::set<std::uint32_t> stopped;
      std::vector<std::unique_ptr<Subscriber>> dead;
      // Held at a marker, the member asks often whether it was released
      // (the poll thread's commit at the marker wakes this loop); with
      // partitions still to start, it starts the next few sooner.
      const auto next_heartbeat =
          last_heartbeat +
          (holding_.load(std::memory_order_relaxed) || starting_ ? interval_ / 8 : interval_);
      {
        UniqueLock lk(mu_);
        const bool pending = !to_commit_.empty() || !stopped_.empty();
        lk.wait_until(wake_, pending ? std::min(next_heartbeat, commit_retry_at_) : next_heartbeat, [&] {
          mu_.assert_held();  // the wait holds it when it asks
          const bool due = (!to_commit_.empty() || !stopped_.empty()) && Steady::now() >= commit_retry_at_;
          return stopping_ || due || !graveyard_.empty();
        });
        if (stopping_) return;
        commits = std::move(to_commit_);
        to_commit_.clear();
        stopped = std::move(stopped_);
        stopped_.clear();
        dead = std::move(graveyard_);
        graveyard_.clear();
      }
      dead.clear();
      // Only what is still ours: a partition dropped meanwhile would make
      // the controller refuse the whole batch.
      std::erase_if(commits, [&](const auto& c) { return !held_.contains(c.first); });
      if (!commits.empty() && (member_id_.empty() || !commit_wk(commits))) {
        commit_retry_at_ = Steady::now() + interval_ / 4;
        MutexLock lk(mu_);  // unreachable, or joining again: keep them, newer positions win
        for (const auto& [p, o] : commits) to_commit_.try_emplace(p, o);
        stopped_.insert(stopped.begin(), stopped.end());
        stopped.clear();
      }
      // Stopped and committed: given back with the next heartbeat, now. (If
      // the controller gave it back to us meanwhile, a later assignment
      // starts it again, from the offset just committed.)
      for (const std::uint32_t p : stopped) {
        if (!revoking_.erase(p)) continue;
        held_.erase(p);
        released_.push_back(static_cast<std::int32_t>(p));
        ++revoked_;
      }
      const auto now = Steady::now();
      if (!member_id_.empty() && now - last_ok_ > session_ - interval_) fence_wk();
      if (member_id_.empty()) {
        if (auto r = join_wk(); !r) spdlog::debug("group {}: join: {}", opts_.group, r.error().message);
        last_heartbeat = Steady::now();
      } else if (now >= next_heartbeat || !released_.empty()) {
        heartbeat_wk();
        last_heartbeat = Steady::now();
      }
    }
  }

  RouteSource& routes_;
  const std::string channel_;
  const GroupSubscriberOptions opts_;
  control::ControllerClient controller_;  // the worker's (and setup's, and close's)

  mutable Mutex mu_;
  std::condition_variable wake_;
  std::vector<Owned> adopt_ GUARDED_BY(mu_);                          // worker -> poll: consume
  std::set<std::uint32_t> revoke_ GUARDED_BY(mu_);                    // worker -> poll: stop, commit
  std::set<std::uint32_t> drop_ GUARDED_BY(mu_);                      // worker -> poll: stop only
  std::map<std::uint32_t, std::uint64_t> to_commit_ GUARDED_BY(mu_);  // poll -> worker
  std::set<std::uint32_t> stopped_ GUARDED_BY(mu_);                   // poll -> worker: revoked ones stopped
  std::map<std::uint32_t, std::uint64_t> release_ GUARDED_BY(mu_);    // worker -> poll: markers released
  std::vector<std::unique_ptr<Subscriber>> graveyard_ GUARDED_BY(mu_);  // poll -> worker: to destroy
  bool stopping_ GUARDED_BY(mu_) = false;
  std::atomic<bool> for_poll_{false};  // adopt_, revoke_, drop_ or release_ has something
  std::atomic<bool> holding_{false};   // poll -> worker: a partition is held at a marker

  // The polling thread's.
  fabric::ThreadOwner owner_;
  std::vector<Owned> owned_;
  Steady::time_point next_commit_ = Steady::now();
  bool commit_due_ = false;  // the next poll commits first (owner's thread)

  // The worker's (setup's and close's before and after it runs).
  std::string member_id_;
  std::int64_t generation_ = 0;
  std::set<std::uint32_t> held_;                             // handed to the poll thread, not dropped
  std::map<std::uint32_t, std::uint64_t> markers_released_;  // of held_: what the poll thread was told
  std::set<std::uint32_t> revoking_;                         // of held_, asked to stop
  std::vector<std::int32_t> released_;                       // stopped and committed: to report
  bool starting_ = false;                 // assigned partitions whose Subscriber the next assignment creates
  Steady::time_point last_ok_{};          // when the last answered heartbeat (or join) was sent
  Steady::time_point commit_retry_at_{};  // a failed commit is retried from then
  std::chrono::milliseconds session_{10000};
  std::chrono::milliseconds interval_{1000};
  std::thread worker_;

  std::atomic<std::uint64_t> joins_{0}, commits_{0}, commit_refusals_{0}, revoked_{0};
};

client::Result<std::unique_ptr<GroupSubscriber>> GroupSubscriber::create(RouteSource& routes,
                                                                         const std::string& channel,
                                                                         const GroupSubscriberOptions& opts) {
  auto impl = std::make_unique<Impl>(routes, channel, opts);
  if (auto r = impl->start(); !r) return r.error();
  return std::unique_ptr<GroupSubscriber>(new GroupSubscriber(std::move(impl)));
}

GroupSubscriber::GroupSubscriber(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GroupSubscriber::~GroupSubscriber() {
  impl_->close_st();
}

int GroupSubscriber::poll(const Subscriber::Handler& on_message, int max) {
  return impl_->poll_st(on_message, max);
}
int GroupSubscriber::poll_for(const Subscriber::Handler& on_message, std::chrono::milliseconds timeout,
                              int max) {
  return client_detail::poll_waiting([&] { return impl_->poll_st(on_message, max); }, timeout);
}

void GroupSubscriber::commit_async() {
  impl_->commit_async_st();
}

std::vector<std::uint32_t> GroupSubscriber::partitions() const {
  return impl_->partitions_st();
}

GroupSubscriber::Stats GroupSubscriber::stats() const {
  return impl_->stats();
}

}  // namespace catena
