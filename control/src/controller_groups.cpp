// Subscriber groups, the controller's side: checks, the committed offsets
// members start from, which alter markers they may read past, and batch
// commits. Who owns what is the GroupCoordinator's (controller_groups.hpp),
// held in memory under mu_; offsets are durable in the metadata
// (group_offsets).
//
// Per-key order across a channel alter, for a group: a member reads each
// of its partitions with a Subscriber of its own, which cannot see the
// partitions that feed it. So the controller, which sees every member's
// commits, decides: partition p may be read past its marker of generation
// G once every parent of p in that alter (chain::alter_parents) has a
// committed offset at or past its own marker of G (a member holding a
// partition at a marker commits the marker's offset: it "stands" there).
// Parents only have to reach their markers, not pass them, so a shrink,
// where every partition feeds every other, cannot deadlock. A partition
// that a shrink removed stays in the group's assignment until the group
// has reached its last marker (its last records were delivered).
#include <algorithm>
#include <fmt/format.h>

#include <catena/chain/key_map.hpp>
#include <catena/control/controller.hpp>
#include <catena/control/validation.hpp>

namespace catena::control {
namespace {

constexpr std::size_t kMaxMemberNameLength = 64;

const std::map<std::int32_t, std::int64_t>* offsets_of(const meta::MetaState& state, const std::string& group,
                                                       const std::string& channel) {
  auto g = state.group_offsets.find(group);
  if (g == state.group_offsets.end()) return nullptr;
  auto c = g->second.find(channel);
  return c == g->second.end() ? nullptr : &c->second;
}

// The group has delivered partition q up to its marker at `marker` (-1:
// the marker is not appended yet).
bool reached_marker(const std::map<std::int32_t, std::int64_t>* committed, std::int32_t q,
                    std::int64_t marker) {
  if (marker < 0 || committed == nullptr) return false;
  const auto c = committed->find(q);
  return c != committed->end() && c->second >= marker;
}

// The newest generation of `ch` whose marker the group may read past in
// partition p (0: none of the alters').
std::int64_t markers_released(const meta::ChannelRecord& ch,
                              const std::map<std::int32_t, std::int64_t>* committed, std::int32_t p) {
  std::int64_t released = 0;
  for (std::size_t i = 1; i < ch.generations.size(); ++i) {
    const auto& g = ch.generations[i];
    const std::int32_t from = ch.generations[i - 1].partitions;
    if (g.markers.contains(p) && p < g.partitions) {
      for (const std::int32_t q : chain::alter_parents(p, from, g.partitions)) {
        const auto m = g.markers.find(q);
        if (q == p || m == g.markers.end()) continue;
        if (!reached_marker(committed, q, m->second)) return released;
      }
    }
    released = g.generation;
  }
  return released;
}

}  // namespace

std::int32_t Controller::group_span_locked(const std::string& group, const meta::ChannelRecord& ch) const {
  // An open grow's partitions fill as publishers switch: assigned at once.
  std::int32_t span = ch.config.partitions;
  if (!ch.generations.empty()) span = std::max(span, ch.generations.back().partitions);
  const auto* committed = offsets_of(store_->state(), group, ch.config.name);
  const auto routed = static_cast<std::int32_t>(ch.routes.size());
  for (std::int32_t p = span; p < routed; ++p) {
    for (auto g = ch.generations.rbegin(); g != ch.generations.rend(); ++g) {
      const auto m = g->markers.find(p);
      if (m == g->markers.end()) continue;
      if (!reached_marker(committed, p, m->second)) span = p + 1;  // records below its last marker wait
      break;
    }
  }
  return span;
}

void Controller::fill_positions_locked(const std::string& group, const std::string& channel,
                                       idl::GroupAssignment& assignment) const {
  std::map<std::int32_t, std::int64_t> start, released;
  const auto* offsets = offsets_of(store_->state(), group, channel);
  if (offsets != nullptr) {
    for (const std::int32_t p : assignment.partitions) {
      if (auto o = offsets->find(p); o != offsets->end()) start[p] = o->second;
    }
  }
  assignment.__set_start_offsets(start);
  const auto ch = store_->state().channels.find(channel);
  for (const std::int32_t p : assignment.partitions) {
    released[p] = ch == store_->state().channels.end() ? 0 : markers_released(ch->second, offsets, p);
  }
  assignment.__set_markers_released(released);
}

Result<idl::GroupAssignment> Controller::join_group(const std::string& group, const std::string& channel,
                                                    const std::string& member_name,
                                                    const std::vector<std::int32_t>& owned) {
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  if (auto r = validate_name("group", group, kMaxGroupNameLength); !r) return r.error();
  if (auto r = validate_name("member name", member_name, kMaxMemberNameLength); !r) return r.error();
  auto ch = channel_locked(channel);
  if (!ch) return ch.error();
  if (!group_known_locked(group)) {
    if (auto r = check_quota_locked(group, 0, 0, 1); !r) return r.error();
  }
  auto a = groups_.join(group, channel, member_name, owned, group_span_locked(group, **ch));
  if (!a) return a.error();
  fill_positions_locked(group, channel, *a);
  return a;
}

Result<idl::GroupAssignment> Controller::group_heartbeat(const std::string& group,
                                                         const std::string& member_id,
                                                         const std::vector<std::int32_t>& released) {
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  const auto* g = groups_.find(group);
  if (g == nullptr) {
    return make_error(
        idl::ErrorCode::UNKNOWN_MEMBER,
        fmt::format("group '{}' has no members (the controller may have restarted): join again", group));
  }
  const std::string channel = g->channel;
  auto ch = channel_locked(channel);
  if (!ch) return ch.error();
  auto a = groups_.heartbeat(group, member_id, released, group_span_locked(group, **ch));
  if (!a) return a.error();
  fill_positions_locked(group, channel, *a);
  return a;
}

Result<void> Controller::leave_group(const std::string& group, const std::string& member_id) {
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r;
  return groups_.leave(group, member_id);
}

Result<void> Controller::commit_offsets(const std::string& group, const std::string& channel,
                                        const std::string& member_id, std::int64_t generation,
                                        const std::vector<idl::PartitionOffset>& offsets) {
  UniqueLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r;
  if (auto r = validate_name("group", group, kMaxGroupNameLength); !r) return r;
  auto ch = channel_locked(channel);
  if (!ch) return ch.error();
  for (const auto& o : offsets) {
    // A partition a shrink removed keeps its route (and its commits) while
    // readers may still need its records.
    const auto routed = static_cast<std::int32_t>((*ch)->routes.size());
    if (o.partition < 0 || o.partition >= routed || o.offset < 0) {
      return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                        fmt::format("partition {} offset {}: a partition of '{}' (0..{}) and an offset >= 0",
                                    o.partition, o.offset, channel, routed - 1));
    }
  }
  if (auto r = groups_.check_commit(group, channel, member_id, generation, offsets); !r) return r;
  std::vector<QueuedOffset> queued;
  for (const auto& o : offsets) queued.push_back({group, channel, o.partition, o.offset, false});
  return commit_queued_offsets(lock, std::move(queued));
}

