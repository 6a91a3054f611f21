// catenad's Prometheus endpoint with real processes (README "Metrics"): a
// controller and two catenad started with --metrics-addr, a channel of one
// partition on a chain of two, records published with `catena publish`.
// Each node's /metrics is fetched over a plain HTTP socket: the head counts
// exactly the records and bytes published and acknowledged, the tail
// appended the same records and bytes from its predecessor, and a second
// batch moves the counters by exactly its size. `catena stat --once` shows
// the channel's partition on both nodes.
#include <unistd.h>

#include <arpa/inet.h>
#include <chrono>
#include <cstdio>
#include <gtest/gtest.h>
#include <map>
#include <netinet/in.h>
#include <optional>
#include <sstream>
#include <string>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <vector>

#include <catena/broker/local_cluster.hpp>

#include "http_scrape.hpp"
#include "run_command.hpp"

namespace catena {
namespace {

using namespace std::chrono_literals;

using test::free_port;
using test::Outcome;
using test::run;
using test::scrape;

// metric{labels...} value lines of one channel: name -> role -> value.
using Samples = std::map<std::string, std::map<std::string, double>>;

Samples channel_samples(const std::string& text, const std::string& channel) {
  Samples out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto brace = line.find('{');
    const auto close = line.find('}');
    if (brace == std::string::npos || close == std::string::npos) continue;
    const std::string labels = line.substr(brace + 1, close - brace - 1);
    if (labels.find("channel=\"" + channel + "\"") == std::string::npos) continue;
    if (labels.find("partition=\"0\"") == std::string::npos) continue;
    const auto r = labels.find("role=\"");
    if (r == std::string::npos) continue;
    const std::string role = labels.substr(r + 6, labels.find('"', r + 6) - r - 6);
    out[line.substr(0, brace)][role] = std::stod(line.substr(close + 1));
  }
  return out;
}

// The value of `name` for `role` on whichever node holds that role.
std::optional<double> value(const std::vector<Samples>& nodes, const std::string& name,
                            const std::string& role) {
  for (const auto& s : nodes) {
    auto m = s.find(name);
    if (m == s.end()) continue;
    auto r = m->second.find(role);
    if (r != m->second.end()) return r->second;
  }
  return std::nullopt;
}

std::string records(int from, int to) {
  std::string s;
  for (int i = from; i < to; ++i) s += "record-" + std::to_string(100000 + i) + "\n";  // 13 bytes each
  return s;
}

TEST(Metrics, PerPartitionCountersMoveByWhatWasPublishedAndStatShowsThem) {
  ClusterOptions o;
  o.nodes = 0;
  o.dir = "broker-metrics";
  o.quiet = true;
  LocalCluster cluster(o);
  std::string err;
  ASSERT_TRUE(cluster.start(&err)) << err;
  std::vector<int> ports;
  for (int i = 0; i < 2; ++i) {
    const int port = free_port();
    ASSERT_GT(port, 0);
    ASSERT_TRUE(cluster.add_node(&err, {"--metrics-addr", "127.0.0.1:" + std::to_string(port)})) << err;
    ports.push_back(port);
  }
  const std::string cli = self_dir() + "/catena --controller " + cluster.controller_address() + " ";
  Outcome created = run(cli + "channel create watched --partitions 1 --replication 2");
  ASSERT_EQ(created.exit_code, 0) << created.output;

  auto scrape_all = [&] {
    std::vector<Samples> out;
    for (int port : ports) {
      const std::string text = scrape(port);
      EXPECT_NE(text.find("# TYPE catena_replica_appended_records_total counter"), std::string::npos) << text;
      out.push_back(channel_samples(text, "watched"));
    }
    return out;
  };
  // Counters are read live; the tail's copy and the head's acks may trail
  // `catena publish`'s exit by a data-plane pass: wait for the numbers.
  auto wait_for = [&](const std::string& name, const std::string& role, double want) {
    std::optional<double> got;
    for (int i = 0; i < 100; ++i) {
      got = value(scrape_all(), name, role);
      if (got && *got == want) return;
      std::this_thread::sleep_for(50ms);
    }
    ADD_FAILURE() << name << "{role=" << role << "} is " << (got ? std::to_string(*got) : "absent")
                  << ", want " << want;
  };

  constexpr int kFirst = 40;
  constexpr int kSecond = 25;
  const std::string feed = "/tmp/catena-metrics-test-" + std::to_string(getpid());
  {
    FILE* f = std::fopen(feed.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(records(0, kFirst).c_str(), f);
    std::fclose(f);
  }
  Outcome pub = run(cli + "publish watched --quiet < " + feed);
  ASSERT_EQ(pub.exit_code, 0) << pub.output;

  wait_for("catena_replica_appended_records_total", "head", kFirst);
  wait_for("catena_replica_acked_records_total", "head", kFirst);
  wait_for("catena_replica_appended_records_total", "tail", kFirst);
  wait_for("catena_replica_commit_offset", "tail", kFirst);
  auto first = scrape_all();
  // Each node holds one segment for these few records, of the smallest size
  // (64 KiB, not the channel's 4 MiB: segments are sized by need and their
  // memory taken as they open), and registered it and more: gauges of its
  // segment and fabric memory.
  for (int port : ports) {
    const std::string text = scrape(port);
    auto gauge = [&](const std::string& metric) {
      EXPECT_NE(text.find("# TYPE " + metric + " gauge"), std::string::npos) << text;
      const std::string name = "\n" + metric + " ";
      const auto at = text.find(name);
      return at == std::string::npos ? -1.0 : std::stod(text.substr(at + name.size()));
    };
    const double segments = gauge("catena_node_segment_memory_bytes");
    EXPECT_EQ(segments, 1.0 * (64 << 10)) << text;
    EXPECT_GE(gauge("catena_node_registered_bytes"), segments) << text;
    EXPECT_GT(gauge("catena_node_segment_memory_limit_bytes"), segments) << text;
    EXPECT_GE(gauge("catena_node_warm_bytes"), 0.0) << text;  // reported (nothing given back yet)
  }
  const double head_bytes = value(first, "catena_replica_appended_bytes_total", "head").value_or(-1);
  // Every record is a frame of the same size: a header and the 13-byte payload.
  ASSERT_GT(head_bytes, 13.0 * kFirst);
  const double frame = head_bytes / kFirst;
  EXPECT_EQ(frame, static_cast<double>(static_cast<long long>(frame))) << head_bytes;
  EXPECT_EQ(value(first, "catena_replica_acked_bytes_total", "head"), head_bytes);
  // The tail counts what its predecessor wrote into its segments: the
  // head's frames and the segment's own header, all forwarded by the head.
  const double forwarded = value(first, "catena_replica_forwarded_bytes_total", "head").value_or(-1);
  EXPECT_GE(forwarded, head_bytes);
  wait_for("catena_replica_appended_bytes_total", "tail", forwarded);
  EXPECT_EQ(value(first, "catena_replica_sequence_gaps_total", "head"), 0.0);
  EXPECT_EQ(value(first, "catena_replica_log_full_events_total", "head"), 0.0);

  // A second batch moves them by exactly its size.
  {
    FILE* f = std::fopen(feed.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(records(kFirst, kFirst + kSecond).c_str(), f);
    std::fclose(f);
  }
  pub = run(cli + "publish watched --quiet < " + feed);
  ASSERT_EQ(pub.exit_code, 0) << pub.output;
  std::remove(feed.c_str());
  wait_for("catena_replica_appended_records_total", "head", kFirst + kSecond);
  wait_for("catena_replica_acked_records_total", "head", kFirst + kSecond);
  wait_for("catena_replica_appended_records_total", "tail", kFirst + kSecond);
  wait_for("catena_replica_appended_bytes_total", "head", frame * (kFirst + kSecond));
  wait_for("catena_replica_acked_bytes_total", "head", frame * (kFirst + kSecond));
  wait_for("catena_replica_appended_bytes_total", "tail", forwarded + frame * kSecond);
  wait_for("catena_replica_commit_offset", "head", kFirst + kSecond);

  // `catena stat --once` shows the partition on both nodes, as head and tail,
  // with the offsets the heartbeats carried (they trail by a heartbeat).
  bool shown = false;
  std::string last;
  for (int i = 0; i < 40 && !shown; ++i) {
    Outcome st = run(cli + "stat --once --interval-ms 100");
    ASSERT_EQ(st.exit_code, 0) << st.output;
    last = st.output;
    shown = st.output.find("watched/0") != std::string::npos &&
            st.output.find(" head ") != std::string::npos && st.output.find(" tail ") != std::string::npos &&
            st.output.find(" " + std::to_string(kFirst + kSecond) + " ") != std::string::npos;
    if (!shown) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(shown) << last;
  Outcome json = run(cli + "stat --once --json --interval-ms 0");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_NE(json.output.find("\"channel\":\"watched\""), std::string::npos) << json.output;
  EXPECT_NE(json.output.find("\"commit_offset\":" + std::to_string(kFirst + kSecond)), std::string::npos)
      << json.output;
}

}  // namespace
}  // namespace catena
