#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <iterator>
#include <spdlog/spdlog.h>
#include <string>
#include <sys/file.h>

#include <catena/control/metadata_store.hpp>

#include "crc32c.hpp"
#include "thrift_codec.hpp"

namespace catena::control {
namespace {

constexpr std::string_view kSnapshotMagic = "CATENASN";
constexpr std::size_t kSnapshotHeaderBytes = 8 + 8 + 4 + 4;  // magic, lsn, length, crc

void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFFu));
}
std::uint64_t get_le(const char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

ControlError internal(std::string message) {
  return make_error(idl::ErrorCode::INTERNAL, std::move(message));
}

std::string encode_snapshot(const meta::MetaState& state, std::uint64_t lsn) {
  const std::string payload = detail::encode(state);
  std::string out(kSnapshotMagic);
  put_le(out, lsn, 8);
  put_le(out, payload.size(), 4);
  put_le(out, detail::crc32c(payload), 4);
  out += payload;
  return out;
}

// Loads path into state/lsn. A missing snapshot is an empty state; a damaged
// one is an error (it was renamed into place only after an fsync).
Result<bool> load_snapshot(const std::filesystem::path& path, meta::MetaState* state, std::uint64_t* lsn) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!std::filesystem::exists(path)) return false;
    return internal(fmt::format("open {}: {}", path.string(), std::strerror(errno)));
  }
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() < kSnapshotHeaderBytes || std::string_view(data).substr(0, 8) != kSnapshotMagic) {
    return internal(fmt::format("{} is not a Catena snapshot", path.string()));
  }
  const std::uint64_t snap_lsn = get_le(data.data() + 8, 8);
  const auto length = static_cast<std::size_t>(get_le(data.data() + 16, 4));
  const auto crc = static_cast<std::uint32_t>(get_le(data.data() + 20, 4));
  const std::string_view payload = std::string_view(data).substr(kSnapshotHeaderBytes);
  if (payload.size() != length || detail::crc32c(payload) != crc || !detail::decode(payload, *state)) {
    return internal(fmt::format("snapshot {} is damaged (length or checksum mismatch)", path.string()));
  }
  *lsn = snap_lsn;
  return true;
}

// The route a committed move leaves (meta::RouteMove): the same on replay
// as live, so a restart rebuilds the route the controller pushed.
void apply_move(meta::MetaState& state, const meta::RouteMove& move) {
  auto it = state.channels.find(move.channel);
  if (it == state.channels.end() || move.partition < 0 ||
      static_cast<std::size_t>(move.partition) >= it->second.routes.size()) {
    return;  // the controller never writes such a record
  }
  idl::PartitionRoute& route = it->second.routes[static_cast<std::size_t>(move.partition)];
  route.__set_epoch(move.epoch);
  route.__set_replicas(move.replicas);
  route.__set_start_offset(move.start_offset);
  route.joining.clear();
  if (move.__isset.sealed) route.sealed.push_back(move.sealed);
  route.__isset.sealed = true;
}

// deleteChannel: everything kept under the channel's name goes; the epoch
// floor rises to the epoch its partitions are dropped at (one above the
// highest it used), so a channel created again starts above the drops too.
void erase_deleted_channel(meta::MetaState& state, const std::string& name) {
  if (auto it = state.channels.find(name); it != state.channels.end()) {
    std::int64_t top = 0;
    for (const auto& route : it->second.routes) {
      top = std::max(top, route.epoch);
      for (const auto& range : route.sealed) top = std::max(top, range.epoch);
    }
    state.channel_epoch_floor = std::max(state.channel_epoch_floor, top + 1);
    state.channels.erase(it);
  }
  state.high_water.erase(name);
  state.moves.erase(name);
  state.handoffs.erase(name);
  for (auto g = state.group_offsets.begin(); g != state.group_offsets.end();) {
    g->second.erase(name);
    g = g->second.empty() ? state.group_offsets.erase(g) : std::next(g);
  }
}

}  // namespace

