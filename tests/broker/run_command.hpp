// A shell command run to completion, for the tests that drive the daemons
// and the CLI as processes: its exit status and what it printed (stdout and
// stderr together).
#pragma once

#include <cstdio>
#include <string>
#include <sys/wait.h>

namespace catena::test {

struct Outcome {
  int exit_code = -1;
  std::string output;
};

inline Outcome run(const std::string& command) {
  Outcome r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) r.output += buf;
  const int status = pclose(p);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

}  // namespace catena::test
