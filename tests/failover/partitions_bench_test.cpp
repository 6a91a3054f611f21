// `catena bench --partitions` with small numbers, so that the command cannot
// rot: a 1-partition and a 12-partition channel, each on 3 fresh brokers,
// take records on every partition from one publisher; the 12 partitions'
// routes give each broker 4 heads and 4 tails (issue 17: placement spreads
// the roles), and every broker reports its resident and registered memory,
// its segment memory following what it retains; the publisher's rings come
// to 64 KiB to ring_bytes per partition; and each row says what a record
// cost the brokers and the publisher in CPU over the measured run.
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <gtest/gtest.h>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <vector>

#include "bench_run.hpp"

namespace catena {
namespace {

// What each node holds open while the publisher is up: chain links (two per
// chain of 3, each counted at both ends), one publisher session per
// partition at its head (but for a moment while its ring grows: the
// session is replaced), and with tail acks up to one commit watch per
// partition at its tail; --head-acks-only opens none.
std::int64_t connections_of(const nlohmann::json& row) {
  std::int64_t sum = 0;
  for (const auto& [node, n] : row["connections_per_node"].items()) {
    EXPECT_GE(n.get<std::int64_t>(), 0) << node << ": the controller had no stats of it";
    sum += n.get<std::int64_t>();
  }
  return sum;
}

TEST(PartitionsBench, TwelvePartitionsOnThreeNodesCommitSpreadTheirRolesAndRegisterMoreMemory) {
  std::string out;
  int status = 0;
  const std::string log = "partitions-bench.log";
  // --cold: no warm-up (8 s a count), so memory is sampled before any
  // segment expired; a warmed node also keeps expired segments for reuse in
  // place, beyond the bound below (README "Many partitions").
  (void)test::run_bench_json("--partitions 1,12 --nodes 3 --seconds 0.5 --cold --dir partitions-bench", log,
                             &status, &out);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out << "; see " << log;
  std::map<int, nlohmann::json> rows;  // by partition count
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "not JSON: " << line << "; see " << log;
    rows[j.value("partitions", -1)] = j;
  }
  ASSERT_EQ(rows.size(), 2u) << out << "; see " << log;
  ASSERT_TRUE(rows.count(1) != 0 && rows.count(12) != 0) << out;
  for (const auto& [partitions, row] : rows)
    EXPECT_EQ(row.value("warmup_s", -1.0), 0.0) << partitions << ": --cold measures without a warm-up";
  // Tail acks by default: commit watches besides the links and the
  // publisher sessions (opened as the records flow, so not necessarily all
  // of them yet).
  std::int64_t beyond_sessions = 0;  // summed over both rows: the watches, less sessions mid-grow
  for (const auto& [partitions, row] : rows) {
    EXPECT_EQ(row.value("tail_acks", false), true) << out;
    ASSERT_TRUE(row.contains("connections_per_node") && row["connections_per_node"].size() == 3u) << out;
    const std::int64_t links = partitions * 2 * 2;
    EXPECT_GE(connections_of(row), links) << partitions << ": chain links missing: " << out;
    EXPECT_LE(connections_of(row), links + 2 * partitions) << partitions << ": " << out;
    beyond_sessions += connections_of(row) - links - partitions;
  }
  EXPECT_GT(beyond_sessions, 0) << "no commit watch in either row: " << out;

  const auto& j = rows[12];
  EXPECT_EQ(j.value("nodes", -1), 3) << out;
  EXPECT_GT(j.value("msgs_per_s", 0.0), 0.0) << out;
  ASSERT_TRUE(j.contains("heads_per_node") && j.contains("tails_per_node")) << out;
  EXPECT_EQ(j["heads_per_node"].size(), 3u) << out;
  for (const auto& [node, n] : j["heads_per_node"].items()) EXPECT_EQ(n.get<int>(), 4) << node << ": " << out;
  for (const auto& [node, n] : j["tails_per_node"].items()) EXPECT_EQ(n.get<int>(), 4) << node << ": " << out;

