// `catena bench --partitions` with small numbers, so that the command cannot
// rot: a 12-partition channel on 3 brokers takes records on every partition
// from one publisher, and its routes give each broker 4 heads and 4 tails
// (issue 17: placement spreads the roles).
#include <gtest/gtest.h>
#include <string>
#include <sys/wait.h>

#include "bench_run.hpp"

namespace catena {
namespace {

TEST(PartitionsBench, TwelvePartitionsOnThreeNodesCommitAndSpreadTheirRoles) {
  std::string out;
  int status = 0;
  const std::string log = "partitions-bench.log";
  const auto j = test::run_bench_json("--partitions 12 --nodes 3 --seconds 0.5 --dir partitions-bench", log,
                                      &status, &out);
  ASSERT_FALSE(j.is_discarded()) << "no JSON line: " << out << "; see " << log;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_EQ(j.value("partitions", -1), 12) << out;
  EXPECT_EQ(j.value("nodes", -1), 3) << out;
  EXPECT_GT(j.value("msgs_per_s", 0.0), 0.0) << out;
  ASSERT_TRUE(j.contains("heads_per_node") && j.contains("tails_per_node")) << out;
  EXPECT_EQ(j["heads_per_node"].size(), 3u) << out;
  for (const auto& [node, n] : j["heads_per_node"].items()) EXPECT_EQ(n.get<int>(), 4) << node << ": " << out;
  for (const auto& [node, n] : j["tails_per_node"].items()) EXPECT_EQ(n.get<int>(), 4) << node << ": " << out;
}

}  // namespace
}  // namespace catena
