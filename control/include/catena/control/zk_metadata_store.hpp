// The controller's metadata on ZooKeeper: the MetadataStore for several
// controllers sharing one cluster state on a replicated quorum.
//
// The state is one znode per item under a root (the layout is in
// control/src/zk_layout.hpp: nodes, channels, one znode per partition route,
// repair intents, offsets, high-water marks, moves, handoffs, counters), each
// a Thrift binary payload. Every commit() is one zoo_multi transaction whose
// first operation rewrites <root>/controller_epoch at the version this store
// last saw: a store whose epoch was taken over by a newer one can never
// write again (NOT_LEADER, "fenced: another controller is leader").
//
// Lifecycle: open() connects, takes the controller epoch (epoch + 1: any
// store opened before is fenced from then on), then loads the state; with
// several controllers only the elected leader opens it (zk_election.hpp),
// and whichever opened last writes.
// A commit refused by the fence, or whose outcome a lost connection or an
// expired session left unknown, breaks the store: every later commit fails
// with the same error, and only a new open() (a controller restart) goes on.
//
// Thread: not thread-safe; the controller serialises all calls under its
// lock. The ZooKeeper client's own threads never touch the state (a
// background commit's completion only hands its return code over).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <catena/control/metadata_store.hpp>

namespace catena::control {

namespace zk {
class Session;
}

// zk://host:port[,host:port...][/chroot] split into the client's host list
// and the root znode (default /catena).
struct ZkLocation {
  std::string hosts;
  std::string root = "/catena";
};
[[nodiscard]] Result<ZkLocation> parse_zk_location(std::string_view uri);

class ZkMetadataStore final : public MetadataStore {
 public:
  struct Options {
    ZkLocation location;
    // Asked of the server, which clamps it to [2, 20] x its tickTime.
    std::chrono::milliseconds session_timeout{10000};
    // How long open() waits for a session, and a commit for the client
    // to reconnect after losing its connection.
    std::chrono::milliseconds connect_timeout{10000};
  };

  [[nodiscard]] static Result<std::unique_ptr<ZkMetadataStore>> open(Options options);

  ~ZkMetadataStore() override;

  [[nodiscard]] const meta::MetaState& state() const noexcept override { return state_; }
  [[nodiscard]] Result<void> commit(const meta::MetaRecord& record) override;
  // zoo_amulti: the answer comes on the client's completion thread.
  [[nodiscard]] Result<void> commit_in_background(const meta::MetaRecord& record) override;
  [[nodiscard]] BackgroundCommit background_commit() override;
  [[nodiscard]] std::string describe() const override;
  [[nodiscard]] bool connected() const override;
  [[nodiscard]] bool failed() const noexcept override { return failed_.load(std::memory_order_acquire); }
  [[nodiscard]] Result<std::int64_t> take_controller_epoch() override { return epoch_; }

  // The controller epoch this store took when it opened.
  [[nodiscard]] std::int64_t controller_epoch() const noexcept { return epoch_; }
  // Set once a commit broke the store (see above).
  [[nodiscard]] const std::optional<ControlError>& broken() const noexcept { return broken_; }

 private:
  enum class Outcome { applied, not_applied, fenced, unknown };
  struct Transaction;
  struct Conclusion {
    enum { applied, resend, not_applied, failed } outcome;
    ControlError error;
  };

  ZkMetadataStore(Options options, std::unique_ptr<zk::Session> session);
  [[nodiscard]] Result<void> create_layout();
  [[nodiscard]] Result<void> take_epoch();
  [[nodiscard]] Result<void> load();
  [[nodiscard]] Result<void> load_folder(std::string_view folder);
  // After a lost connection: did the transaction that would have moved the
  // epoch znode past epoch_version_ happen?
  [[nodiscard]] Outcome resolve_lost_commit();
  [[nodiscard]] ControlError fenced_error();
  // Applies record to state_ and builds its transaction (undone on error).
  [[nodiscard]] Result<std::shared_ptr<Transaction>> prepare(const meta::MetaRecord& record);
  void undo(const Transaction& tx);
  // What the transaction's return code rc means; undone unless applied or
  // resent (may_resend: it was not applied and can go again).
  [[nodiscard]] Conclusion conclude(Transaction& tx, int rc, bool may_resend);
  // Concludes the background transaction with its answer rc.
  void settle_background(int rc);
  // Breaks the store for good with why (broken_, failed_); returns why.
  ControlError fail(ControlError why);
  [[nodiscard]] std::string abs(std::string_view relative) const;

  Options options_;
  std::unique_ptr<zk::Session> session_;
  std::string holder_;  // host:pid
  meta::MetaState state_;
  std::int64_t epoch_ = 0;
  std::int32_t epoch_version_ = 0;  // of <root>/controller_epoch after our last write
  std::int64_t transactions_ = 0;   // committed under epoch_
  std::size_t znodes_loaded_ = 0;
  std::optional<ControlError> broken_;
  std::shared_ptr<Transaction> background_;  // commit_in_background()'s, until concluded
  std::optional<int> background_rc_;         // its answer, once taken from the client
  BackgroundCommit last_background_ = BackgroundCommit::none;
  std::atomic<bool> failed_{false};  // broken_ is set: for failed(), on any thread
};

}  // namespace catena::control
