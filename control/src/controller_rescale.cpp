// Changing a channel's partition count live (Controller::alter_channel):
// generation g+1 of N' partitions is brought in by a marker in every
// affected partition (chain/key_map.hpp), so that publishers switch a key's
// partition and subscribers deliver its records in order across the change.
//
// Steps, and what a failure at each leaves:
//   1. one record: the partitions     restart or failure: the generation is
//      added are placed, generation   open; tick() (or alterChannel with the
//      g+1 is open with every          same count) goes on from step 2.
//      affected partition's marker    Publishers still map by g (config.
//      unset (-1)                     partitions is unchanged).
//   2. new chains pushed              the push machinery retries
//   3. per affected partition: its    a head that is down or moved on: that
//      head appends the marker        marker stays unset and is asked for
//      (appendMarker, idempotent per  again at the route's current head,
//      generation), polled until      which answers the offset of a marker
//      committed (tick() asks once    it holds (committed records survive
//      per round: it never waits);    every repair) or appends one
//      one record notes its offset
//   4. the record that notes the      generation g+1 complete,
//      last one completes it          config.partitions = N'
//
// Control messages: one appendMarker per affected head (retries aside) and
// one configureChain per replica of an added partition; nothing to any
// other node, and nothing to clients (they meet the markers on the data
// plane). Partitions removed by a shrink keep their chains and records.
#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <spdlog/fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <thread>

#include <catena/chain/key_map.hpp>
#include <catena/chain/limits.hpp>
#include <catena/control/controller.hpp>

namespace catena::control {
namespace {

// The channel's open generation, if its last one is not complete.
idl::ChannelGeneration* open_generation(meta::ChannelRecord& ch) {
  if (ch.generations.empty() || ch.generations.back().complete) return nullptr;
  return &ch.generations.back();
}

std::size_t markers_unset(const idl::ChannelGeneration& g) {
  return static_cast<std::size_t>(
      std::count_if(g.markers.begin(), g.markers.end(), [](const auto& m) { return m.second < 0; }));
}

}  // namespace

Result<idl::ChannelInfo> Controller::alter_channel(const std::string& name, std::int32_t partitions) {
  MutexLock alter_lock(alter_mu_);
  {
    MutexLock lock(mu_);
    if (auto r = check_running_locked(); !r) return r.error();
    auto found = channel_locked(name);
    if (!found) return found.error();
    if (partitions < 1 || partitions > chain::limits::kMaxPartitions) {
      return make_error(
          idl::ErrorCode::INVALID_ARGUMENT,
          fmt::format("partitions must be 1..{}, got {}", chain::limits::kMaxPartitions, partitions));
    }
    meta::ChannelRecord ch = **found;
    if (const auto* open = open_generation(ch); open != nullptr) {
      if (open->partitions != partitions) {
        return make_error(
            idl::ErrorCode::UNAVAILABLE,
            fmt::format("channel '{}' is being altered to {} partitions; run the alter to {} again to finish "
                        "it first",
                        name, open->partitions, open->partitions));
      }
      // The same alter again: finish it (below).
    } else {
      const std::int32_t from = ch.config.partitions;
      if (partitions == from) {
        return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                          fmt::format("channel '{}' already has {} partitions", name, from));
      }
      if (partitions > from) {
        const std::int64_t added = partitions - from;
        if (auto r = check_quota_locked(name, 0, added, 0,
                                        added * ch.config.replication * ch.config.segment_bytes);
            !r) {
          return r.error();
        }
      }
      const auto affected = chain::alter_affected(from, partitions);
      const auto& moves = store_->state().moves;
      const auto moving = moves.find(name);
      for (const std::int32_t p : affected) {
        if (static_cast<std::size_t>(p) >= ch.routes.size()) continue;  // added below
        const auto& route = ch.routes[static_cast<std::size_t>(p)];
        if (route.replicas.empty() || !route.joining.empty() || !fully_acked_locked(route) ||
            (moving != moves.end() && moving->second.count(p) != 0)) {
          return make_error(idl::ErrorCode::UNAVAILABLE,
                            fmt::format("{}/{} is being repaired, moved or reconfigured; try again when "
                                        "`catena channel describe` shows a full chain",
                                        name, p));
        }
      }
      Placement placement(candidates_for_locked(name));  // within its tenant's zones
      std::vector<std::int32_t> added;
      for (auto p = static_cast<std::int32_t>(ch.routes.size()); p < partitions; ++p) {
        auto route = place_route_locked(placement, ch.config, p);
        if (!route) return route.error();
        ch.routes.push_back(std::move(*route));
        added.push_back(p);
      }
      ch.__isset.routes = true;
      if (ch.generations.empty()) {
        idl::ChannelGeneration first;  // the channel as created
        first.__set_generation(0);
        first.__set_partitions(from);
        first.__set_complete(true);
        ch.generations.push_back(std::move(first));
      }
      idl::ChannelGeneration next;
      next.__set_generation(ch.generations.back().generation + 1);
      next.__set_partitions(partitions);
      for (const std::int32_t p : affected) next.markers[p] = -1;
      next.__isset.markers = true;
      next.__set_complete(false);
      ch.generations.push_back(std::move(next));
      ch.__isset.generations = true;
      meta::MetaRecord record;
      record.__set_put_channel(ch);
      if (auto r = store_->commit(record); !r) return r.error();
      spdlog::info(
          "channel '{}': alter {} -> {} partitions begun (generation {}): markers into [{}], "
          "chains placed for [{}]",
          name, from, partitions, ch.generations.back().generation, fmt::join(affected, ","),
          fmt::join(added, ","));
      if (crash_locked("alter.begun")) return make_error(idl::ErrorCode::INTERNAL, "controller halted");
    }
  }
  run_pushes();
  await_channel_pushes(name);
  if (auto r = write_markers(name, MarkerWait::until_committed); !r) return r.error();
  return describe_channel(name);
}