  // Memory per node, in both rows: every node resident and registered.
  for (const auto& [partitions, row] : rows) {
    for (const char* field : {"rss_bytes", "registered_bytes"}) {
      ASSERT_TRUE(row.contains(field) && row[field].is_object()) << partitions << ": " << out;
      EXPECT_EQ(row[field].size(), 3u) << partitions << " " << field << ": " << out;
      for (const auto& [node, bytes] : row[field].items()) {
        EXPECT_GT(bytes.get<std::int64_t>(), 0) << partitions << " " << field << " " << node << ": " << out;
      }
    }
  }
  // And what each node's provider keeps warm, reported by every node.
  for (const auto& [partitions, row] : rows) {
    ASSERT_TRUE(row.contains("warm_bytes") && row["warm_bytes"].is_object()) << partitions << ": " << out;
    EXPECT_EQ(row["warm_bytes"].size(), 3u) << partitions << ": " << out;
    for (const auto& [node, bytes] : row["warm_bytes"].items()) {
      EXPECT_GE(bytes.get<std::int64_t>(), 0) << partitions << " warm_bytes " << node << ": " << out;
    }
  }
  // CPU per record: the brokers' (from /proc) and the publisher's (its
  // process), both spent; together no more cores than the machine has
  // (plus the clock ticks' granularity).
  const double online = static_cast<double>(sysconf(_SC_NPROCESSORS_ONLN));
  for (const auto& [partitions, row] : rows) {
    EXPECT_GT(row.value("broker_cpu_us_per_msg", -1.0), 0.0) << partitions << ": " << out;
    EXPECT_GT(row.value("publisher_cpu_us_per_msg", -1.0), 0.0) << partitions << ": " << out;
    const double busy = row.value("cores_busy", -1.0);
    EXPECT_GT(busy, 0.0) << partitions << ": " << out;
    EXPECT_LE(busy, online * 1.1 + 0.2) << partitions << ": " << out;
  }
  // The publisher's rings: one per partition, 64 KiB to start, each at
  // most the row's ring_bytes (they grow only when full).
  for (const auto& [partitions, row] : rows) {
    const std::int64_t rings = row.value("publisher_ring_bytes", std::int64_t{-1});
    EXPECT_GE(rings, std::int64_t{partitions} * (64 << 10)) << partitions << ": " << out;
    EXPECT_LE(rings, std::int64_t{partitions} * row.value("ring_bytes", std::int64_t{0}))
        << partitions << ": " << out;
  }
  // Segment memory follows what each node retains (issue 17), not its
  // replicas x slots x segment size: every replica that took records holds
  // at least one segment (64 KiB and up: sized by need), and at most twice
  // its retained bytes plus a segment each; far below what all slots would
  // take.
  const std::int64_t segment = rows[12].value("segment_bytes", std::int64_t{0});
  ASSERT_GT(segment, 0) << out;
  for (const auto& [partitions, row] : rows) {
    for (const char* field : {"segment_memory_bytes", "retained_bytes", "all_slots_bytes"}) {
      ASSERT_TRUE(row.contains(field) && row[field].size() == 3u)
          << partitions << " " << field << ": " << out;
    }
    for (const auto& [node, held] : row["segment_memory_bytes"].items()) {
      const std::int64_t seg = held.get<std::int64_t>();
      const std::int64_t retained = row["retained_bytes"][node].get<std::int64_t>();
      const std::int64_t all_slots = row["all_slots_bytes"][node].get<std::int64_t>();
      const std::int64_t replicas = all_slots / (8 * segment);  // each replica's 8 slots
      EXPECT_EQ(replicas, partitions) << node << ": chains of 3 on 3 nodes put a replica of each here";
      EXPECT_EQ(seg % (64 << 10), 0) << node << ": whole segments, powers of two from 64 KiB";
      EXPECT_GE(seg, replicas * (64 << 10)) << partitions << " " << node << ": every replica took records";
      EXPECT_LE(seg, 2 * retained + replicas * segment) << partitions << " " << node << ": " << out;
      EXPECT_LT(seg, all_slots) << partitions << " " << node;
      EXPECT_GE(row["registered_bytes"][node].get<std::int64_t>(), seg) << partitions << " " << node;
    }
  }
}

TEST(PartitionsBench, HeadAcksOnlyOpensNoCommitWatch) {
  std::string out;
  int status = 0;
  const std::string log = "partitions-bench-head-acks.log";
  (void)test::run_bench_json(
      "--partitions 4 --nodes 3 --seconds 0.3 --cold --head-acks-only --dir partitions-bench-head-acks", log,
      &status, &out);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out << "; see " << log;
  const auto j = nlohmann::json::parse(out.substr(0, out.find('\n')), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out << "; see " << log;
  EXPECT_EQ(j.value("tail_acks", true), false) << out;
  EXPECT_GT(j.value("msgs_per_s", 0.0), 0.0) << out;
  ASSERT_TRUE(j.contains("connections_per_node") && j["connections_per_node"].size() == 3u) << out;
  EXPECT_GE(connections_of(j), 4 * 2 * 2) << "chain links missing: " << out;
  EXPECT_LE(connections_of(j), 4 * 2 * 2 + 4) << "more than links and publisher sessions: " << out;
}

// The default run (latency rows, then the throughput rows after warming
// the throughput log up), small: two 4 MiB slots so that the warm-up is
// steady after its two rounds. The warm-up once published to partitions
// past the channel's one and the run ended with `publish: invalid_argument`
// and no throughput row.
TEST(ThroughputBench, AWarmedUpRunReportsItsThroughputRow) {
  std::string out;
  int status = 0;
  const std::string log = "throughput-bench.log";
  (void)test::run_bench_json(
      "--sizes 1024 --latency-sizes 64 --iters 200 --warmup 50 --seconds 0.3 --no-floor --no-fabric-bw "
      "--log-slots 2 --segment-bytes 4194304 --dir throughput-bench",
      log, &status, &out);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out << "; see " << log;
  int throughput_rows = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "not JSON: " << line << "; see " << log;
    if (j.value("mode", "") != "throughput") continue;
    ++throughput_rows;
    EXPECT_EQ(j.value("bytes", 0), 1024) << line;
    EXPECT_GT(j.value("msgs_per_s", 0.0), 0.0) << line;
    EXPECT_GT(j.value("samples", 0), 0) << line;
  }
  EXPECT_EQ(throughput_rows, 1) << out << "; see " << log;
  std::ifstream err(log);
  const std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("warm-up of the throughput log"), std::string::npos) << text;
}

}  // namespace
}  // namespace catena
