// One ZooKeeper session (the C client, libzookeeper_mt) and the synchronous
// calls the ZooKeeper metadata store makes on it, with ZooKeeper's return
// codes turned into ControlErrors.
//
// Lifecycle: connect() returns once the session is established (or fails
// after connect_timeout); the client library reconnects by itself after a
// lost connection, within the session timeout. An expired session is final:
// a new ZkSession is the only way on.
//
// Threads: the calls are made by the store's caller (under the controller's
// lock); the library's event thread only runs on_event(), which records the
// connection state under mu_.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <zookeeper/zookeeper.h>

#include <catena/control/result.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace catena::control::zk {

// ZooKeeper's default jute.maxbuffer: the largest request (a whole multi
// included) and the largest znode a server accepts.
inline constexpr std::size_t kMaxRequestBytes = 0xfffff;

// What a get() found.
struct Znode {
  std::string data;
  Stat stat{};
};

class Session {
 public:
  [[nodiscard]] static Result<std::unique_ptr<Session>> connect(const std::string& hosts,
                                                                std::chrono::milliseconds session_timeout,
                                                                std::chrono::milliseconds connect_timeout);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session();

  // Waits until the session is connected. False after timeout, or at once
  // if the session expired.
  [[nodiscard]] bool wait_connected(std::chrono::milliseconds timeout) EXCLUDES(mu_);
  [[nodiscard]] bool expired() const EXCLUDES(mu_);
  // Connected now (a call would be sent at once, not wait for a connection).
  [[nodiscard]] bool connected() const EXCLUDES(mu_);
  // Expired, or without a connection for at least d (by then the ensemble
  // expired a session whose timeout is d, though the client cannot know it
  // until it reconnects).
  [[nodiscard]] bool lost_for(std::chrono::milliseconds d) const EXCLUDES(mu_);
  [[nodiscard]] std::chrono::milliseconds connect_timeout() const { return connect_timeout_; }
  [[nodiscard]] zhandle_t* handle() const { return zh_; }
  [[nodiscard]] const std::string& hosts() const { return hosts_; }

  // nullopt if path does not exist.
  [[nodiscard]] Result<std::optional<Znode>> get(const std::string& path);
  [[nodiscard]] Result<std::vector<std::string>> children(const std::string& path);
  // Creates a persistent znode; false if it existed already.
  [[nodiscard]] Result<bool> create(const std::string& path, std::string_view data);
  // Sets data if the znode is at version; the new version, or the error
  // (ZBADVERSION as NOT_LEADER with the message fenced_message).
  [[nodiscard]] Result<std::int32_t> set(const std::string& path, std::string_view data,
                                         std::int32_t version);

  // The error for return code rc of a call that was doing what.
  [[nodiscard]] ControlError error(int rc, std::string_view what) const;

 private:
  Session(std::string hosts, std::chrono::milliseconds connect_timeout)
      : hosts_(std::move(hosts)), connect_timeout_(connect_timeout) {}
  static void on_event(zhandle_t* zh, int type, int state, const char* path, void* context);

  const std::string hosts_;
  const std::chrono::milliseconds connect_timeout_;
  zhandle_t* zh_ = nullptr;
  std::vector<char> buffer_;  // for get(): one znode's largest size

  mutable Mutex mu_;
  std::condition_variable cv_;
  int state_ GUARDED_BY(mu_) = 0;  // the last ZOO_*_STATE the library told
  // When state_ last left ZOO_CONNECTED_STATE.
  std::chrono::steady_clock::time_point disconnected_at_ GUARDED_BY(mu_);
};

// The value and mode (ZOO_PERSISTENT) every znode of ours is created with.
[[nodiscard]] const ACL_vector* open_acl();

}  // namespace catena::control::zk