Result<void> Controller::write_markers(const std::string& name, MarkerWait wait) {
  struct Target {
    std::int32_t partition = 0;
    std::int64_t epoch = 0;
    BrokerTarget head;
  };
  std::int32_t generation = 0;
  MarkerRequest marker;
  std::vector<Target> targets;
  std::vector<std::string> failures;
  {
    MutexLock lock(mu_);
    if (auto r = check_running_locked(); !r) return r.error();
    auto found = channel_locked(name);
    if (!found) return found.error();
    meta::ChannelRecord ch = **found;
    const auto* open = open_generation(ch);
    if (open == nullptr) return {};
    generation = open->generation;
    // The generation before the open one (the channel as created, or the
    // last completed alter) has the count it goes from.
    marker =
        MarkerRequest{generation, ch.generations.at(ch.generations.size() - 2).partitions, open->partitions};
    for (const auto& [p, offset] : open->markers) {
      if (offset >= 0) continue;
      const auto& route = ch.routes.at(static_cast<std::size_t>(p));
      const auto* head = route.replicas.empty() ? nullptr : node_locked(route.replicas.front().node_id);
      if (head == nullptr || head->dead || !fully_acked_locked(route)) {
        failures.push_back(fmt::format("{}: its chain is being repaired", p));
        continue;
      }
      targets.push_back(
          Target{p, route.epoch, broker_target_locked(head->info.node_id, head->info.admin_addr)});
    }
  }
  // Every head appends its marker first, then the commits are waited for.
  // Between the first marker and the last, publishers hold records back (a
  // head past its marker refuses the old mapping, one without it the new
  // one), so that window is one call per head, not one commit per head.
  // The nodes are asked in parallel, each node's partitions in turn (as
  // pushes go out).
  std::size_t calls = targets.size();
  std::map<std::string, std::vector<std::size_t>> by_node;
  for (std::size_t i = 0; i < targets.size(); ++i) by_node[targets[i].head.node_id].push_back(i);
  std::vector<std::optional<Result<idl::MarkerReply>>> replies(targets.size());
  {
    std::vector<std::future<void>> tasks;
    for (const auto& [node, indices] : by_node) {
      tasks.push_back(std::async(std::launch::async, [&, &indices = indices] {
        for (const std::size_t i : indices) {
          const Target& t = targets[i];
          replies[i] = brokers_.append_marker(t.head, name, t.partition, t.epoch, marker);
        }
      }));
    }
    for (auto& task : tasks) task.get();
  }
  std::vector<std::optional<idl::MarkerReply>> answers(targets.size());
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (!*replies[i]) {
      failures.push_back(fmt::format("{}: {}", targets[i].partition, replies[i]->error().describe()));
      continue;
    }
    answers[i] = std::move(replies[i]->value());
  }
  // Bounded RPC polling until committed (the call is idempotent: it answers
  // the marker the head holds), on the steady clock whatever clock_ is (as a
  // move waits for its sealed head).
  const auto deadline = std::chrono::steady_clock::now() + options_.marker_commit_timeout;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const Target& t = targets[i];
    auto& answer = answers[i];
    std::optional<std::int64_t> committed;
    while (answer) {
      if (answer->commit_offset > answer->offset) {
        committed = answer->offset;
        break;
      }
      if (wait == MarkerWait::once) {
        failures.push_back(fmt::format("{}: marker at {} not committed yet (committed {})", t.partition,
                                       answer->offset, answer->commit_offset));
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        failures.push_back(fmt::format("{}: marker at {} not committed in {} ms (committed {})", t.partition,
                                       answer->offset, options_.marker_commit_timeout.count(),
                                       answer->commit_offset));
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ++calls;
      auto r = brokers_.append_marker(t.head, name, t.partition, t.epoch, marker);
      if (!r) {
        failures.push_back(fmt::format("{}: {}", t.partition, r.error().describe()));
        break;
      }
      answer = std::move(*r);
    }
    if (!committed) continue;
    MutexLock lock(mu_);
    if (auto r = check_running_locked(); !r) return r.error();
    auto found = channel_locked(name);
    if (!found) return found.error();
    meta::ChannelRecord ch = **found;
    auto* open = open_generation(ch);
    if (open == nullptr || open->generation != generation) return {};  // finished by another call
    open->markers[t.partition] = *committed;
    const bool last = markers_unset(*open) == 0;
    // Who heard of this change: the heads of the affected partitions and the
    // replicas of the added ones, nothing else (see the file comment).
    std::set<std::string> told;
    std::size_t configures = 0;
    if (last) {
      open->__set_complete(true);
      ch.config.__set_partitions(open->partitions);
      for (const auto& [p, offset] : open->markers) {
        const auto& route = ch.routes.at(static_cast<std::size_t>(p));
        if (!route.replicas.empty()) told.insert(route.replicas.front().node_id);
      }
      std::int32_t had = 0;  // partitions that existed before this generation
      for (std::size_t i = 0; i + 1 < ch.generations.size(); ++i)
        had = std::max(had, ch.generations[i].partitions);
      for (std::int32_t p = had; p < open->partitions; ++p) {
        for (const auto& r : ch.routes.at(static_cast<std::size_t>(p)).replicas) {
          told.insert(r.node_id);
          ++configures;
        }
      }
      open->__set_nodes_told(static_cast<std::int32_t>(told.size()));
      open->__set_control_messages(static_cast<std::int32_t>(calls + configures));
    }
    meta::MetaRecord record;
    record.__set_put_channel(ch);
    if (auto r = store_->commit(record); !r) return r.error();
    if (last) {
      spdlog::info(
          "channel '{}': generation {} complete, {} partitions; markers {}; told {} node(s): {} "
          "marker call(s) in this round, {} chain configuration(s) of added partitions; 0 clients",
          name, generation, open->partitions, open->markers, told.size(), calls, configures);
    } else if (crash_locked("alter.marker")) {
      return make_error(idl::ErrorCode::INTERNAL, "controller halted");
    }
  }
  if (!failures.empty()) {
    return make_error(idl::ErrorCode::UNAVAILABLE,
                      fmt::format("channel '{}': alter to generation {} not finished, marker(s) missing in "
                                  "[{}]; it goes on by itself (or run the alter again)",
                                  name, generation, fmt::join(failures, "; ")));
  }
  return {};
}

void Controller::resume_alters() {
  if (!alter_mu_.try_lock()) return;  // an alter is running: it writes its markers itself
  std::vector<std::string> open;
  {
    MutexLock lock(mu_);
    if (!halted_) {
      for (const auto& [name, ch] : store_->state().channels) {
        if (!ch.generations.empty() && !ch.generations.back().complete) open.push_back(name);
      }
    }
  }
  for (const auto& name : open) {
    if (auto r = write_markers(name, MarkerWait::once); !r) spdlog::debug("{}", r.error().describe());
  }
  alter_mu_.unlock();
}

}  // namespace catena::control
