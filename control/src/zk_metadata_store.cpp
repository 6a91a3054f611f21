#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fmt/format.h>
#include <future>
#include <spdlog/spdlog.h>
#include <thread>
#include <utility>
#include <vector>

#include <catena/control/zk_metadata_store.hpp>

#include "thrift_codec.hpp"
#include "zk_layout.hpp"
#include "zk_session.hpp"

namespace catena::control {
namespace {

// What the root znode says, so that a chroot of something else is refused.
constexpr std::string_view kRootMarker = "catena controller metadata 1";
// Attempts at the epoch (others may take it at the same time) and at a
// commit whose connection was lost before it was sent.
constexpr int kAttempts = 5;
// Per operation in a multi, beyond its path and payload (jute framing).
constexpr std::size_t kOpOverheadBytes = 64;

ControlError internal(std::string message) {
  return make_error(idl::ErrorCode::INTERNAL, std::move(message));
}

std::string host_and_pid() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return fmt::format("{}:{}", host, ::getpid());
}

}  // namespace

Result<ZkLocation> parse_zk_location(std::string_view uri) {
  constexpr std::string_view kScheme = "zk://";
  auto bad = [&](std::string_view why) {
    return make_error(
        idl::ErrorCode::INVALID_ARGUMENT,
        fmt::format("metadata '{}': {} (want zk://host:port[,host:port...][/chroot])", uri, why));
  };
  if (uri.substr(0, kScheme.size()) != kScheme) return bad("not a zk:// address");
  const std::string_view rest = uri.substr(kScheme.size());
  const auto slash = rest.find('/');
  ZkLocation loc;
  loc.hosts = std::string(rest.substr(0, slash));
  if (loc.hosts.empty()) return bad("no host");
  std::size_t start = 0;
  while (start <= loc.hosts.size()) {
    const auto comma = std::min(loc.hosts.find(',', start), loc.hosts.size());
    const std::string_view host = std::string_view(loc.hosts).substr(start, comma - start);
    const auto colon = host.rfind(':');
    if (host.empty() || colon == std::string_view::npos || colon == 0 || colon + 1 == host.size() ||
        host.find_first_not_of("0123456789", colon + 1) != std::string_view::npos) {
      return bad(fmt::format("'{}' is not host:port", host));
    }
    start = comma + 1;
  }
  if (slash != std::string_view::npos && rest.size() > slash + 1) {
    loc.root = std::string(rest.substr(slash));
    if (loc.root.back() == '/' || loc.root.find("//") != std::string::npos) return bad("malformed chroot");
  }
  return loc;
}

ZkMetadataStore::ZkMetadataStore(Options options, std::unique_ptr<zk::Session> session)
    : options_(std::move(options)), session_(std::move(session)), holder_(host_and_pid()) {}

ZkMetadataStore::~ZkMetadataStore() = default;

std::string ZkMetadataStore::abs(std::string_view relative) const {
  return fmt::format("{}/{}", options_.location.root, relative);
}

Result<std::unique_ptr<ZkMetadataStore>> ZkMetadataStore::open(Options options) {
  auto session =
      zk::Session::connect(options.location.hosts, options.session_timeout, options.connect_timeout);
  if (!session) return session.error();
  std::unique_ptr<ZkMetadataStore> store(new ZkMetadataStore(std::move(options), std::move(*session)));
  if (auto r = store->create_layout(); !r) return r.error();
  // The epoch first: once it is ours, no store opened before can change
  // what load() reads.
  if (auto r = store->take_epoch(); !r) return r.error();
  if (auto r = store->load(); !r) return r.error();
  return store;
}

