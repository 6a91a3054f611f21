#include "soft/populator.hpp"

#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <sys/mman.h>
#include <vector>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack the name
#endif

namespace catena::fabric::soft {

namespace {

// Writes every 4 KiB page of [p, p + bytes) without changing a byte: a
// locked add of 0 to its first word, atomic against anyone writing there
// (the region may be live: its owner's data thread, or a peer's one-sided
// writes, filling it as we go). Needed where the machine backs memory
// lazily below the kernel: on this kind of VM (KVM guest, host memory given
// back by free page reporting) MADV_POPULATE_WRITE maps every page without
// a guest fault, yet the first write to each still costs ~5 us in the host
// (a 64 MiB fill 80-110 ms after a populate, 3-4 ms once each page was
// written: README, "Populating is not touching"). On x86-64 the add is an
// instruction of its own (`lock addq`), which ThreadSanitizer does not see:
// its race with a writer's plain stores is the point, and harmless, as the
// hardware makes the add atomic across threads and processes (a writer's
// byte is never undone: SoftPrefault.WritesRacingThePopulatorAreNeverUndone).
void touch_pages(std::byte* p, std::uint64_t bytes) {
  for (std::uint64_t off = 0; off < bytes; off += 4096) {
    auto* word = reinterpret_cast<std::uint64_t*>(p + off);
#if defined(__x86_64__)
    asm volatile("lock addq $0, %0" : "+m"(*word) : : "memory");
#else
    __atomic_fetch_add(word, 0, __ATOMIC_RELAXED);
#endif
  }
}

}  // namespace

Populator::~Populator() {
  stop();
}

void Populator::stop() {
  std::thread t;
  {
    MutexLock lock(mu_);
    stop_ = true;
    t = std::move(thread_);
  }
  work_cv_.notify_all();
  idle_cv_.notify_all();  // wait_frees() returns
  if (t.joinable()) t.join();
}

void Populator::add(std::uint64_t offset, std::uint64_t bytes) {
  if (bytes == 0) return;
  {
    MutexLock lock(mu_);
    if (unsupported_ || stop_) return;
    jobs_.push_back({offset, bytes});
    start_locked();
  }
  work_cv_.notify_one();
}

bool Populator::add_spare(std::uint64_t offset, std::uint64_t bytes) {
  if (bytes == 0) return false;
  {
    MutexLock lock(mu_);
    if (unsupported_ || stop_ || !spare_) return false;
    spares_.push_back({{offset, bytes}, {offset, bytes}, true});
    start_locked();
  }
  work_cv_.notify_one();
  return true;
}

bool Populator::free_later(std::uint64_t offset, std::uint64_t bytes) {
  {
    MutexLock lock(mu_);
    if (stop_) return false;
    // A writer freeing faster than this thread zeroes (a tight allocate
    // and free loop) would otherwise queue without bound, and memory that
    // is zeroed in place stays resident: past the cap it frees itself.
    if (free_bytes_queued_ + bytes > kMaxQueuedFreeBytes) return false;
    free_bytes_queued_ += bytes;
    frees_.push_back({offset, bytes});
    start_locked();
  }
  work_cv_.notify_one();
  return true;
}

bool Populator::wait_frees() {
  UniqueLock lock(mu_);
  if (frees_.empty() && !freeing_) return false;
  lock.wait(idle_cv_, [&] {
    mu_.assert_held();
    return stop_ || (frees_.empty() && !freeing_);
  });
  return true;
}

void Populator::start_locked() {
  if (!thread_.joinable()) {
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "catena-prefault");
      run();
    });
  }
}

void Populator::forget(std::uint64_t offset, std::uint64_t bytes) {
  const std::uint64_t end = offset + bytes;
  auto overlaps = [&](const Range& r) { return r.offset < end && r.offset + r.bytes > offset; };
  UniqueLock lock(mu_);
  // What is queued: the part of each job outside [offset, end) stays (a
  // range is usually freed long after its populate finished: nothing to do).
  if (std::any_of(jobs_.begin(), jobs_.end(), overlaps)) {
    std::deque<Range> kept;
    for (const Range& j : jobs_) {
      if (!overlaps(j)) {
        kept.push_back(j);
        continue;
      }
      if (j.offset < offset) kept.push_back({j.offset, offset - j.offset});
      if (j.offset + j.bytes > end) kept.push_back({end, j.offset + j.bytes - end});
    }
    jobs_.swap(kept);
  }
  // What runs: wait for the chunk to finish (2 MiB, about a millisecond).
  lock.wait(idle_cv_, [&] {
    mu_.assert_held();  // the wait holds it when it asks
    return working_.bytes == 0 || !overlaps(working_);
  });
}

void Populator::run() {
  for (;;) {
    Range chunk;
    Range freed;  // bytes 0: a populate chunk instead
    bool spare_chunk = false;
    {
      UniqueLock lock(mu_);
      lock.wait(work_cv_, [&] {
        mu_.assert_held();
        return stop_ || !jobs_.empty() || !frees_.empty() || !spares_.empty();
      });
      if (stop_) return;
      if (!frees_.empty()) {
        // Memory given back first: the next segment may be waiting for it.
        freed = frees_.front();
        frees_.pop_front();
        free_bytes_queued_ -= freed.bytes;
        freeing_ = true;
      } else {
        // Then memory someone is about to write, then spares.
        spare_chunk = jobs_.empty();
        Range& front = spare_chunk ? spares_.front().left : jobs_.front();
        chunk = {front.offset, std::min(front.bytes, kChunkBytes)};
        front.offset += chunk.bytes;
        front.bytes -= chunk.bytes;
        if (!spare_chunk && front.bytes == 0) jobs_.pop_front();
        working_ = chunk;  // forget() of these bytes waits until it is done
      }
    }
    if (freed.bytes != 0) {
      free_(freed.offset, freed.bytes);  // takes mu_ itself (forget())
      {
        MutexLock lock(mu_);
        freeing_ = false;
      }
      idle_cv_.notify_all();
      continue;
    }
    const int rc = madvise(base_ + chunk.offset, chunk.bytes, MADV_POPULATE_WRITE);
    const int err = errno;
    if (rc == 0) touch_pages(base_ + chunk.offset, chunk.bytes);
    std::vector<Spare> done;  // spares finished (or given up): told outside the lock
    {
      MutexLock lock(mu_);
      if (spare_chunk && rc != 0) spares_.front().populated = false;
      if (spare_chunk && spares_.front().left.bytes == 0) {
        done.push_back(spares_.front());
        spares_.pop_front();
      }
      if (rc != 0 && err == EINVAL) {
        // The kernel does not know the advice: first touches fault as before.
        unsupported_ = true;
        jobs_.clear();
        for (Spare& s : spares_) done.push_back({s.left, s.whole, false});
        spares_.clear();
      }
      // Other failures (ENOMEM: the memory is not there now) skip the chunk:
      // its pages fault in when they are written.
      working_ = {};
    }
    idle_cv_.notify_all();
    for (const Spare& s : done) spare_(s.whole.offset, s.whole.bytes, s.populated);
  }
}

}  // namespace catena::fabric::soft
