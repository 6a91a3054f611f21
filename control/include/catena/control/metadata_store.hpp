// The controller's durable metadata: nodes, channels, routes (with their
// epochs) and open repair intents.
//
// MetadataStore is the seam; two stores implement it: DirMetadataStore (a
// write-ahead log and snapshots in a local directory, below) and
// ZkMetadataStore (znodes on a ZooKeeper ensemble, zk_metadata_store.hpp).
// The controller picks one with open_metadata_store().
//
// DirMetadataStore: every change is a meta::MetaRecord: it is appended to the write-ahead log
// and fsynced *before* it is applied to the in-memory state, so whatever the
// controller acted on (pushed to a broker, answered to a client) survives a
// crash. Every snapshot_every_records records the whole state is written to
// a snapshot (temp file + fsync + rename) and the log is emptied. Opening
// loads the snapshot and replays the log through the same apply_record(), so
// a restart reproduces the state exactly.
//
// Files in dir: LOCK (flock: one controller per directory), snapshot, wal.
//
// Thread: not thread-safe; the controller serialises all calls under its lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include <catena/control/idl/catena_meta_types.h>
#include <catena/control/result.hpp>
#include <catena/control/wal.hpp>

namespace catena::control {

// Applies one record to state. Pure; shared by the live path and replay.
void apply_record(meta::MetaState& state, const meta::MetaRecord& record);

// The state, and the one way to change it. Thread: not thread-safe; the
// controller serialises all calls under its lock.
class MetadataStore {
 public:
  MetadataStore() = default;
  MetadataStore(const MetadataStore&) = delete;
  MetadataStore& operator=(const MetadataStore&) = delete;
  virtual ~MetadataStore() = default;

  [[nodiscard]] virtual const meta::MetaState& state() const noexcept = 0;

  // Makes record durable, then applies it. On error nothing is applied.
  [[nodiscard]] virtual Result<void> commit(const meta::MetaRecord& record) = 0;

  // For the log: where the metadata lives and what opening it found.
  [[nodiscard]] virtual std::string describe() const = 0;
  // A commit the caller need not wait for (the leader's high-water marks):
  // applied to state() at once and sent, its answer taken later, by
  // background_commit() or by the next commit() (which waits for it first).
  // At most one is unanswered: another meanwhile fails (UNAVAILABLE) with
  // nothing applied. If it turns out not applied it is undone from state().
  // This default commits at once (background_commit() then says none).
  [[nodiscard]] virtual Result<void> commit_in_background(const meta::MetaRecord& record) {
    return commit(record);
  }
  enum class BackgroundCommit {
    none,         // nothing unanswered, nothing to report
    in_flight,    // sent, not answered (or its outcome not learnt yet)
    applied,      // the last one was applied (said once)
    not_applied,  // the last one was not (undone from state(); said once)
  };
  // Never waits: a lost connection's outcome is read only once the store
  // is connected again.
  [[nodiscard]] virtual BackgroundCommit background_commit() { return BackgroundCommit::none; }
  // Whether a commit now would be sent at once. False while the ZooKeeper
  // store has no connection: its commit would wait for one (up to its
  // connect timeout), under the controller's lock. Commits that can wait
  // (the high-water marks) are put off instead.
  [[nodiscard]] virtual bool connected() const { return true; }
  // Whether a commit left this store unable to go on: every later commit
  // fails (the ZooKeeper store after an outcome it could not learn, a
  // fence, or its session's end). Its holder must stop leading and open the
  // metadata again. Unlike the rest, any thread may ask.
  [[nodiscard]] virtual bool failed() const noexcept { return false; }

  // The controller epoch its holder commands brokers with
  // (BrokerAdmin.authenticate): newer than any holder's before. The
  // ZooKeeper store took it when it opened; the directory store takes it
  // here (a durable +1). Called once, by the controller that opened it.
  [[nodiscard]] virtual Result<std::int64_t> take_controller_epoch() = 0;
};

class DirMetadataStore final : public MetadataStore {
 public:
  struct Options {
    std::filesystem::path dir;
    std::uint64_t snapshot_every_records = 1000;
  };

  struct Recovery {
    bool had_snapshot = false;
    std::uint64_t snapshot_lsn = 0;
    std::uint64_t replayed_records = 0;
    std::uint64_t dropped_tail_bytes = 0;  // torn WAL tail discarded on open
  };

  // Creates dir if needed. Fails on a corrupt snapshot or a WAL damaged
  // anywhere but its tail, and if another process holds the directory.
  [[nodiscard]] static Result<std::unique_ptr<DirMetadataStore>> open(Options options);

  ~DirMetadataStore() override;

  [[nodiscard]] const meta::MetaState& state() const noexcept override { return state_; }
  [[nodiscard]] std::uint64_t last_lsn() const noexcept { return last_lsn_; }
  [[nodiscard]] const Recovery& recovery() const noexcept { return recovery_; }

  [[nodiscard]] Result<void> commit(const meta::MetaRecord& record) override;
  [[nodiscard]] std::string describe() const override;
  [[nodiscard]] Result<std::int64_t> take_controller_epoch() override;

  // Writes a snapshot of the current state and empties the log.
  [[nodiscard]] Result<void> snapshot();

 private:
  DirMetadataStore(Options options, int lock_fd, WalWriter wal)
      : options_(std::move(options)), lock_fd_(lock_fd), wal_(std::move(wal)) {}

  Options options_;
  int lock_fd_ = -1;
  WalWriter wal_;
  meta::MetaState state_;
  std::uint64_t last_lsn_ = 0;
  std::uint64_t records_since_snapshot_ = 0;
  Recovery recovery_;
};

// Opens the store location names: empty for a DirMetadataStore in
// dir.dir, `zk://host:port[,host:port...][/chroot]` for a ZkMetadataStore
// (chroot /catena when none is given), with a session of zk_session_timeout
// and a connect timeout of zk_connect_timeout.
// Anything else is INVALID_ARGUMENT.
[[nodiscard]] Result<std::unique_ptr<MetadataStore>> open_metadata_store(
    std::string_view location, DirMetadataStore::Options dir,
    std::chrono::milliseconds zk_session_timeout = std::chrono::milliseconds(10000),
    std::chrono::milliseconds zk_connect_timeout = std::chrono::milliseconds(10000));

}  // namespace catena::control
