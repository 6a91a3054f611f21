// What the simulation's checker reads from outside the chain: a replica's
// log record by record, and a scratch directory for the controller's
// metadata.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <catena/chain/partition_log.hpp>

namespace catena::sim {

// The controller's metadata, in memory-backed storage where there is some
// (its WAL fsyncs every change).
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// One record as a replica's log holds it.
struct Stored {
  std::uint64_t id = 0;
  std::uint64_t producer_id = 0;
  std::uint64_t sequence = 0;
};

// Every record the log holds, committed or not, by walking the frames each
// segment validated; what is wrong with it goes to *errors.
std::map<std::uint64_t, Stored> read_log(const chain::PartitionLog& log, std::vector<std::string>* errors);

}  // namespace catena::sim
