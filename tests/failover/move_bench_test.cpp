// `catena bench --move` with tiny numbers, so that the command cannot rot:
// it starts its own cluster, moves a partition under traffic, and must
// report every move, nothing lost or duplicated, and the bytes each move
// sent at metadata size with no record copied.
#include <cstdio>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/wait.h>

#include <catena/broker/local_cluster.hpp>

namespace catena {
namespace {

TEST(MoveBench, TwoMovesUnderTrafficReportEveryMoveAndLoseNothing) {
  const std::string cmd = self_dir() +
                          "/catena bench --move --moves 2 --retained-mib 2 --segment-bytes 4194304 --json "
                          "--dir move-bench-test 2>move-bench-test.log";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  const int status = ::pclose(p);
  ASSERT_FALSE(out.empty()) << "no output; see move-bench-test.log";
  const auto j = nlohmann::json::parse(out, nullptr, false);  // stdout carries the one JSON line
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
}

}  // namespace
}  // namespace catena
