// `catena bench --move` with tiny numbers, so that the command cannot rot:
// it starts its own cluster, moves a partition under traffic, and must
// report every move, nothing lost or duplicated, and the bytes each move
// sent at metadata size with no record copied, growing by at most a
// sealed range per node told;
// and a drain that copied the retained history to its replacement.
#include <cstdio>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/wait.h>

#include "bench_run.hpp"

namespace catena {
namespace {

TEST(MoveBench, TwoMovesUnderTrafficReportEveryMoveAndLoseNothing) {
  std::string out;
  int status = 0;
  const auto j =
      test::run_bench_json("--move --moves 2 --retained-mib 2 --segment-bytes 4194304 --dir move-bench-test",
                           "move-bench-test.log", &status, &out);
  ASSERT_FALSE(out.empty()) << "no output; see move-bench-test.log";
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_EQ(j.value("moves", -1), 2) << out;
  EXPECT_EQ(j.value("lost", -1), 0) << out;
  EXPECT_EQ(j.value("duplicated", -1), 0) << out;
  EXPECT_EQ(j.value("other_violations", -1), 0) << out;
  EXPECT_GT(j.value("acked", 0), 0) << out;
  EXPECT_GT(j.value("retained_bytes", 0), 2 << 20) << out;
  EXPECT_GT(j.value("bytes_copied_per_move", 0.0), 0.0) << out;
  EXPECT_LT(j.value("bytes_copied_per_move_max", 1e9), 16384.0) << out;
  ASSERT_TRUE(j.contains("per_move")) << out;
  for (const auto& m : j["per_move"]) EXPECT_EQ(m.value("data_bytes", -1), 0) << out;
  // Each node is told only its own sealed ranges, and nodes of older ranges
  // are not told again: the second move's pushes carry at most one more
  // range (about 250 bytes) to each of the first chain's three nodes.
  ASSERT_EQ(j["per_move"].size(), 2u) << out;
  EXPECT_LE(j["per_move"][1].value("assignment_bytes", 1 << 30),
            j["per_move"][0].value("assignment_bytes", 0) + 3 * 400)
      << out;
  // The drain before the moves copied the history to the drained node's
  // replacement: at least the 2 MiB retained.
  EXPECT_GT(j.value("bytes_copied_per_drain", 0), 2 << 20) << out;
  EXPECT_GT(j.value("drain_ms", 0.0), 0.0) << out;
}

}  // namespace
}  // namespace catena
