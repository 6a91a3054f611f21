// `catena bench --recovery` with a small partition, so that the command
// cannot rot and its claim holds: a replica link broken five times is
// rebuilt in its partition without another partition noticing, a broker killed with SIGKILL and started
// again with its kept memory is back in its chain having copied a small part
// of what a restart without kept memory copies, one that does not come
// back is replaced from its own zone, and none of them loses or duplicates
// a record; a channel mirrored to a second cluster fails over when the whole
// source cluster is killed, losing at most the mirror's lag.
#include <gtest/gtest.h>
#include <map>
#include <sstream>
#include <string>
#include <sys/wait.h>

#include "bench_run.hpp"

namespace catena {
namespace {

TEST(RecoveryBench, ARestartWithKeptMemoryCopiesLittleAndLosesNothing) {
  std::string out;
  int status = 0;
  (void)test::run_bench_json("--recovery --recovery-mib 16 --dir recovery-bench", "recovery-bench.log",
                             &status, &out);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out << "; see recovery-bench.log";
  std::map<std::string, nlohmann::json> levels;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("level")) levels[j["level"].get<std::string>()] = j;
  }
  for (const char* level : {"partition", "process", "full-copy", "zone", "datacenter"}) {
    ASSERT_EQ(levels.count(level), 1u) << "no line for level " << level << ": " << out;
  }
  for (const auto& [level, j] : levels) {
    EXPECT_TRUE(j.value("ok", false)) << level << ": " << out;
    if (level == "datacenter") {
      // Asynchronous replication: at most the recovery point is lost.
      EXPECT_LE(j.value("lost", -1), j.value("rpo_records", -2)) << out;
      EXPECT_EQ(j.value("lost_beyond_rpo", -1), 0) << out;
    } else {
      EXPECT_EQ(j.value("lost", -1), 0) << level;
    }
    EXPECT_EQ(j.value("duplicated", -1), 0) << level;
    EXPECT_EQ(j.value("other_violations", -1), 0) << level;
    EXPECT_GT(j.value("bytes_copied", 0), 0) << level;
  }
  const auto& kept = levels["process"];
  const auto& full = levels["full-copy"];
  EXPECT_GT(kept.value("recovered_records", 0), 0) << out;
  EXPECT_EQ(full.value("recovered_records", -1), 0) << out;
  EXPECT_GE(full.value("bytes_copied", 0), 16 << 20) << "a full copy sends the whole partition";
  EXPECT_LT(kept.value("copy_vs_full_copy", 1.0), 0.5) << out;
  // A broken link is rebuilt in its partition: five breaks, none seen by
  // another partition.
  const auto& part = levels["partition"];
  EXPECT_EQ(part.value("breaks", -1), 5) << out;
  EXPECT_EQ(part.value("others_unlinked", -1), 0) << out;
  // A broker that does not come back is replaced from its own zone.
  EXPECT_TRUE(levels["zone"].value("same_zone", false)) << out;
}

}  // namespace
}  // namespace catena