Result<void> ZkMetadataStore::create_layout() {
  const std::string& root = options_.location.root;
  for (std::size_t at = root.find('/', 1); at != std::string::npos; at = root.find('/', at + 1)) {
    if (auto r = session_->create(root.substr(0, at), {}); !r) return r.error();
  }
  if (auto r = session_->create(root, kRootMarker); !r) return r.error();
  auto marker = session_->get(root);
  if (!marker) return marker.error();
  if (!*marker || ((*marker)->data != kRootMarker && !(*marker)->data.empty())) {
    return internal(fmt::format("ZooKeeper znode {} at {} holds something other than Catena's metadata", root,
                                session_->hosts()));
  }
  for (const auto folder : zk::kFolders) {
    if (auto r = session_->create(abs(folder), {}); !r) return r.error();
  }
  const zk::Key counters{};
  if (auto r = session_->create(abs(zk::path_of(counters)), *zk::encode_key(meta::MetaState{}, counters));
      !r) {
    return r.error();
  }
  return {};
}

Result<void> ZkMetadataStore::take_epoch() {
  const std::string path = abs("controller_epoch");
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    meta::ZkControllerEpoch next;
    next.__set_transactions(0);
    next.__set_holder(holder_);
    auto current = session_->get(path);
    if (!current) return current.error();
    if (!*current) {
      next.__set_epoch(1);
      auto created = session_->create(path, detail::encode(next));
      if (!created) return created.error();
      if (!*created) continue;  // another store created it first
      epoch_ = 1;
      epoch_version_ = 0;
      return {};
    }
    meta::ZkControllerEpoch seen;
    if (!detail::decode((*current)->data, seen)) return internal(fmt::format("{} does not decode", path));
    next.__set_epoch(seen.epoch + 1);
    auto version = session_->set(path, detail::encode(next), (*current)->stat.version);
    if (!version && version.error().code == idl::ErrorCode::NOT_LEADER) continue;  // taken meanwhile
    if (!version) return version.error();
    epoch_ = next.epoch;
    epoch_version_ = *version;
    return {};
  }
  return internal(
      fmt::format("could not take the controller epoch at {}: {} others took it meanwhile", path, kAttempts));
}

Result<void> ZkMetadataStore::load() {
  meta::MetaState state;
  const zk::Key counters{};
  auto c = session_->get(abs(zk::path_of(counters)));
  if (!c) return c.error();
  if (!*c || !zk::put_key(state, counters, (*c)->data)) {
    return internal(fmt::format("{} is missing or does not decode", abs("counters")));
  }
  state_ = std::move(state);
  znodes_loaded_ = 1;
  for (const auto folder : zk::kFolders) {
    if (auto r = load_folder(folder); !r) {
      state_ = meta::MetaState{};
      return r;
    }
  }
  return {};
}

Result<void> ZkMetadataStore::load_folder(std::string_view folder) {
  auto names = session_->children(abs(folder));
  if (!names) return names.error();
  for (const auto& name : *names) {
    auto key = zk::key_in_folder(folder, name);
    const std::string path = abs(fmt::format("{}/{}", folder, name));
    if (!key) return internal(fmt::format("{} is not a znode of Catena's metadata", path));
    auto z = session_->get(path);
    if (!z) return z.error();
    if (!*z || !zk::put_key(state_, *key, (*z)->data))
      return internal(fmt::format("{} does not decode", path));
    ++znodes_loaded_;
    if (key->kind != zk::Key::Kind::channel) continue;
    auto parts = session_->children(path);
    if (!parts) return parts.error();
    std::vector<std::int64_t> numbers;
    for (const auto& p : *parts) {
      std::int64_t n = -1;
      auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), n);
      if (ec != std::errc() || end != p.data() + p.size() || n < 0 || fmt::format("{}", n) != p) {
        return internal(fmt::format("{}/{} is not a partition route", path, p));
      }
      numbers.push_back(n);
    }
    std::sort(numbers.begin(), numbers.end());
    for (std::size_t i = 0; i < numbers.size(); ++i) {
      const zk::Key route{zk::Key::Kind::route, key->a, {}, numbers[i]};
      if (numbers[i] != static_cast<std::int64_t>(i)) {
        return internal(fmt::format("{} has no route for partition {}", path, i));
      }
      auto r = session_->get(abs(zk::path_of(route)));
      if (!r) return r.error();
      if (!*r || !zk::put_key(state_, route, (*r)->data)) {
        return internal(fmt::format("{} does not decode", abs(zk::path_of(route))));
      }
      ++znodes_loaded_;
    }
  }
  return {};
}

