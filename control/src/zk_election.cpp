#include <algorithm>
#include <array>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <catena/control/zk_election.hpp>

#include "zk_session.hpp"

namespace catena::control {
namespace {

constexpr std::string_view kCandidatePrefix = "c-";
// How often the election thread looks at its session without a watch firing.
constexpr std::chrono::milliseconds kSessionCheck{50};

// The sequence ZooKeeper appended to a candidate's name: its last 10 digits.
std::string_view sequence_of(std::string_view name) {
  return name.size() > 10 ? name.substr(name.size() - 10) : name;
}

}  // namespace

struct ZkElectionWatch {
  static void fired(zhandle_t* /*zh*/, int /*type*/, int /*state*/, const char* /*path*/, void* context) {
    static_cast<ZkElection*>(context)->wake();
  }
};

ZkElection::ZkElection(Options options, Callbacks callbacks)
    : options_(std::move(options)),
      callbacks_(std::move(callbacks)),
      dir_(options_.location.root + "/election") {}

Result<std::unique_ptr<ZkElection>> ZkElection::join(Options options, Callbacks callbacks) {
  std::unique_ptr<ZkElection> e(new ZkElection(std::move(options), std::move(callbacks)));
  auto session = zk::Session::connect(e->options_.location.hosts, e->options_.session_timeout,
                                      e->options_.connect_timeout);
  if (!session) return session.error();
  e->session_ = std::move(*session);
  for (std::size_t at = e->dir_.find('/', 1); at != std::string::npos; at = e->dir_.find('/', at + 1)) {
    if (auto r = e->session_->create(e->dir_.substr(0, at), {}); !r) return r.error();
  }
  if (auto r = e->session_->create(e->dir_, {}); !r) return r.error();
  // A lost connection leaves it unknown whether the znode exists; the
  // caller starts again (a stray znode goes with this session).
  if (auto r = e->create_znode(); !r) return r.error();
  e->thread_ = std::thread([raw = e.get()] { raw->run(); });
  return e;
}

Result<void> ZkElection::create_znode() {
  const std::string prefix = fmt::format("{}/{}", dir_, kCandidatePrefix);
  std::array<char, 512> created{};
  const std::string& address = options_.address;
  const int rc = zoo_create(session_->handle(), prefix.c_str(), address.data(),
                            static_cast<int>(address.size()), zk::open_acl(), ZOO_EPHEMERAL | ZOO_SEQUENCE,
                            created.data(), static_cast<int>(created.size()));
  if (rc != ZOK) return session_->error(rc, fmt::format("joining the election under {}", dir_));
  znode_ = created.data();
  spdlog::info("controller election: {} is candidate {}", address, znode_);
  return {};
}

ZkElection::~ZkElection() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  session_.reset();  // closes the session: our znode goes now; no watch fires after this
}

void ZkElection::wake() {
  {
    MutexLock lock(mu_);
    changed_ = true;
  }
  cv_.notify_all();
}

void ZkElection::run() {
  bool leading = false;
  std::string told = "(none)";  // the leader address follow() was last given
  bool again = false;           // look again after the next wait, watch or not
  bool resigned = false;        // resign() was called; leaving the election
  for (;;) {
    {
      UniqueLock lock(mu_);
      lock.wait_for(cv_, kSessionCheck, [this] {
        mu_.assert_held();  // the wait holds it when it asks
        return changed_ || stopping_;
      });
      if (stopping_) return;
      if (!changed_ && !again && !leading && !session_->lost_for(options_.session_timeout)) continue;
      changed_ = false;
      again = false;
    }
    if (session_->lost_for(options_.session_timeout)) {
      callbacks_.lost(
          make_error(idl::ErrorCode::UNAVAILABLE,
                     fmt::format("lost the ZooKeeper session at {} (expired, or no connection for {} ms)",
                                 options_.location.hosts, options_.session_timeout.count())));
      return;
    }
    if (leading) {
      // A leader watches its session, and whether it must resign. It
      // resigns once connected, so that the others can take over at once.
      if (!callbacks_.must_resign || !callbacks_.must_resign() || !session_->connected()) continue;
      if (!resigned) callbacks_.resign();
      resigned = true;
      const int rc = zoo_delete(session_->handle(), znode_.c_str(), -1);
      // ZNONODE: a delete whose answer was lost went through.
      if (rc != ZOK && rc != ZNONODE) {
        spdlog::warn("controller election: {}",
                     session_->error(rc, fmt::format("leaving the election ({})", znode_)).message);
        continue;  // again in 50 ms
      }
      if (auto r = create_znode(); !r) {
        // Unknown whether a new znode exists: a stray one would lead with
        // nobody behind it. Out of the election, as with a lost session.
        callbacks_.lost(r.error());
        return;
      }
      leading = false;
      resigned = false;
      told = "(none)";
      spdlog::warn("controller election: {} resigned; candidate again as {}", options_.address, znode_);
      again = true;
      continue;
    }
    std::string leader;
    ControlError why;
    switch (look(leader, why)) {
      case Step::elected:
        leading = true;
        spdlog::info("controller election: {} leads ({})", options_.address, znode_);
        callbacks_.elected();
        break;
      case Step::follow:
        if (leader != told) {
          told = leader;
          spdlog::info("controller election: {} follows {}", options_.address, leader);
          callbacks_.follow(leader);
        }
        break;
      case Step::retry:
        again = true;
        break;
      case Step::lost:
        callbacks_.lost(why);
        return;
    }
  }
}

ZkElection::Step ZkElection::look(std::string& leader_address, ControlError& why) {
  auto names = session_->children(dir_);
  if (!names) {
    spdlog::warn("controller election: {}", names.error().message);
    return Step::retry;
  }
  std::vector<std::string> candidates;
  for (auto& n : *names) {
    if (n.starts_with(kCandidatePrefix)) candidates.push_back(std::move(n));
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const std::string& a, const std::string& b) { return sequence_of(a) < sequence_of(b); });
  const std::string mine = znode_.substr(dir_.size() + 1);
  const auto at = std::find(candidates.begin(), candidates.end(), mine);
  if (at == candidates.end()) {
    why = make_error(idl::ErrorCode::UNAVAILABLE,
                     fmt::format("election znode {} is gone (the ZooKeeper session ended)", znode_));
    return Step::lost;
  }
  if (at == candidates.begin()) return Step::elected;
  // Watch the predecessor (it going may make us the leader) and the leader
  // (whom we name); either gone since the listing: look again.
  for (const auto& watched : {*std::prev(at), candidates.front()}) {
    const std::string path = fmt::format("{}/{}", dir_, watched);
    Stat stat{};
    const int rc = zoo_wexists(session_->handle(), path.c_str(), &ZkElectionWatch::fired, this, &stat);
    if (rc == ZNONODE) return Step::retry;
    if (rc != ZOK) {
      spdlog::warn("controller election: {}", session_->error(rc, "watching " + path).message);
      return Step::retry;
    }
  }
  auto leader = session_->get(fmt::format("{}/{}", dir_, candidates.front()));
  if (!leader || !*leader) return Step::retry;
  leader_address = (*leader)->data;
  return Step::follow;
}

}  // namespace catena::control
