// Small helpers shared by the control-plane tests.
#pragma once

#include <stdlib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <catena/control/idl/catena_types.h>

namespace catena::control::testing {

// A fresh directory under TMPDIR, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/catena-control-XXXXXX";
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::vector<std::string> chain_of(const idl::PartitionRoute& route) {
  std::vector<std::string> ids;
  for (const auto& r : route.replicas) ids.push_back(r.node_id);
  return ids;
}

inline std::vector<std::string> joining_of(const idl::PartitionRoute& route) {
  std::vector<std::string> ids;
  for (const auto& r : route.joining) ids.push_back(r.node_id);
  return ids;
}

inline idl::ChannelConfig channel_config(const std::string& name, int partitions = 1, int replication = 3) {
  idl::ChannelConfig c;
  c.__set_name(name);
  c.__set_partitions(partitions);
  c.__set_replication(replication);
  c.__set_segment_bytes(1 << 20);
  c.__set_ttl_ms(60000);
  return c;
}

// Polls pred until it holds or timeout passes; whether it held at the end.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10),
                std::chrono::milliseconds poll = std::chrono::milliseconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(poll);
  }
  return pred();
}

}  // namespace catena::control::testing
