#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <iterator>
#include <optional>
#include <string_view>
#include <sys/stat.h>

#include <catena/control/wal.hpp>

#include "crc32c.hpp"

namespace catena::control {
namespace {

constexpr std::string_view kFileMagic = "CATENAWL";
constexpr std::uint32_t kFormatVersion = 1;
constexpr std::size_t kFileHeaderBytes = 12;
constexpr std::uint32_t kRecordMagic = 0x52574143u;  // "CAWR"
constexpr std::size_t kRecordHeaderBytes = 20;

ControlError io_error(std::string_view what, const std::filesystem::path& path, int err) {
  return make_error(idl::ErrorCode::INTERNAL,
                    fmt::format("{} {}: {}", what, path.string(), std::strerror(err)));
}

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFFu));
}
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFFu));
}
std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
std::uint64_t get_u64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::uint32_t record_crc(std::uint32_t length, std::uint64_t lsn, std::string_view payload) {
  std::string head;
  put_u32(head, length);
  put_u64(head, lsn);
  return detail::crc32c(detail::crc32c(0, head.data(), head.size()), payload.data(), payload.size());
}

std::string file_header() {
  std::string h(kFileMagic);
  put_u32(h, kFormatVersion);
  return h;
}

// An intact record at off, or nullopt.
std::optional<WalRecord> parse_record(std::string_view data, std::size_t off, std::size_t* next) {
  if (data.size() - off < kRecordHeaderBytes) return std::nullopt;
  const char* p = data.data() + off;
  if (get_u32(p) != kRecordMagic) return std::nullopt;
  const std::uint32_t length = get_u32(p + 4);
  const std::uint64_t lsn = get_u64(p + 8);
  const std::uint32_t crc = get_u32(p + 16);
  if (length > kWalMaxRecordBytes || data.size() - off - kRecordHeaderBytes < length) return std::nullopt;
  const std::string_view payload = data.substr(off + kRecordHeaderBytes, length);
  if (record_crc(length, lsn, payload) != crc) return std::nullopt;
  *next = off + kRecordHeaderBytes + length;
  return WalRecord{lsn, std::string(payload)};
}

Result<void> write_all(int fd, std::string_view data, const std::filesystem::path& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("write", path, errno);
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

}  // namespace

Result<WalContents> read_wal(const std::filesystem::path& path) {
  WalContents out;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!std::filesystem::exists(path)) return out;
    return io_error("open", path, errno);
  }
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() < kFileHeaderBytes) {
    // Crashed while creating the file: nothing was ever acknowledged from it.
    out.dropped_bytes = data.size();
    return out;
  }
  if (std::string_view(data).substr(0, kFileHeaderBytes) != file_header()) {
    return make_error(idl::ErrorCode::INTERNAL,
                      fmt::format("{} is not a Catena WAL (bad header)", path.string()));
  }
  std::size_t off = kFileHeaderBytes;
  while (off < data.size()) {
    std::size_t next = 0;
    auto rec = parse_record(data, off, &next);
    if (!rec) break;
    if (!out.records.empty() && rec->lsn != out.records.back().lsn + 1) {
      return make_error(idl::ErrorCode::INTERNAL,
                        fmt::format("{}: record at offset {} has lsn {} after lsn {}", path.string(), off,
                                    rec->lsn, out.records.back().lsn));
    }
    out.records.push_back(std::move(*rec));
    off = next;
  }
  out.valid_bytes = off;
  out.dropped_bytes = data.size() - off;
  if (out.dropped_bytes > 0) {
    // Torn tail or damage in the middle? Look for any intact record after the bad one.
    const std::string magic = [] {
      std::string m;
      put_u32(m, kRecordMagic);
      return m;
    }();
    for (std::size_t pos = data.find(magic, off + 1); pos != std::string::npos;
         pos = data.find(magic, pos + 1)) {
      std::size_t next = 0;
      if (parse_record(data, pos, &next)) {
        return make_error(
            idl::ErrorCode::INTERNAL,
            fmt::format("{}: corrupt record at offset {} followed by an intact record at offset "
                        "{}; refusing to drop acknowledged metadata",
                        path.string(), off, pos));
      }
    }
  }
  return out;
}

