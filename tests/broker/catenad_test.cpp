// catenad as a process: a verbs node must not start on a fabric address no
// RDMA device serves (it would register, and every connect to it would then
// fail). On the host there is no RDMA device, so the device is missing; in
// the soft-RoCE VM (CATENA_PROVIDER=verbs:rxe0) the device exists and
// 127.0.0.1 is refused as loopback.
#include <catena/broker/local_cluster.hpp>

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "../test_env.hpp"

namespace catena {
namespace {

struct Outcome {
  int exit_code = -1;
  std::string output;
};

Outcome run(const std::string& command) {
  Outcome r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) r.output += buf;
  const int status = pclose(p);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
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

}  // namespace
}  // namespace catena