bool ZkMetadataStore::connected() const {
  return session_->connected();
}

std::string ZkMetadataStore::describe() const {
  return fmt::format("on ZooKeeper {} at {}: controller epoch {} (held as {}), {} znode(s) loaded",
                     session_->hosts(), options_.location.root, epoch_, holder_, znodes_loaded_);
}

ControlError ZkMetadataStore::fenced_error() {
  std::string now = "a newer epoch";
  if (auto z = session_->get(abs("controller_epoch")); z && *z) {
    meta::ZkControllerEpoch seen;
    if (detail::decode((*z)->data, seen)) now = fmt::format("epoch {}, held by {}", seen.epoch, seen.holder);
  }
  return make_error(idl::ErrorCode::NOT_LEADER,
                    fmt::format("fenced: another controller is leader (this one holds controller epoch {}; "
                                "ZooKeeper {} at {} is at {})",
                                epoch_, session_->hosts(), options_.location.root, now));
}

ControlError ZkMetadataStore::fail(ControlError why) {
  spdlog::error("metadata store {} failed: {}", options_.location.root, why.describe());
  broken_ = why;
  failed_.store(true, std::memory_order_release);
  return why;
}

ZkMetadataStore::Outcome ZkMetadataStore::resolve_lost_commit() {
  // The library may still say "connected" for a moment after the loss, and
  // a read can be lost as the change was: ask until the deadline.
  const auto deadline = std::chrono::steady_clock::now() + session_->connect_timeout();
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || session_->expired() || !session_->wait_connected(left)) return Outcome::unknown;
    auto z = session_->get(abs("controller_epoch"));
    if (!z) {
      if (z.error().code != idl::ErrorCode::UNAVAILABLE || session_->expired()) return Outcome::unknown;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    meta::ZkControllerEpoch seen;
    if (!*z || !detail::decode((*z)->data, seen)) return Outcome::unknown;
    if ((*z)->stat.version == epoch_version_) return Outcome::not_applied;
    if ((*z)->stat.version == epoch_version_ + 1 && seen.epoch == epoch_ &&
        seen.transactions == transactions_ + 1) {
      return Outcome::applied;
    }
    return Outcome::fenced;
  }
}

// One transaction: the record applied to state_ in place, what each znode
// it touches held before (to undo it from the same encodings), and the
// zoo_multi operations, whose paths, payloads and answer slots live here
// (sized up front, never moved) for as long as the client may use them.
struct ZkMetadataStore::Transaction {
  std::vector<std::pair<zk::Key, std::optional<std::string>>> before;
  std::vector<std::string> paths;
  std::vector<std::optional<std::string>> afters;
  std::vector<zoo_op_t> ops;
  std::vector<std::size_t> op_path;  // op -> index into paths
  std::vector<zoo_op_result_t> results;
  Stat fence_stat{};
  // A background commit's return code, from the client's completion thread.
  std::promise<int> answered;
  std::future<int> answer = answered.get_future();
};