Result<WalWriter> WalWriter::open(const std::filesystem::path& path, std::uint64_t valid_bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("open", path, errno);
  WalWriter w(fd, 0, path);
  if (valid_bytes < kFileHeaderBytes) {
    if (::ftruncate(fd, 0) != 0) return io_error("truncate", path, errno);
    if (::lseek(fd, 0, SEEK_SET) < 0) return io_error("seek", path, errno);
    if (auto r = write_all(fd, file_header(), path); !r) return r.error();
    w.end_ = kFileHeaderBytes;
  } else {
    // Cut a torn tail off so new records follow the last good one directly.
    if (::ftruncate(fd, static_cast<off_t>(valid_bytes)) != 0) return io_error("truncate", path, errno);
    if (::lseek(fd, static_cast<off_t>(valid_bytes), SEEK_SET) < 0) return io_error("seek", path, errno);
    w.end_ = valid_bytes;
  }
  if (::fsync(fd) != 0) return io_error("fsync", path, errno);
  if (auto r = fsync_directory(path.parent_path()); !r) return r.error();
  return w;
}

WalWriter::WalWriter(WalWriter&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      end_(other.end_),
      path_(std::move(other.path_)),
      broken_(other.broken_) {}

WalWriter& WalWriter::operator=(WalWriter&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    end_ = other.end_;
    path_ = std::move(other.path_);
    broken_ = other.broken_;
  }
  return *this;
}

WalWriter::~WalWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Result<void> WalWriter::append(std::uint64_t lsn, std::string_view payload) {
  if (broken_) {
    return make_error(idl::ErrorCode::INTERNAL, "WAL is unusable after an earlier write failure");
  }
  if (payload.size() > kWalMaxRecordBytes) {
    return make_error(idl::ErrorCode::INTERNAL,
                      fmt::format("WAL record of {} bytes too large", payload.size()));
  }
  const auto length = static_cast<std::uint32_t>(payload.size());
  std::string buf;
  buf.reserve(kRecordHeaderBytes + payload.size());
  put_u32(buf, kRecordMagic);
  put_u32(buf, length);
  put_u64(buf, lsn);
  put_u32(buf, record_crc(length, lsn, payload));
  buf.append(payload);
  auto r = write_all(fd_, buf, path_);
  if (r && ::fdatasync(fd_) != 0) r = io_error("fdatasync", path_, errno);
  if (!r) {
    if (::ftruncate(fd_, static_cast<off_t>(end_)) != 0 ||
        ::lseek(fd_, static_cast<off_t>(end_), SEEK_SET) < 0) {
      broken_ = true;
    }
    return r;
  }
  end_ += buf.size();
  return {};
}

Result<void> WalWriter::reset() {
  if (::ftruncate(fd_, static_cast<off_t>(kFileHeaderBytes)) != 0 ||
      ::lseek(fd_, static_cast<off_t>(kFileHeaderBytes), SEEK_SET) < 0) {
    broken_ = true;
    return io_error("truncate", path_, errno);
  }
  if (::fsync(fd_) != 0) return io_error("fsync", path_, errno);
  end_ = kFileHeaderBytes;
  return {};
}

Result<void> fsync_directory(const std::filesystem::path& dir) {
  const auto target = dir.empty() ? std::filesystem::path(".") : dir;
  const int fd = ::open(target.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error("open directory", target, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return io_error("fsync directory", target, err);
  return {};
}

Result<void> write_file_durably(const std::filesystem::path& path, std::string_view data) {
  const auto tmp = std::filesystem::path(path).concat(".tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("open", tmp, errno);
  auto r = write_all(fd, data, tmp);
  if (r && ::fsync(fd) != 0) r = io_error("fsync", tmp, errno);
  ::close(fd);
  if (!r) return r;
  if (::rename(tmp.c_str(), path.c_str()) != 0) return io_error("rename", tmp, errno);
  return fsync_directory(path.parent_path());
}

}  // namespace catena::control
