// Runs `catena bench ... --json` (a sibling of the test binary) and parses
// the one JSON line it prints on stdout; stderr goes to `log`.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include <catena/broker/local_cluster.hpp>

namespace catena::test {

// `*status`: pclose's (WIFEXITED...); a discarded json if nothing parsed.
inline nlohmann::json run_bench_json(const std::string& args, const std::string& log, int* status,
                                     std::string* out) {
  const std::string cmd = self_dir() + "/catena bench " + args + " --json 2>" + log;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return nlohmann::json::value_t::discarded;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p) != nullptr) *out += buf;
  *status = ::pclose(p);
  return nlohmann::json::parse(*out, nullptr, false);
}

}  // namespace catena::test