Result<std::shared_ptr<ZkMetadataStore::Transaction>> ZkMetadataStore::prepare(
    const meta::MetaRecord& record) {
  auto tx = std::make_shared<Transaction>();
  const std::set<zk::Key> keys = zk::keys_touched(state_, record);
  tx->before.reserve(keys.size());
  for (const auto& k : keys) tx->before.emplace_back(k, zk::encode_key(state_, k));
  apply_record(state_, record);

  auto& paths = tx->paths;
  auto& afters = tx->afters;
  paths.reserve(keys.size() + 1);
  afters.reserve(keys.size() + 1);
  meta::ZkControllerEpoch fence;
  fence.__set_epoch(epoch_);
  fence.__set_transactions(transactions_ + 1);
  fence.__set_holder(holder_);
  paths.push_back(abs("controller_epoch"));
  afters.emplace_back(detail::encode(fence));
  std::size_t request_bytes = paths.back().size() + afters.back()->size() + kOpOverheadBytes;
  std::vector<std::size_t> deletes, writes;  // indexes into paths
  std::vector<bool> existed(1, true);
  for (const auto& [key, old] : tx->before) {
    auto now = zk::encode_key(state_, key);
    if (now == old) continue;
    paths.push_back(abs(zk::path_of(key)));
    if (now && now->size() > zk::kMaxRequestBytes - paths.back().size() - kOpOverheadBytes) {
      const std::string path = paths.back();
      const std::size_t size = now->size();
      undo(*tx);
      return make_error(
          idl::ErrorCode::INVALID_ARGUMENT,
          fmt::format("znode {} would hold {} bytes, over ZooKeeper's 1 MiB limit", path, size));
    }
    request_bytes += paths.back().size() + (now ? now->size() : 0) + kOpOverheadBytes;
    (now ? writes : deletes).push_back(paths.size() - 1);
    existed.push_back(old.has_value());
    afters.push_back(std::move(now));
  }
  if (request_bytes > zk::kMaxRequestBytes) {
    undo(*tx);
    return make_error(
        idl::ErrorCode::INVALID_ARGUMENT,
        fmt::format("the change needs a ZooKeeper transaction of {} bytes, over its 1 MiB limit",
                    request_bytes));
  }

  // The fence, then removals (a channel's routes before the channel: they
  // sort after it), then writes (a channel before its routes).
  tx->ops.resize(paths.size());
  tx->op_path.assign(paths.size(), 0);
  tx->results.resize(paths.size());
  zoo_set_op_init(&tx->ops[0], paths[0].c_str(), afters[0]->data(), static_cast<int>(afters[0]->size()),
                  epoch_version_, &tx->fence_stat);
  std::size_t at = 1;
  for (auto it = deletes.rbegin(); it != deletes.rend(); ++it) {
    tx->op_path[at] = *it;
    zoo_delete_op_init(&tx->ops[at++], paths[*it].c_str(), -1);
  }
  for (const std::size_t i : writes) {
    const auto& data = *afters[i];
    tx->op_path[at] = i;
    if (existed[i]) {
      zoo_set_op_init(&tx->ops[at++], paths[i].c_str(), data.data(), static_cast<int>(data.size()), -1,
                      nullptr);
    } else {
      zoo_create_op_init(&tx->ops[at++], paths[i].c_str(), data.data(), static_cast<int>(data.size()),
                         zk::open_acl(), ZOO_PERSISTENT, nullptr, 0);
    }
  }
  return tx;
}

void ZkMetadataStore::undo(const Transaction& tx) {
  for (auto it = tx.before.rbegin(); it != tx.before.rend(); ++it) {
    if (!zk::put_key(state_, it->first, it->second)) spdlog::error("cannot undo {}", zk::path_of(it->first));
  }
}

ZkMetadataStore::Conclusion ZkMetadataStore::conclude(Transaction& tx, int rc, bool may_resend) {
  if (rc == ZOK) {
    epoch_version_ = tx.fence_stat.version;
    ++transactions_;
    return {Conclusion::applied, {}};
  }
  if (rc == ZBADVERSION && tx.results[0].err == ZBADVERSION) {
    undo(tx);
    return {Conclusion::failed, fail(fenced_error())};
  }
  if (rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT) {
    switch (resolve_lost_commit()) {
      case Outcome::applied:
        epoch_version_ += 1;
        ++transactions_;
        return {Conclusion::applied, {}};
      case Outcome::not_applied:
        if (may_resend) return {Conclusion::resend, {}};
        undo(tx);
        return {Conclusion::not_applied,
                session_->error(rc, "committing a metadata change (not applied; try again)")};
      case Outcome::fenced:
        undo(tx);
        return {Conclusion::failed, fail(fenced_error())};
      case Outcome::unknown:
        break;
    }
    undo(tx);
    return {Conclusion::failed,
            fail(session_->error(rc,
                                 "committing a metadata change, whose outcome is unknown: this controller "
                                 "must reopen its metadata"))};
  }
  undo(tx);
  if (rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE || rc == ZCLOSING || session_->expired()) {
    return {Conclusion::failed, fail(session_->error(rc, "committing a metadata change"))};
  }
  // Any other refusal means ZooKeeper's znodes differ from this store's
  // copy of them, which only another writer (which the fence keeps out)
  // could cause.
  std::string which;
  for (std::size_t i = 0; i < tx.results.size(); ++i) {
    if (tx.results[i].err != ZOK && tx.results[i].err != ZRUNTIMEINCONSISTENCY) {
      which = fmt::format("{}: {}", tx.paths[tx.op_path[i]], zerror(tx.results[i].err));
      break;
    }
  }
  return {Conclusion::failed,
          fail(internal(fmt::format("ZooKeeper refused a metadata change ({}; {}): its znodes differ from "
                                    "this controller's copy",
                                    zerror(rc), which)))};
}

