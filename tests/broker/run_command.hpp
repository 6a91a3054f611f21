// A shell command run to completion, for the tests that drive the daemons
// and the CLI as processes: its exit status and what it printed (stdout and
// stderr together, or apart with run_apart).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>

namespace catena::test {

struct Outcome {
  int exit_code = -1;
  std::string output;
  std::string errors;  // run_apart: stderr (run: empty, it is in output)
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

// The command with its stdout in output and its stderr in errors, for
// checking that a document on stdout is all there is.
inline Outcome run_apart(const std::string& command) {
  char path[] = "/tmp/catena-test-stderr-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return {};
  close(fd);
  Outcome r;
  FILE* p = popen((command + " 2>" + path).c_str(), "r");
  if (p != nullptr) {
    char buf[512];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
    const int status = pclose(p);
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  }
  std::ifstream in(path);
  std::ostringstream err;
  err << in.rdbuf();
  r.errors = err.str();
  std::remove(path);
  return r;
}

}  // namespace catena::test