Result<void> Controller::commit_queued_offsets(UniqueLock& lock, std::vector<QueuedOffset> offsets) {
  // The batches this commit waits on: the one queued offsets go out in,
  // and the one in flight when an offset is covered only by what it sent
  // (the ZooKeeper store shows a background commit in state() at once).
  std::shared_ptr<OffsetBatch> queued_batch, sent_batch;
  for (auto& o : offsets) {
    OffsetKey key{std::move(o.group), std::move(o.channel), o.partition};
    auto q = queued_offsets_.find(key);
    if (!o.exact) {
      // A member never moves an offset backwards: a late retry of an older
      // commit must not undo a newer one.
      if (q != queued_offsets_.end() && q->second >= o.offset) {
        queued_batch = queued_offsets_batch_;
        continue;
      }
      const auto* committed = offsets_of(store_->state(), std::get<0>(key), std::get<1>(key));
      if (committed != nullptr) {
        if (auto c = committed->find(o.partition); c != committed->end() && c->second >= o.offset) {
          if (auto s = sent_offsets_.find(key); s != sent_offsets_.end() && s->second >= o.offset) {
            sent_batch = sent_offsets_batch_;
          }
          continue;
        }
      }
    }
    if (q == queued_offsets_.end()) {
      queued_offsets_.emplace(std::move(key), o.offset);
    } else {
      q->second = o.offset;
    }
    if (!queued_offsets_batch_) queued_offsets_batch_ = std::make_shared<OffsetBatch>();
    queued_batch = queued_offsets_batch_;
  }
  if (!queued_batch && !sent_batch) return {};
  background_commit_locked();  // sent at once unless one is in flight
  // Each waiting call holds one of the server's threads (16): with the
  // store stalled and many members committing, waiters must not take the
  // threads heartbeats are answered on. Beyond half of them a commit is
  // answered at once: queued, not yet taken.
  constexpr int kMaxWaiters = 8;
  const auto answered = [&] {
    mu_.assert_held();
    return (!queued_batch || queued_batch->done) && (!sent_batch || sent_batch->done);
  };
  if (!answered() && offset_commit_waiters_ >= kMaxWaiters) {
    return make_error(idl::ErrorCode::UNAVAILABLE,
                      fmt::format("{} offset commits already wait for the metadata store: this one is "
                                  "queued and may still be taken: commit again",
                                  offset_commit_waiters_));
  }
  ++offset_commit_waiters_;
  const struct Waiting {
    int& waiters;
    ~Waiting() { --waiters; }
  } waiting{offset_commit_waiters_};
  // Answered within the client's RPC timeout (5 s by default): a commit
  // not answered by then may still be applied later, which a member's next
  // commit (of the same offset or a newer one) makes no difference to.
  constexpr auto kWait = std::chrono::milliseconds(4000);
  const auto deadline = clock_.now() + kWait;
  while (!answered()) {
    if (auto r = check_running_locked(); !r) return r;
    if (clock_.now() >= deadline) {
      return make_error(idl::ErrorCode::UNAVAILABLE,
                        fmt::format("the metadata store has not taken the offset commit in {} ms (it may "
                                    "still): commit again",
                                    kWait.count()));
    }
    // The store's answer comes on its own thread and is taken here (or by
    // the maintenance tick, or another commit waiting): look every 2 ms.
    (void)lock.wait_for(offsets_answered_, std::chrono::milliseconds(2), answered);
    background_commit_locked();
  }
  for (const auto* batch : {&queued_batch, &sent_batch}) {
    if (*batch && !(*batch)->result) return (*batch)->result;
  }
  return {};
}

