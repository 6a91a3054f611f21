// A write-ahead log of checksummed, numbered records in one file.
//
// File: an 8-byte magic "CATENAWL", a u32 format version, then records
//   u32 magic | u32 length | u64 lsn | u32 crc32c(length, lsn, payload) | payload
// all little-endian. Each append is written with one write() and made durable
// with fdatasync() before append() returns.
//
// Reading tolerates a torn tail: if the last record is incomplete or fails
// its checksum and no intact record follows it, the log ends at the last
// good record (WalContents::dropped_bytes says how much was cut). A bad
// record followed by an intact one is corruption in the middle of the log;
// read_wal() refuses it rather than silently forgetting acknowledged state.
//
// Thread: a WalWriter is used by one thread at a time (the metadata store
// serialises its callers).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <catena/control/result.hpp>

namespace catena::control {

struct WalRecord {
  std::uint64_t lsn = 0;
  std::string payload;
};

struct WalContents {
  std::vector<WalRecord> records;
  std::uint64_t valid_bytes = 0;    // file offset just past the last good record
  std::uint64_t dropped_bytes = 0;  // torn tail discarded after valid_bytes
};

inline constexpr std::uint32_t kWalMaxRecordBytes = 64u << 20;

// Reads the log at path. A missing file reads as empty.
[[nodiscard]] Result<WalContents> read_wal(const std::filesystem::path& path);

class WalWriter {
 public:
  // Opens path for appending after valid_bytes (from read_wal; the torn tail
  // beyond it is truncated away), or creates a fresh log if valid_bytes is 0.
  [[nodiscard]] static Result<WalWriter> open(const std::filesystem::path& path, std::uint64_t valid_bytes);

  WalWriter(WalWriter&& other) noexcept;
  WalWriter& operator=(WalWriter&& other) noexcept;
  WalWriter(const WalWriter&) = delete;
  WalWriter& operator=(const WalWriter&) = delete;
  ~WalWriter();

  // Appends one record and fsyncs it. On failure the file is cut back to
  // where it was, so a failed append never leaves garbage before the next.
  [[nodiscard]] Result<void> append(std::uint64_t lsn, std::string_view payload);

  // Drops every record (after a snapshot made them redundant).
  [[nodiscard]] Result<void> reset();

  [[nodiscard]] std::uint64_t size() const noexcept { return end_; }

 private:
  WalWriter(int fd, std::uint64_t end, std::filesystem::path path)
      : fd_(fd), end_(end), path_(std::move(path)) {}

  int fd_ = -1;
  std::uint64_t end_ = 0;
  std::filesystem::path path_;
  bool broken_ = false;  // a failed append could not be undone
};

// Durability helpers shared with the snapshot writer.
[[nodiscard]] Result<void> fsync_directory(const std::filesystem::path& dir);
[[nodiscard]] Result<void> write_file_durably(const std::filesystem::path& path, std::string_view data);

}  // namespace catena::control