void apply_record(meta::MetaState& state, const meta::MetaRecord& record) {
  if (record.__isset.put_node) {
    state.nodes[record.put_node.info.node_id] = record.put_node;
  }
  if (record.__isset.put_channel) {
    state.channels[record.put_channel.config.name] = record.put_channel;
  }
  if (record.__isset.put_routes) {
    for (const auto& route : record.put_routes) {
      auto it = state.channels.find(route.channel);
      if (it == state.channels.end() || route.partition < 0 ||
          static_cast<std::size_t>(route.partition) >= it->second.routes.size()) {
        continue;  // the controller never writes such a record
      }
      it->second.routes[static_cast<std::size_t>(route.partition)] = route;
    }
  }
  if (record.__isset.move_route) apply_move(state, record.move_route);
  if (record.__isset.begin_repair) {
    state.intents[record.begin_repair.id] = record.begin_repair;
  }
  if (record.__isset.end_repair) {
    state.intents.erase(record.end_repair);
  }
  if (record.__isset.commit_offset) {
    const auto& c = record.commit_offset;
    state.group_offsets[c.group][c.channel][c.partition] = c.offset;
  }
  if (record.__isset.commit_offsets) {
    for (const auto& c : record.commit_offsets)
      state.group_offsets[c.group][c.channel][c.partition] = c.offset;
  }
  if (record.__isset.raise_high_water) {
    for (const auto& [channel, parts] : record.raise_high_water) {
      for (const auto& [partition, offset] : parts) {
        auto& mark = state.high_water[channel][partition];
        mark = std::max(mark, offset);
      }
    }
  }
  if (record.__isset.begin_move) {
    state.moves[record.begin_move.channel][record.begin_move.partition] = record.begin_move;
  }
  if (record.__isset.end_move) {
    auto it = state.moves.find(record.end_move.channel);
    if (it != state.moves.end()) {
      it->second.erase(record.end_move.partition);
      if (it->second.empty()) state.moves.erase(it);
    }
  }
  if (record.__isset.handoff_key && record.__isset.set_handoff) {
    state.handoffs[record.handoff_key.channel][record.handoff_key.partition] = record.set_handoff;
  }
  if (record.__isset.next_node_seq) state.next_node_seq = record.next_node_seq;
  if (record.__isset.next_node_epoch) state.next_node_epoch = record.next_node_epoch;
  if (record.__isset.producer_numbers_reserved)
    state.producer_numbers_reserved = record.producer_numbers_reserved;
  if (record.__isset.set_link_key) state.link_key = record.set_link_key;
  if (record.__isset.set_controller_epoch) state.controller_epoch = record.set_controller_epoch;
  if (record.__isset.next_intent_id) state.next_intent_id = record.next_intent_id;
  if (record.__isset.put_tenant) {
    state.tenants[record.put_tenant.name] = record.put_tenant;
    state.__isset.tenants = true;
  }
  if (record.__isset.delete_tenant) state.tenants.erase(record.delete_tenant);
  if (record.__isset.delete_channel) erase_deleted_channel(state, record.delete_channel);
  if (record.__isset.add_drops) {
    state.pending_drops.insert(state.pending_drops.end(), record.add_drops.begin(), record.add_drops.end());
    state.__isset.pending_drops = true;
  }
  if (record.__isset.end_drops) {
    std::erase_if(state.pending_drops, [&](const meta::PendingDrop& d) {
      return std::any_of(record.end_drops.begin(), record.end_drops.end(), [&](const meta::PendingDrop& e) {
        return e.node_id == d.node_id && e.route.channel == d.route.channel &&
               e.route.partition == d.route.partition && e.route.epoch == d.route.epoch;
      });
    });
  }
}

