// catenad as a process: a verbs node must not start on a fabric address no
// RDMA device serves (it would register, and every connect to it would then
// fail). On the host there is no RDMA device, so the device is missing; in
// the soft-RoCE VM (CATENA_PROVIDER=verbs:rxe0) the device exists and
// 127.0.0.1 is refused as loopback. And its configuration is as strict as
// the controller's.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <gtest/gtest.h>
#include <string>
#include <sys/wait.h>

#include <catena/broker/broker.hpp>
#include <catena/broker/local_cluster.hpp>

#include "../test_env.hpp"
#include "run_command.hpp"

namespace catena {
namespace {

using test::Outcome;
using test::run;

// Without --segment-memory-mb a node's segments may take half the machine,
// or 3/4 of a huge-page arena (soft:huge=<MiB>): the rest of the arena is
// for publisher rings and link buffers, and a full arena is then a spent
// budget the node logs and counts, not a failed allocation.
TEST(Catenad, TheDefaultSegmentBudgetLeavesRoomInAHugePageArena) {
  EXPECT_EQ(broker::default_segment_memory_bytes("soft:shm,huge=2048"), std::uint64_t{1536} << 20);
  EXPECT_EQ(broker::default_segment_memory_bytes("fault:soft:huge=64"), std::uint64_t{48} << 20);
  const std::uint64_t half = static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                             static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE)) / 2;
  EXPECT_EQ(broker::default_segment_memory_bytes("soft"), half);
  EXPECT_EQ(broker::default_segment_memory_bytes("soft:shm"), half);
  EXPECT_EQ(broker::default_segment_memory_bytes("verbs:rxe0"), half);
}

TEST(Catenad, RefusesAVerbsListenAddressNoDeviceServesWithExitCode2) {
  const std::string spec = test::provider_spec();
  const bool on_device = spec.starts_with("verbs:");
  const std::string provider = on_device ? spec : "verbs:nosuchdev9";
  // Port 1 on loopback: nothing answers, so a catenad that got past the check
  // would keep retrying its registration instead of exiting.
  Outcome r = run("timeout 20 " + self_dir() + "/catenad --provider " + provider +
                  " --fabric-listen 127.0.0.1:0 --controller 127.0.0.1:1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("catenad: fabric listen address:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(on_device ? "loopback" : "no RDMA device 'nosuchdev9'"), std::string::npos)
      << r.output;
}

// catenad's configuration is as strict as the controller's (the same reader):
// an unknown key or a bad value, in the file or in a flag, is refused naming
// the key (and the file) with exit code 2, before anything starts.
std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = "/tmp/catenad-test-" + std::to_string(getpid()) + "-" + name;
  std::ofstream(path) << text;
  return path;
}

std::string catenad() {
  return self_dir() + "/catenad";
}

TEST(CatenadConfig, RefusesAnUnknownKeyNamingItAndTheFile) {
  const auto file = write_file("typo.toml", "[node]\nzone = 'z1'\n[storage]\nsegment_slot = 4\n");
  Outcome r = run("timeout 20 " + catenad() + " --config " + file + " --controller 127.0.0.1:1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(file + ": unknown key 'storage.segment_slot'"), std::string::npos) << r.output;
  std::remove(file.c_str());
}

TEST(CatenadConfig, RefusesBadValuesInTheFile) {
  const auto slots = write_file("slots.toml", "[storage]\nsegment_slots = 64\n");
  Outcome r = run("timeout 20 " + catenad() + " --config " + slots + " --controller 127.0.0.1:1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(slots + ": key 'storage.segment_slots': must be in 2..32, got 64"),
            std::string::npos)
      << r.output;
  const auto type = write_file("type.toml", "[storage]\ngrace_ms = '5s'\n");
  r = run("timeout 20 " + catenad() + " --config " + type + " --controller 127.0.0.1:1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("key 'storage.grace_ms': expected an integer"), std::string::npos) << r.output;
  const auto id = write_file("id.toml", "[node]\nid = '" + std::string(129, 'n') + "'\n");
  r = run("timeout 20 " + catenad() + " --config " + id + " --controller 127.0.0.1:1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("node id must be 1..128 characters"), std::string::npos) << r.output;
  for (const auto& f : {slots, type, id}) std::remove(f.c_str());
}

TEST(CatenadConfig, RefusesABadLogLevelInsteadOfLoggingNothing) {
  Outcome r = run("timeout 20 " + catenad() + " --log-level loud --controller 127.0.0.1:1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("key 'log.level': 'loud' is not one of trace, debug, info"), std::string::npos)
      << r.output;
  r = run("timeout 20 " + catenad() + " --segment-slots lots --controller 127.0.0.1:1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

TEST(CatenadConfig, PrintConfigRoundTrips) {
  const auto file = write_file("base.toml", "[node]\nzone = 'z9'\n[log]\nlevel = 'warn'\n");
  Outcome first = run(catenad() + " --config " + file + " --segment-slots 4 --node-id n-1 --print-config");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  for (const char* line : {"id = 'n-1'", "zone = 'z9'", "segment_slots = 4", "level = 'warn'"}) {
    EXPECT_NE(first.output.find(line), std::string::npos) << line << " in\n" << first.output;
  }
  const auto printed = write_file("printed.toml", first.output);
  Outcome second = run(catenad() + " --config " + printed + " --print-config");
  EXPECT_EQ(second.exit_code, 0) << second.output;
  EXPECT_EQ(second.output, first.output);
  std::remove(file.c_str());
  std::remove(printed.c_str());
}

TEST(CatenadConfig, JoinRebalanceIsAFlagAndANodeKey) {
  Outcome flag = run(catenad() + " --join-rebalance --print-config");
  ASSERT_EQ(flag.exit_code, 0) << flag.output;
  EXPECT_NE(flag.output.find("join_rebalance = true"), std::string::npos) << flag.output;
  const auto file = write_file("join.toml", "[node]\njoin_rebalance = true\n");
  Outcome key = run(catenad() + " --config " + file + " --print-config");
  ASSERT_EQ(key.exit_code, 0) << key.output;
  EXPECT_EQ(key.output, flag.output);
  const auto bad = write_file("join-bad.toml", "[node]\njoin_rebalance = 'yes'\n");
  Outcome refused = run("timeout 20 " + catenad() + " --config " + bad + " --controller 127.0.0.1:1");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("node.join_rebalance"), std::string::npos) << refused.output;
  std::remove(file.c_str());
  std::remove(bad.c_str());
}

}  // namespace
}  // namespace catena
