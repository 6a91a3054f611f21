// Small helpers shared by the control-plane tests.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>
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

}  // namespace catena::control::testing