Result<void> ZkMetadataStore::commit(const meta::MetaRecord& record) {
  // A background commit first: this one's fence follows from its outcome.
  if (background_) settle_background(background_rc_ ? *background_rc_ : background_->answer.get());
  if (broken_) return *broken_;
  auto tx = prepare(record);
  if (!tx) return tx.error();
  for (int attempt = 0;; ++attempt) {
    auto& t = **tx;
    const int rc =
        zoo_multi(session_->handle(), static_cast<int>(t.ops.size()), t.ops.data(), t.results.data());
    const Conclusion c = conclude(t, rc, attempt + 1 < kAttempts);
    if (c.outcome == Conclusion::resend) continue;
    if (c.outcome == Conclusion::applied) return {};
    return c.error;
  }
}

Result<void> ZkMetadataStore::commit_in_background(const meta::MetaRecord& record) {
  if (background_) {
    return make_error(idl::ErrorCode::UNAVAILABLE, "a background metadata commit is still unanswered");
  }
  if (broken_) return *broken_;
  auto tx = prepare(record);
  if (!tx) return tx.error();
  // The completion owns a reference: the transaction outlives this store if
  // the client answers after it is gone (zookeeper_close answers ZCLOSING).
  auto* held = new std::shared_ptr<Transaction>(*tx);
  auto done = [](int rc, const void* data) {
    const auto* h = static_cast<const std::shared_ptr<Transaction>*>(data);
    (*h)->answered.set_value(rc);
    delete h;
  };
  auto& t = **tx;
  const int rc = zoo_amulti(session_->handle(), static_cast<int>(t.ops.size()), t.ops.data(),
                            t.results.data(), done, held);
  if (rc != ZOK) {  // not sent: no completion will come
    delete held;
    const Conclusion c = conclude(t, rc, false);
    return c.outcome == Conclusion::applied ? Result<void>{} : Result<void>{c.error};
  }
  background_ = std::move(*tx);
  return {};
}

void ZkMetadataStore::settle_background(int rc) {
  const Conclusion c = conclude(*background_, rc, false);
  background_.reset();
  background_rc_.reset();
  last_background_ =
      c.outcome == Conclusion::applied ? BackgroundCommit::applied : BackgroundCommit::not_applied;
  if (c.outcome != Conclusion::applied) {
    spdlog::warn("a background metadata commit was not applied: {}", c.error.describe());
  }
}

MetadataStore::BackgroundCommit ZkMetadataStore::background_commit() {
  if (background_) {
    if (!background_rc_) {
      if (background_->answer.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        return BackgroundCommit::in_flight;
      }
      background_rc_ = background_->answer.get();
    }
    // A lost connection leaves the outcome to be read from ZooKeeper: not
    // before the client is connected again (that read would wait for it).
    const int rc = *background_rc_;
    if ((rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT) && !session_->connected() &&
        !session_->expired()) {
      return BackgroundCommit::in_flight;
    }
    settle_background(rc);
  }
  return std::exchange(last_background_, BackgroundCommit::none);
}

}  // namespace catena::control
