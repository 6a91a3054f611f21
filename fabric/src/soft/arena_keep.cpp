// The soft arena's kept mode (arena.hpp): the arena file in a keep directory
// and the directory of named ranges a restarted process finds again.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <vector>

#include "soft/arena.hpp"

namespace catena::fabric::soft {
namespace {

std::string keep_errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

std::uint64_t kept_round_up(std::uint64_t bytes) {
  return (bytes + kPageSize - 1) & ~(kPageSize - 1);
}

bool valid_kept_name(const std::string& name) {
  if (name.empty() || name.size() > 200) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-' || c == '#';
  });
}

}  // namespace

Result<void> Arena::open_kept_file(std::uint64_t size) {
  std::error_code ec;
  std::filesystem::create_directories(keep_dir_, ec);
  if (ec) {
    return make_error(Errc::io_error, "cannot create the keep directory " + keep_dir_ + ": " + ec.message());
  }
  const std::string path = keep_dir_ + "/arena";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return make_error(Errc::io_error, keep_errno_text("cannot open " + path));
  }
  id_.memfd = fd;  // closed by the destructor, which also drops the lock
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    return make_error(Errc::refused, "the keep directory " + keep_dir_ + " is in use by another process");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    return make_error(Errc::io_error, keep_errno_text("cannot stat " + path));
  }
  auto have = static_cast<std::uint64_t>(st.st_size);
  if (have == 0) {
    // New: nothing the directory may name is in it.
    std::filesystem::remove(keep_dir_ + "/regions", ec);
    for (; size >= kMinArenaSize; size /= 2) {
      if (ftruncate(fd, static_cast<off_t>(size)) == 0) break;
    }
    if (size < kMinArenaSize) {
      return make_error(Errc::resource_exhausted, keep_errno_text("cannot size " + path));
    }
    have = size;
  } else if (have < kMinArenaSize || have % kPageSize != 0) {
    return make_error(Errc::invalid_argument, path + " is not a Catena arena (" + std::to_string(have) +
                                                  " bytes); remove the keep directory to start empty");
  }
  void* base = mmap(nullptr, have, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (base == MAP_FAILED) {
    return make_error(Errc::resource_exhausted, keep_errno_text("cannot map " + path));
  }
  view_.base = static_cast<std::byte*>(base);
  view_.size = have;
  return {};
}

Result<void> Arena::load_kept_directory() {
  const std::string path = keep_dir_ + "/regions";
  std::ifstream in(path);
  std::vector<std::pair<std::string, Named>> ranges;
  std::string line;
  for (int n = 1; in && std::getline(in, line); ++n) {
    std::istringstream fields(line);
    Named r;
    std::string name;
    const bool parsed = static_cast<bool>(fields >> r.offset >> r.bytes >> name);
    if (!parsed || !valid_kept_name(name) || r.offset < kDataOffset || r.offset % kPageSize != 0 ||
        r.bytes == 0 || r.bytes % kPageSize != 0 || r.offset > view_.size ||
        r.bytes > view_.size - r.offset) {
      return make_error(Errc::invalid_argument, path + ":" + std::to_string(n) +
                                                    " is not a kept range; remove the keep directory to "
                                                    "start empty");
    }
    ranges.emplace_back(std::move(name), r);
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const auto& a, const auto& b) { return a.second.offset < b.second.offset; });
  std::uint64_t cursor = kDataOffset;
  for (const auto& [name, r] : ranges) {
    if (r.offset < cursor) {
      return make_error(Errc::invalid_argument, path + ": kept range '" + name +
                                                    "' overlaps another; remove the keep directory to "
                                                    "start empty");
    }
    if (r.offset > cursor) {
      zero_range(cursor, r.offset - cursor);
      free_ranges_.emplace(cursor, r.offset - cursor);
    }
    cursor = r.offset + r.bytes;
    named_[name] = r;
  }
  high_water_ = cursor;
  // Everything past the last kept range reads as zeros again: cut off and
  // grown back (any file system can; punching holes into tens of GiB may
  // not be supported, and zeroing them by hand is out of the question).
  if (cursor < view_.size && (ftruncate(id_.memfd, static_cast<off_t>(cursor)) != 0 ||
                              ftruncate(id_.memfd, static_cast<off_t>(view_.size)) != 0)) {
    return make_error(Errc::io_error, keep_errno_text("cannot clear " + keep_dir_ + "/arena"));
  }
  return {};
}

Result<void> Arena::save_kept_directory() const {
  const std::string path = keep_dir_ + "/regions";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto& [name, r] : named_) out << r.offset << ' ' << r.bytes << ' ' << name << '\n';
    out.flush();
    if (!out) return make_error(Errc::io_error, "cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return make_error(Errc::io_error, keep_errno_text("cannot rename " + tmp));
  }
  return {};
}

Result<KeptRange> Arena::allocate_kept(const std::string& name, std::uint64_t bytes) {
  if (keep_dir_.empty()) {
    return make_error(Errc::invalid_argument, "this soft provider was opened without a keep directory");
  }
  if (!valid_kept_name(name)) {
    return make_error(Errc::invalid_argument,
                      "kept region name '" + name + "' is not 1..200 characters of [A-Za-z0-9._#-]");
  }
  bytes = kept_round_up(bytes == 0 ? 1 : bytes);
  std::lock_guard lock(keep_mu_);
  if (auto it = named_.find(name); it != named_.end()) {
    if (it->second.bytes == bytes) return KeptRange{it->second.offset, bytes, true};
    const Named old = it->second;
    named_.erase(it);
    let_go_kept(old.offset, old.bytes);
  }
  auto off = allocate_range(bytes);
  if (!off) return off.error();
  named_[name] = Named{off.value(), bytes};
  if (auto r = save_kept_directory(); !r) {
    named_.erase(name);
    free_range(off.value(), bytes);
    return r.error();
  }
  return KeptRange{off.value(), bytes, false};
}

void Arena::discard_kept(const std::string& name) {
  std::lock_guard lock(keep_mu_);
  auto it = named_.find(name);
  if (it == named_.end()) return;
  const Named r = it->second;
  named_.erase(it);
  // A directory that could not be rewritten still names the range: the next
  // process finds zeros there, which no user of kept memory takes for data.
  (void)save_kept_directory();
  let_go_kept(r.offset, r.bytes);
}

void Arena::let_go_kept(std::uint64_t offset, std::uint64_t bytes) {
  if (tainted_.erase(offset) != 0) {
    quarantine_range(offset, bytes);
  } else {
    free_range(offset, bytes);
  }
}

void Arena::taint_kept(std::uint64_t offset) {
  std::lock_guard lock(keep_mu_);
  for (const auto& [name, r] : named_) {
    if (r.offset == offset) tainted_.insert(offset);
  }
}

std::vector<std::string> Arena::kept_names() const {
  std::lock_guard lock(keep_mu_);
  std::vector<std::string> out;
  out.reserve(named_.size());
  for (const auto& [name, r] : named_) out.push_back(name);
  return out;
}

}  // namespace catena::fabric::soft
