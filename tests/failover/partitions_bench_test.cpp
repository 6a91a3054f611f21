// `catena bench --partitions` with small numbers, so that the command cannot
// rot: a 1-partition and a 12-partition channel, each on 3 fresh brokers,
// take records on every partition from one publisher; the 12 partitions'
// routes give each broker 4 heads and 4 tails (issue 17: placement spreads
// the roles), and every broker reports its resident and registered memory,
// the registered memory growing with the partitions it holds; the
// publisher's rings come to 64 KiB to ring_bytes per partition.
#include <algorithm>
#include <gtest/gtest.h>
#include <map>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <vector>

#include "bench_run.hpp"

namespace catena {
namespace {

TEST(PartitionsBench, TwelvePartitionsOnThreeNodesCommitSpreadTheirRolesAndRegisterMoreMemory) {
  std::string out;
  int status = 0;
  const std::string log = "partitions-bench.log";
  (void)test::run_bench_json("--partitions 1,12 --nodes 3 --seconds 0.5 --dir partitions-bench", log, &status,
                             &out);
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
  // The publisher's rings: one per partition, 64 KiB to start, each at
  // most the row's ring_bytes (they grow only when full).
  for (const auto& [partitions, row] : rows) {
    const std::int64_t rings = row.value("publisher_ring_bytes", std::int64_t{-1});
    EXPECT_GE(rings, std::int64_t{partitions} * (64 << 10)) << partitions << ": " << out;
    EXPECT_LE(rings, std::int64_t{partitions} * row.value("ring_bytes", std::int64_t{0}))
        << partitions << ": " << out;
  }
  // Every node holds one replica of the 1-partition channel and twelve of
  // the other (chains of 3 on 3 nodes), each with the same segment slots:
  // registered memory grows by at least eleven replicas' segments. Node ids
  // differ between the two clusters, so compare the nodes in sorted order.
  const std::int64_t segment = rows[12].value("segment_bytes", std::int64_t{0});
  ASSERT_EQ(segment, rows[1].value("segment_bytes", std::int64_t{-1})) << out;
  std::vector<std::int64_t> one, twelve;
  for (const auto& [node, bytes] : rows[1]["registered_bytes"].items())
    one.push_back(bytes.get<std::int64_t>());
  for (const auto& [node, bytes] : rows[12]["registered_bytes"].items())
    twelve.push_back(bytes.get<std::int64_t>());
  ASSERT_EQ(one.size(), twelve.size());
  std::sort(one.begin(), one.end());
  std::sort(twelve.begin(), twelve.end());
  for (std::size_t i = 0; i < one.size(); ++i) {
    EXPECT_GE(twelve[i], one[i] + 11 * segment) << "node " << i << ": " << out;
  }
}

}  // namespace
}  // namespace catena
