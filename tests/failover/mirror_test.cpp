// The datacenter level of recovery: a channel mirrored to a second cluster
// by `catena mirror run` (a real process), the mirror killed with SIGKILL
// and restarted mid-stream, then the whole primary cluster killed (every
// broker and the controller, SIGKILL) and a subscriber and a publisher
// failed over to the mirror explicitly (MirrorState::map).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <gtest/gtest.h>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <vector>

#include <catena/broker/controller_routes.hpp>
#include <catena/broker/local_cluster.hpp>
#include <catena/broker/mirror.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/control/controller_client.hpp>

extern char** environ;

namespace catena {
namespace {

using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

constexpr const char* kChannel = "orders";
constexpr int kKeys = 16;

std::string payload_for(std::uint64_t id) {
  std::string s = "rec:" + std::to_string(id) + ":";
  s.resize(48, static_cast<char>('a' + id % 26));
  return s;
}

std::uint64_t id_of(std::span<const std::byte> p) {
  const char* c = reinterpret_cast<const char*>(p.data());
  if (p.size() < 5 || std::strncmp(c, "rec:", 4) != 0) return ~0ull;
  return std::strtoull(c + 4, nullptr, 10);
}

std::string key_of(std::uint64_t id) {
  return "k" + std::to_string(id % kKeys);
}

// `catena ARGS` run to completion: exit status and what it printed.
int run_catena(const std::string& args, std::string* out) {
  const std::string cmd = self_dir() + "/catena " + args + " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[1024];
  while (std::fgets(buf, sizeof buf, p) != nullptr) *out += buf;
  const int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// `catena ARGS` as a child process (stdout and stderr appended to `log`).
pid_t spawn_catena(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> full{self_dir() + "/catena"};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

bool wait_exit(pid_t pid, std::chrono::milliseconds timeout, int* status) {
  const auto deadline = Steady::now() + timeout;
  while (Steady::now() < deadline) {
    if (::waitpid(pid, status, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

template <class F>
bool wait_for(F cond, std::chrono::milliseconds timeout) {
  const auto deadline = Steady::now() + timeout;
  while (!cond() && Steady::now() < deadline) std::this_thread::sleep_for(5ms);
  return cond();
}

std::unique_ptr<LocalCluster> start_cluster(const std::string& dir) {
  ClusterOptions o;
  o.nodes = 3;
  o.dir = dir;
  o.quiet = true;
  auto c = std::make_unique<LocalCluster>(o);
  std::string err;
  EXPECT_TRUE(c->start(&err)) << err;
  return c;
}

control::ControllerClient::Options options_for(const std::string& address) {
  control::ControllerClient::Options co;
  co.address = address;
  return co;
}

void create_channel(const std::string& address, const std::string& name, int partitions) {
  control::ControllerClient admin(options_for(address));
  control::idl::ChannelConfig cfg;
  cfg.name = name;
  cfg.partitions = partitions;
  cfg.replication = 3;
  cfg.segment_bytes = 4 << 20;
  cfg.ttl_ms = 600000;
  auto ch = admin.create_channel(cfg);
  ASSERT_TRUE(ch.ok()) << ch.error().describe();
}

struct Delivery {
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  std::uint64_t id = 0;
};

TEST(Mirror, PrimaryLossFailsOverWithinTheReportedLagAndARestartDuplicatesNothing) {
  const std::string state_dir = "mirror-test-state";
  std::filesystem::remove_all(state_dir);
  auto src = start_cluster("mirror-test-src");
  auto dst = start_cluster("mirror-test-dst");
  ASSERT_FALSE(::testing::Test::HasFailure());
  const std::string src_addr = src->controller_address();
  const std::string dst_addr = dst->controller_address();
  create_channel(src_addr, kChannel, 2);
  create_channel(src_addr, "mismatch", 2);
  create_channel(dst_addr, "mismatch", 1);
  const std::string cli = "--controller " + src_addr + " mirror --state-dir " + state_dir + " ";

  // Clear errors, nothing recorded.
  std::string out;
  EXPECT_NE(run_catena(cli + "create nosuch --to " + dst_addr, &out), 0);
  EXPECT_NE(out.find("unknown_channel"), std::string::npos) << out;
  out.clear();
  EXPECT_NE(run_catena(cli + "create mismatch --to " + dst_addr, &out), 0);
  EXPECT_NE(out.find("1 partitions on the destination cluster and 2 on the source"), std::string::npos)
      << out;
  out.clear();
  EXPECT_NE(run_catena(cli + "create orders --name nowhere --to 127.0.0.1:1", &out), 0);
  EXPECT_NE(out.find("controller_unavailable"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(mirror_state_path(state_dir, "nowhere")));
  out.clear();
  ASSERT_EQ(run_catena(cli + "create orders --name m1 --to " + dst_addr, &out), 0) << out;
  const std::string state_path = mirror_state_path(state_dir, "m1");
  // The destination channel was created with the same partition count.
  {
    control::ControllerClient admin(options_for(dst_addr));
    auto ch = admin.describe_channel(kChannel);
    ASSERT_TRUE(ch.ok()) << ch.error().describe();
    EXPECT_EQ(ch->config.partitions, 2);
  }

  // A mirror that saves its state only every second: killing it leaves
  // records in the destination that its state does not know of.
  const std::vector<std::string> run_args{"--controller", src_addr, "mirror", "--state-dir",
                                          state_dir,      "run",    "m1"};
  auto with_interval = [&](int ms) {
    auto a = run_args;
    a.push_back("--save-interval-ms");
    a.push_back(std::to_string(ms));
    return a;
  };
  pid_t mirror = spawn_catena(with_interval(1000), "mirror-test-run.log");
  ASSERT_GT(mirror, 0);

  std::mutex mu;
  std::map<std::uint64_t, std::pair<std::uint32_t, std::uint64_t>> acked;  // id -> source partition, offset
  std::vector<Delivery> delivered;                                         // source, then destination
  std::atomic<std::uint64_t> acked_count{0};
  std::atomic<bool> stop_pub{false}, stop_sub{false};
  std::map<std::uint32_t, std::uint64_t> sub_position;
  std::atomic<std::uint64_t> next_id{0};

  std::thread sub_thread([&] {
    broker::ControllerRoutes routes(options_for(src_addr), "mirror-test-sub");
    auto sub = Subscriber::create(routes, kChannel, {});
    if (!sub) {
      ADD_FAILURE() << sub.error().describe();
      return;
    }
    while (!stop_sub) {
      if (sub.value()->poll([&](const Message& m) {
            std::lock_guard lock(mu);
            delivered.push_back({m.partition, m.offset, id_of(m.payload)});
          }) == 0) {
        std::this_thread::sleep_for(100us);
      }
    }
    std::lock_guard lock(mu);
    for (const auto p : sub.value()->partitions()) sub_position[p] = sub.value()->position(p);
  });
  std::thread pub_thread([&] {
    broker::ControllerRoutes routes(options_for(src_addr), "mirror-test-pub");
    PublisherOptions po;
    po.retry_timeout = 2s;
    auto pub = Publisher::create(routes, kChannel, po);
    if (!pub) {
      ADD_FAILURE() << pub.error().describe();
      return;
    }
    std::uint64_t id = 0;
    while (!stop_pub) {
      const std::string p = payload_for(id);
      const std::string k = key_of(id);
      const auto e = pub.value()->publish(std::as_bytes(std::span(k)), std::as_bytes(std::span(p)),
                                          [&, id](const PublishResult& r) {
                                            if (r.status != PublishStatus::ok) return;
                                            std::lock_guard lock(mu);
                                            acked[id] = {r.partition, r.offset};
                                            acked_count.fetch_add(1);
                                          });
      if (e == client::ErrorCode::ok) next_id.store(++id);
      pub.value()->poll();
      if (id % 16 == 0) std::this_thread::sleep_for(2ms);  // a steady stream (~6k records/s)
    }
  });

  auto mirrored = [&] {
    auto st = MirrorState::load(state_path);
    std::uint64_t n = 0;
    if (st) {
      for (const auto& p : st->partitions) n += p.next.source;
    }
    return n;
  };
  ASSERT_TRUE(wait_for([&] { return mirrored() >= 500; }, 15s)) << "the mirror made no progress";
  std::this_thread::sleep_for(400ms);
  ASSERT_EQ(::kill(mirror, SIGKILL), 0);
  int status = 0;
  ASSERT_TRUE(wait_exit(mirror, 5s, &status));
  const auto at_kill = MirrorState::load(state_path);
  ASSERT_TRUE(at_kill.ok()) << at_kill.error().describe();
  mirror = spawn_catena(with_interval(100), "mirror-test-run.log");
  ASSERT_GT(mirror, 0);
  const std::uint64_t resumed_from = mirrored();
  ASSERT_TRUE(wait_for([&] { return mirrored() >= resumed_from + 3000; }, 15s))
      << "the restarted mirror stalled";
  std::this_thread::sleep_for(300ms);

  // The mirror's position is on the source too, as group mirror.m1's offsets.
  {
    control::ControllerClient admin(options_for(src_addr));
    auto committed = admin.fetch_offset("mirror.m1", kChannel, 0);
    ASSERT_TRUE(committed.ok()) << committed.error().describe();
    EXPECT_GT(*committed, 0);
  }

  // The datacenter is lost: every process of the primary cluster, SIGKILL.
  // The last report of the mirror before it is the recovery point.
  const auto before = MirrorState::load(state_path);
  ASSERT_TRUE(before.ok()) << before.error().describe();
  for (std::size_t i = 0; i < src->nodes().size(); ++i) EXPECT_TRUE(src->signal_node(i, SIGKILL));
  EXPECT_TRUE(src->signal_controller(0, SIGKILL));
  stop_pub = true;
  stop_sub = true;
  pub_thread.join();
  sub_thread.join();
  // The mirror stops on SIGTERM, saving what the destination acknowledged.
  ASSERT_EQ(::kill(mirror, SIGTERM), 0);
  ASSERT_TRUE(wait_exit(mirror, 15s, &status)) << "the mirror did not stop";
  const auto after = MirrorState::load(state_path);
  ASSERT_TRUE(after.ok()) << after.error().describe();
  std::uint64_t skipped = 0;
  for (std::uint32_t p = 0; p < 2; ++p) {
    EXPECT_GE(after->partitions[p].next.source, before->partitions[p].next.source);
    skipped += after->partitions[p].skipped_on_restart;
  }
  // The killed mirror had records in the destination past its saved state:
  // the restarted one found them instead of publishing them again.
  EXPECT_GT(skipped, 0u) << "the kill did not hit a batch between acknowledgement and save";

  // Failover. The subscriber goes on at the mapped offsets, the publisher
  // publishes to the mirror's cluster.
  broker::ControllerRoutes dst_routes(options_for(dst_addr), "mirror-test-failover");
  SubscriberOptions so;
  so.start = Start::offset;
  auto sub = Subscriber::create(dst_routes, kChannel, so);
  ASSERT_TRUE(sub.ok()) << sub.error().describe();
  for (std::uint32_t p = 0; p < 2; ++p) sub.value()->seek(p, after->map(p, sub_position[p]));
  PublisherOptions po;
  auto pub = Publisher::create(dst_routes, kChannel, po);
  ASSERT_TRUE(pub.ok()) << pub.error().describe();
  const std::uint64_t first_new = next_id.load() + 1000;
  std::set<std::uint64_t> new_ids;
  for (std::uint64_t id = first_new; id < first_new + 200; ++id) {
    const std::string p = payload_for(id);
    const std::string k = key_of(id);
    auto f = pub.value()->publish(std::as_bytes(std::span(k)), std::as_bytes(std::span(p)));
    ASSERT_TRUE(pub.value()->flush(10s));
    ASSERT_EQ(f.get().status, PublishStatus::ok);
    new_ids.insert(id);
  }
  std::set<std::uint64_t> seen_new;
  auto quiet_since = Steady::now();
  const auto deadline = Steady::now() + 10s;
  while (Steady::now() < deadline &&
         (seen_new.size() < new_ids.size() || Steady::now() - quiet_since < 300ms)) {
    const int n = sub.value()->poll([&](const Message& m) {
      const auto id = id_of(m.payload);
      if (new_ids.count(id)) seen_new.insert(id);
      delivered.push_back({m.partition, m.offset, id});
    });
    if (n > 0) quiet_since = Steady::now();
    if (n == 0) std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(seen_new.size(), new_ids.size()) << "records published to the mirror after failover";

  // Exactly once, in per-key order, for everything the mirror had copied by
  // its last report; the loss bounded by that report's lag.
  std::map<std::uint64_t, int> times;
  std::map<std::string, std::uint64_t> last_of_key;
  std::uint64_t out_of_order = 0;
  for (const auto& d : delivered) {
    ++times[d.id];
    const std::string k = key_of(d.id);
    if (last_of_key.count(k) && last_of_key[k] >= d.id) ++out_of_order;
    last_of_key[k] = d.id;
  }
  std::uint64_t duplicated = 0;
  for (const auto& [id, n] : times) duplicated += n > 1 ? 1 : 0;
  EXPECT_EQ(duplicated, 0u);
  EXPECT_EQ(out_of_order, 0u);
  std::uint64_t lost = 0, lost_before_recovery_point = 0;
  std::vector<std::uint64_t> source_end(2, 0);
  for (const auto& [id, where] : acked) {
    source_end[where.first] = std::max(source_end[where.first], where.second + 1);
    if (times.count(id)) continue;
    ++lost;
    if (where.second < before->partitions[where.first].next.source) ++lost_before_recovery_point;
  }
  std::uint64_t lag_at_loss = 0;
  for (std::uint32_t p = 0; p < 2; ++p) {
    if (source_end[p] > before->partitions[p].next.source)
      lag_at_loss += source_end[p] - before->partitions[p].next.source;
  }
  EXPECT_EQ(lost_before_recovery_point, 0u);
  EXPECT_LE(lost, lag_at_loss);
  std::printf(
      "acked %zu, lost %llu (the mirror's last report: lag %llu records, %llu behind the source's end "
      "at the loss), mirror restart found %llu records already copied\n",
      acked.size(), static_cast<unsigned long long>(lost),
      static_cast<unsigned long long>(before->lag_records()), static_cast<unsigned long long>(lag_at_loss),
      static_cast<unsigned long long>(skipped));

  // The destination holds each source record once, where the map says.
  SubscriberOptions all;
  all.start = Start::earliest;
  auto whole = Subscriber::create(dst_routes, kChannel, all);
  ASSERT_TRUE(whole.ok()) << whole.error().describe();
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::uint64_t>
      at;  // destination (partition, offset) -> id
  std::map<std::uint64_t, int> copies;
  std::uint64_t expected_records = new_ids.size();
  for (const auto& p : after->partitions) expected_records += p.next.destination;
  wait_for(
      [&] {
        whole.value()->poll([&](const Message& m) {
          at[{m.partition, m.offset}] = id_of(m.payload);
          ++copies[id_of(m.payload)];
        });
        return at.size() >= expected_records;
      },
      10s);
  EXPECT_EQ(at.size(), expected_records);
  for (const auto& [id, n] : copies)
    EXPECT_EQ(n, 1) << "record " << id << " is in the destination " << n << " times";
  std::uint64_t checked = 0;
  for (const auto& [id, where] : acked) {
    if (where.second >= after->partitions[where.first].next.source) continue;
    const auto d = after->map(where.first, where.second);
    const auto it = at.find({where.first, d});
    ASSERT_NE(it, at.end()) << "source " << where.first << ":" << where.second << " maps to missing " << d;
    EXPECT_EQ(it->second, id) << "source " << where.first << ":" << where.second << " maps to " << d;
    ++checked;
  }
  EXPECT_GT(checked, 3000u);
  // What the destination lacks of what the source acknowledged: only
  // records past the last report's mirrored offset, at most its lag at the
  // loss.
  std::set<std::uint64_t> in_destination;
  for (const auto& [where, id] : at) in_destination.insert(id);
  std::uint64_t missing = 0;
  for (const auto& [id, where] : acked) {
    if (in_destination.count(id)) continue;
    ++missing;
    EXPECT_GE(where.second, before->partitions[where.first].next.source) << "record " << id;
  }
  EXPECT_LE(missing, lag_at_loss);
  std::printf("the destination lacks %llu acknowledged records\n", static_cast<unsigned long long>(missing));

  // `catena mirror status` and `map` read the state.
  out.clear();
  EXPECT_EQ(run_catena(cli + "status m1", &out), 0) << out;
  EXPECT_NE(out.find("source unreachable"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run_catena(cli + "map m1 1 " + std::to_string(after->partitions[1].next.source), &out), 0) << out;
  EXPECT_EQ(out, std::to_string(after->partitions[1].next.destination) + "\n");
}

// Two closed clusters (each with its own admin token, as `cluster up
// --secure`): a mirror needs a token for each. Without the destination's it
// is refused as unauthenticated and records nothing; with both it copies
// every record, in order, and `catena mirror status` reads the source with
// --token.
TEST(Mirror, ClosedClustersAreMirroredWithATokenForEach) {
  const std::string state_dir = "mirror-secure-test-state";
  std::filesystem::remove_all(state_dir);
  auto start_closed = [](const std::string& dir) {
    ClusterOptions o;
    o.nodes = 3;
    o.dir = dir;
    o.quiet = true;
    o.secure = true;
    auto c = std::make_unique<LocalCluster>(o);
    std::string err;
    EXPECT_TRUE(c->start(&err)) << err;
    return c;
  };
  auto src = start_closed("mirror-secure-test-src");
  auto dst = start_closed("mirror-secure-test-dst");
  ASSERT_FALSE(::testing::Test::HasFailure());
  auto src_co = options_for(src->controller_address());
  src_co.token = src->admin_token();
  auto dst_co = options_for(dst->controller_address());
  dst_co.token = dst->admin_token();
  ASSERT_NE(src_co.token, dst_co.token);
  {
    control::ControllerClient admin(src_co);
    control::idl::ChannelConfig cfg;
    cfg.name = kChannel;
    cfg.partitions = 1;
    cfg.replication = 3;
    cfg.segment_bytes = 4 << 20;
    cfg.ttl_ms = 600000;
    auto ch = admin.create_channel(cfg);
    ASSERT_TRUE(ch.ok()) << ch.error().describe();
  }
  constexpr std::uint64_t kRecords = 300;
  {
    broker::ControllerRoutes routes(src_co, "mirror-secure-pub");
    auto pub = Publisher::create(routes, kChannel, {});
    ASSERT_TRUE(pub.ok()) << pub.error().describe();
    std::uint64_t ok = 0;
    for (std::uint64_t id = 0; id < kRecords; ++id) {
      const std::string p = payload_for(id);
      while (pub.value()->publish_to(0, std::as_bytes(std::span(p)), [&](const PublishResult& r) {
        if (r.status == PublishStatus::ok) ++ok;
      }) != client::ErrorCode::ok)
        pub.value()->poll();
    }
    ASSERT_TRUE(pub.value()->flush(10s));
    ASSERT_EQ(ok, kRecords);
  }

  auto refused = Mirror::create("m", kChannel, src_co.address, dst_co.address, state_dir, src_co.token, "");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, client::ErrorCode::unauthenticated) << refused.error().describe();
  EXPECT_FALSE(std::filesystem::exists(mirror_state_path(state_dir, "m")));

  auto created =
      Mirror::create("m", kChannel, src_co.address, dst_co.address, state_dir, src_co.token, dst_co.token);
  ASSERT_TRUE(created.ok()) << created.error().describe();
  MirrorOptions mo;
  mo.state_dir = state_dir;
  mo.source_token = src_co.token;
  mo.destination_token = dst_co.token;
  auto mirror = Mirror::open("m", mo);
  ASSERT_TRUE(mirror.ok()) << mirror.error().describe();
  client::Result<void> ran;
  std::thread run([&] { ran = mirror.value()->run(); });
  ASSERT_TRUE(wait_for([&] { return mirror.value()->state().partitions[0].next.source >= kRecords; }, 15s))
      << "the mirror made no progress";
  mirror.value()->stop();
  run.join();
  EXPECT_TRUE(ran.ok()) << ran.error().describe();

  // The destination holds every record once, in order.
  broker::ControllerRoutes routes(dst_co, "mirror-secure-sub");
  auto sub = Subscriber::create(routes, kChannel, {});
  ASSERT_TRUE(sub.ok()) << sub.error().describe();
  std::vector<std::uint64_t> ids;
  ASSERT_TRUE(wait_for(
      [&] {
        sub.value()->poll([&](const Message& m) { ids.push_back(id_of(m.payload)); });
        return ids.size() >= kRecords;
      },
      10s));
  ASSERT_EQ(ids.size(), kRecords);
  for (std::uint64_t id = 0; id < kRecords; ++id) EXPECT_EQ(ids[id], id);

  std::string out;
  EXPECT_EQ(run_catena("--token " + src_co.token + " mirror --state-dir " + state_dir + " status m", &out), 0)
      << out;
  EXPECT_EQ(out.find("source unreachable"), std::string::npos) << out;
}

// Records keep their key and headers through the mirror, byte-exact
// (binary bytes, a header without a value, two headers of one name), and a
// record published without either arrives without either.
TEST(Mirror, KeysAndHeadersAreMirroredByteExact) {
  const std::string state_dir = "mirror-attrs-test-state";
  std::filesystem::remove_all(state_dir);
  auto src = start_cluster("mirror-attrs-test-src");
  auto dst = start_cluster("mirror-attrs-test-dst");
  ASSERT_FALSE(::testing::Test::HasFailure());
  create_channel(src->controller_address(), kChannel, 1);
  ASSERT_FALSE(::testing::Test::HasFailure());

  struct Sent {
    std::string key;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string payload;
  };
  const std::string binary("\x00\xff\x01k\x00", 5);
  std::vector<Sent> sent{
      {"order-1",
       {{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, {"schema", "7"}},
       "p0"},
      {binary, {{"bin", binary}, {"empty", ""}, {"dup", "a"}, {"dup", "b"}}, std::string("\x00\x01", 2)},
      {"", {}, "plain"},
      {"only-key", {}, ""},
      {"", {{"only", "headers"}}, "x"},
  };
  {
    broker::ControllerRoutes routes(options_for(src->controller_address()), "mirror-attrs-pub");
    auto pub = Publisher::create(routes, kChannel, {});
    ASSERT_TRUE(pub.ok()) << pub.error().describe();
    int ok = 0;
    for (const auto& r : sent) {
      std::vector<HeaderField> h;
      for (const auto& [n, v] : r.headers) h.push_back({n, v});
      const Record rec{std::as_bytes(std::span(r.key)), h, std::as_bytes(std::span(r.payload))};
      auto cb = [&](const PublishResult& res) { ok += res.status == PublishStatus::ok; };
      const auto e = r.key.empty() && r.headers.empty()
                         ? pub.value()->publish_to(0, std::as_bytes(std::span(r.payload)), cb)
                         : pub.value()->publish_to(0, rec, cb);
      ASSERT_EQ(e, client::ErrorCode::ok);
    }
    ASSERT_TRUE(pub.value()->flush(10s));
    ASSERT_EQ(ok, static_cast<int>(sent.size()));
  }

  auto created =
      Mirror::create("m", kChannel, src->controller_address(), dst->controller_address(), state_dir);
  ASSERT_TRUE(created.ok()) << created.error().describe();
  MirrorOptions mo;
  mo.state_dir = state_dir;
  auto mirror = Mirror::open("m", mo);
  ASSERT_TRUE(mirror.ok()) << mirror.error().describe();
  client::Result<void> ran;
  std::thread run([&] { ran = mirror.value()->run(); });
  ASSERT_TRUE(wait_for([&] { return mirror.value()->state().partitions[0].next.source >= sent.size(); }, 15s))
      << "the mirror made no progress";
  mirror.value()->stop();
  run.join();
  EXPECT_TRUE(ran.ok()) << ran.error().describe();

  broker::ControllerRoutes routes(options_for(dst->controller_address()), "mirror-attrs-sub");
  auto sub = Subscriber::create(routes, kChannel, {});
  ASSERT_TRUE(sub.ok()) << sub.error().describe();
  std::vector<Sent> got;
  std::vector<std::uint64_t> offsets;
  ASSERT_TRUE(wait_for(
      [&] {
        sub.value()->poll([&](const Message& m) {
          Sent r;
          r.key.assign(reinterpret_cast<const char*>(m.key.data()), m.key.size());
          for (const auto& h : m.headers) r.headers.emplace_back(h.name, h.value);
          r.payload.assign(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
          got.push_back(std::move(r));
          offsets.push_back(m.offset);
        });
        return got.size() >= sent.size();
      },
      10s));
  ASSERT_EQ(got.size(), sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(offsets[i], i);
    EXPECT_EQ(got[i].key, sent[i].key) << i;
    EXPECT_EQ(got[i].headers, sent[i].headers) << i;
    EXPECT_EQ(got[i].payload, sent[i].payload) << i;
  }
}

}  // namespace
}  // namespace catena