Result<std::unique_ptr<DirMetadataStore>> DirMetadataStore::open(Options options) {
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) return internal(fmt::format("create {}: {}", options.dir.string(), ec.message()));

  const auto lock_path = options.dir / "LOCK";
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) return internal(fmt::format("open {}: {}", lock_path.string(), std::strerror(errno)));
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(lock_fd);
    return internal(
        fmt::format("{} is in use by another controller ({})", options.dir.string(), std::strerror(err)));
  }
  auto fail = [lock_fd](ControlError e) -> Result<std::unique_ptr<DirMetadataStore>> {
    ::close(lock_fd);
    return e;
  };

  meta::MetaState state;
  std::uint64_t snap_lsn = 0;
  auto had_snapshot = load_snapshot(options.dir / "snapshot", &state, &snap_lsn);
  if (!had_snapshot) return fail(had_snapshot.error());

  const auto wal_path = options.dir / "wal";
  auto contents = read_wal(wal_path);
  if (!contents) return fail(contents.error());

  Recovery recovery;
  recovery.had_snapshot = *had_snapshot;
  recovery.snapshot_lsn = snap_lsn;
  recovery.dropped_tail_bytes = contents->dropped_bytes;
  std::uint64_t last_lsn = snap_lsn;
  for (const auto& rec : contents->records) {
    if (rec.lsn <= snap_lsn) continue;  // already in the snapshot (crashed before the log was emptied)
    if (rec.lsn != last_lsn + 1) {
      return fail(
          internal(fmt::format("wal starts at lsn {} but the snapshot ends at lsn {}", rec.lsn, last_lsn)));
    }
    meta::MetaRecord record;
    if (!detail::decode(rec.payload, record)) {
      return fail(
          internal(fmt::format("wal record lsn {} has a valid checksum but does not decode", rec.lsn)));
    }
    apply_record(state, record);
    last_lsn = rec.lsn;
    ++recovery.replayed_records;
  }

  auto wal = WalWriter::open(wal_path, contents->valid_bytes);
  if (!wal) return fail(wal.error());

  std::unique_ptr<DirMetadataStore> store(new DirMetadataStore(std::move(options), lock_fd, std::move(*wal)));
  store->state_ = std::move(state);
  store->last_lsn_ = last_lsn;
  store->records_since_snapshot_ = recovery.replayed_records;
  store->recovery_ = recovery;
  return store;
}

DirMetadataStore::~DirMetadataStore() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Result<void> DirMetadataStore::commit(const meta::MetaRecord& record) {
  const std::uint64_t lsn = last_lsn_ + 1;
  if (auto r = wal_.append(lsn, detail::encode(record)); !r) return r;
  last_lsn_ = lsn;
  apply_record(state_, record);
  if (++records_since_snapshot_ >= options_.snapshot_every_records) {
    // The record is durable in the log already; a failed snapshot only
    // means the log keeps growing until the next attempt.
    if (auto r = snapshot(); !r) {
      spdlog::warn("metadata snapshot failed, the log keeps growing: {}", r.error().message);
    }
  }
  return {};
}

std::string DirMetadataStore::describe() const {
  return fmt::format("in {}: snapshot {} (lsn {}), {} log record(s) replayed, {} torn tail byte(s) dropped",
                     options_.dir.string(), recovery_.had_snapshot ? "loaded" : "absent",
                     recovery_.snapshot_lsn, recovery_.replayed_records, recovery_.dropped_tail_bytes);
}

Result<std::int64_t> DirMetadataStore::take_controller_epoch() {
  meta::MetaRecord record;
  record.__set_set_controller_epoch(state_.controller_epoch + 1);
  if (auto r = commit(record); !r) return r.error();
  return state_.controller_epoch;
}

Result<void> DirMetadataStore::snapshot() {
  if (auto r = write_file_durably(options_.dir / "snapshot", encode_snapshot(state_, last_lsn_)); !r)
    return r;
  // A crash here leaves records <= last_lsn_ in the log; open() skips them.
  if (auto r = wal_.reset(); !r) return r;
  records_since_snapshot_ = 0;
  return {};
}

}  // namespace catena::control
