// Faults in the pages of freshly allocated arena ranges on a thread of its
// own, so that the data-plane thread that writes a new segment (or ring)
// next finds its pages present instead of taking a page fault every 4 KiB.
//
// A fresh range has no pages: the arena hands out punched (zeroed) memory,
// and each first touch allocates, zeroes and maps a page, ~36 ms per 64 MiB
// on this kind of VM, paid by whichever thread touches it first: without
// this, the thread that serves every partition of the node, in the middle
// of a segment. MADV_POPULATE_WRITE (Linux 5.14) does the same work ahead,
// 2 MiB at a time, from the start of the range (where the writer starts).
// Where the kernel lacks it the populator turns itself off and pages fault
// in as before.
//
// The same thread zeroes freed ranges and hands them back to the arena
// (free_later()): dropping or clearing a freed segment's pages took ~1 ms
// (up to 3.6 ms) each on this kind of VM, and the data-plane thread that
// let a segment go stalled every partition of its node for that long.
//
// It also makes spares (add_spare()): free memory populated ahead of any
// allocation, which the arena hands to the next one of that size warm
// (arena.hpp, Warm memory).
//
// Thread safety: add(), add_spare(), forget() and free_later() from any
// thread. The thread starts with the first of them.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>

#include <catena/fabric/thread_annotations.hpp>

namespace catena::fabric::soft {

class Populator {
 public:
  // Zeroes a freed range and makes it allocatable again (Arena's).
  using FreeFn = std::function<void(std::uint64_t offset, std::uint64_t bytes)>;
  // A spare's range is populated (`populated`: every chunk was; false: some
  // chunk was refused, its pages fault in on first touch). Not called for a
  // spare still queued when the thread stops.
  using SpareFn = std::function<void(std::uint64_t offset, std::uint64_t bytes, bool populated)>;
  // Ranges are offsets into the mapping at `base`, which outlives this.
  Populator(std::byte* base, FreeFn free, SpareFn spare = {})
      : base_(base), free_(std::move(free)), spare_(std::move(spare)) {}
  ~Populator();
  Populator(const Populator&) = delete;
  Populator& operator=(const Populator&) = delete;

  // Populates [offset, offset + bytes) in the background, in order of adds.
  void add(std::uint64_t offset, std::uint64_t bytes) EXCLUDES(mu_);
  // Populates [offset, offset + bytes) after every add() queued before it
  // (memory someone is about to write comes first), then runs the SpareFn.
  // False when the thread is stopping or the kernel lacks the advice: the
  // caller keeps the range.
  bool add_spare(std::uint64_t offset, std::uint64_t bytes) EXCLUDES(mu_);
  // Before a range's pages are dropped: on return no populate of any byte
  // of it runs, and none will (a populate after the drop would fault the
  // pages back in and hold memory the arena gave back).
  void forget(std::uint64_t offset, std::uint64_t bytes) EXCLUDES(mu_);
  // Runs the FreeFn for the range on the thread, before any populate still
  // queued. False once stopping, or when kMaxQueuedFreeBytes are queued
  // already: the caller frees it itself. A range queued
  // when this is destroyed is never freed (the arena is going too).
  bool free_later(std::uint64_t offset, std::uint64_t bytes) EXCLUDES(mu_);

  // Waits until every range handed to free_later() before the call has been
  // freed. False at once if none was pending (nothing to wait for).
  bool wait_frees() EXCLUDES(mu_);

  // Stops the thread (what is queued is dropped) and joins it; idempotent.
  // The owner calls it before anything the FreeFn reads goes.
  void stop() EXCLUDES(mu_);

  static constexpr std::uint64_t kChunkBytes = 2ull << 20;
  static constexpr std::uint64_t kMaxQueuedFreeBytes = 1ull << 30;

 private:
  struct Range {
    std::uint64_t offset = 0;
    std::uint64_t bytes = 0;
  };
  // A spare being made: what is left to populate, and the whole range.
  struct Spare {
    Range left;
    Range whole;
    bool populated = true;
  };
  void run() EXCLUDES(mu_);
  void start_locked() REQUIRES(mu_);

  std::byte* const base_;
  const FreeFn free_;
  const SpareFn spare_;
  mutable Mutex mu_;
  std::condition_variable work_cv_;  // a job was added, or stop
  std::condition_variable idle_cv_;  // a chunk or a free finished
  std::deque<Range> jobs_ GUARDED_BY(mu_);
  std::deque<Range> frees_ GUARDED_BY(mu_);
  std::deque<Spare> spares_ GUARDED_BY(mu_);
  Range working_ GUARDED_BY(mu_){};       // the chunk being populated (bytes 0: none)
  bool freeing_ GUARDED_BY(mu_) = false;  // a FreeFn runs
  std::uint64_t free_bytes_queued_ GUARDED_BY(mu_) = 0;
  bool unsupported_ GUARDED_BY(mu_) = false;  // the kernel refused the advice (before 5.14)
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_ GUARDED_BY(mu_);
};

}  // namespace catena::fabric::soft