void Controller::answer_offsets_locked(std::shared_ptr<OffsetBatch>& batch, const Result<void>& result) {
  if (!batch) return;
  batch->done = true;
  batch->result = result;
  batch.reset();
  offsets_answered_.notify_all();
}

Result<std::vector<std::string>> Controller::list_groups() const {
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  std::set<std::string> names;
  for (const auto& [name, g] : groups_.groups()) names.insert(name);
  for (const auto& [name, offsets] : store_->state().group_offsets) names.insert(name);
  return std::vector<std::string>(names.begin(), names.end());
}

Result<idl::GroupStatus> Controller::describe_group(const std::string& group) const {
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  const auto* g = groups_.find(group);
  const auto& state = store_->state();
  auto stored = state.group_offsets.find(group);
  if (g == nullptr && stored == state.group_offsets.end()) {
    return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                      fmt::format("no group '{}' (no members, no committed offsets)", group));
  }
  idl::GroupStatus out;
  out.__set_group(group);
  std::string channel;
  if (g != nullptr) {
    channel = g->channel;
    out.__set_generation(g->generation);
    const auto now = clock_.now();
    for (const auto& [id, m] : g->members) {
      idl::GroupMemberStatus ms;
      ms.__set_member_id(id);
      ms.__set_name(m.name);
      for (const auto& [p, gen] : m.owned) {
        if (!m.revoking.contains(p)) ms.partitions.push_back(p);
      }
      ms.__set_revoking({m.revoking.begin(), m.revoking.end()});
      ms.__set_last_heard_ms_ago(
          std::chrono::duration_cast<std::chrono::milliseconds>(now - m.last_heard).count());
      ms.__isset.partitions = true;
      out.members.push_back(std::move(ms));
    }
    out.__isset.members = true;
  } else if (stored->second.size() == 1) {
    channel = stored->second.begin()->first;
  }
  out.__set_channel(channel);
  const meta::ChannelRecord* record = nullptr;
  if (!channel.empty()) {
    if (auto ch = channel_locked(channel); ch) record = *ch;
  }
  if (record != nullptr) {
    const auto* offsets = offsets_of(state, group, channel);
    for (std::int32_t p = 0; p < record->config.partitions; ++p) {
      idl::GroupPartitionStatus ps;
      ps.__set_partition(p);
      if (g != nullptr) {
        if (auto o = g->owner.find(p); o != g->owner.end()) ps.__set_owner(o->second);
        if (auto t = g->target.find(p); t != g->target.end()) ps.__set_moving_to(t->second);
      }
      std::int64_t committed = -1;
      if (offsets != nullptr) {
        if (auto o = offsets->find(p); o != offsets->end()) committed = o->second;
      }
      ps.__set_committed(committed);
      const std::int64_t end = high_water_locked(channel, p);
      ps.__set_end_offset(end);
      ps.__set_lag(std::max<std::int64_t>(0, end - std::max<std::int64_t>(0, committed)));
      out.partitions.push_back(std::move(ps));
    }
    out.__isset.partitions = true;
  }
  return out;
}

std::vector<GroupCoordinator::Change> Controller::group_changes() const {
  MutexLock lock(mu_);
  return {groups_.changes().begin(), groups_.changes().end()};
}

int Controller::offset_commits_waiting() const {
  MutexLock lock(mu_);
  return offset_commit_waiters_;
}

void Controller::groups_tick_locked() {
  std::map<std::string, std::int32_t> spans;
  const auto& channels = store_->state().channels;
  for (const auto& [name, g] : groups_.groups()) {
    if (auto ch = channels.find(g.channel); ch != channels.end())
      spans[name] = group_span_locked(name, ch->second);
  }
  groups_.tick(spans);
}

}  // namespace catena::control
