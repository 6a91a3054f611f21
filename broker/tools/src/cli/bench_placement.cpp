// `catena bench`: where its threads and processes run (--pin), and the floor
// a same-host 3-replica commit round trip cannot beat (see bench.cpp).
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <new>
#include <sys/mman.h>
#include <sys/wait.h>
#include <thread>

#include <catena/fabric/idle.hpp>

#include "bench_parts.hpp"
#include "floors.hpp"

namespace catena::cli::bench_detail {

using catena::bench::now_ns;

namespace {

bool pin_tid(pid_t tid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(tid, sizeof set, &set) == 0;
}

struct alignas(64) Mailbox {
  std::atomic<std::uint64_t> word;
};

void floor_stage(Mailbox* boxes, const std::atomic<std::uint32_t>* stop, int me,
                 const std::vector<int>& route) {
  fabric::BackoffIdle idle;
  std::uint64_t last = 0;  // tokens are never 0; the first may arrive before this process runs
  while (stop->load(std::memory_order_relaxed) == 0) {
    const std::uint64_t w = boxes[me].word.load(std::memory_order_acquire);
    if (w == last) {
      idle.idle(0);
      continue;
    }
    last = w;
    const std::uint64_t hop = (w & 0xff) + 1;
    boxes[route[hop]].word.store((w & ~std::uint64_t{0xff}) | hop, std::memory_order_release);
    idle.idle(1);
  }
}

}  // namespace

// --- placement -------------------------------------------------------------------

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    return static_cast<int>(std::thread::hardware_concurrency());
  return CPU_COUNT(&set);
}

// Other work on the machine skews every figure here: say how busy it was.
double load_average() {
  std::ifstream in("/proc/loadavg");
  double one = -1;
  in >> one;
  return one;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown cpu";
}

// none:   the scheduler places everything.
// spread: client on cpu0, chain position i on cpu (i+1) mod N: neighbours in
//         the chain sit on different cores, so a hand-off can land on an
//         idle core instead of waiting for a time slice.
// split:  client on cpu0, every broker on the other core(s).
std::optional<Placement> plan_placement(const std::string& mode, int replicas) {
  Placement p;
  p.mode = mode;
  p.cpus = usable_cpus();
  p.stage_cpu.assign(static_cast<std::size_t>(replicas), -1);
  if (mode == "none") return p;
  if (mode != "spread" && mode != "split") return std::nullopt;
  p.client_cpu = 0;
  for (int i = 0; i < replicas; ++i) {
    if (mode == "spread") {
      p.stage_cpu[static_cast<std::size_t>(i)] = (i + 1) % p.cpus;
    } else {
      p.stage_cpu[static_cast<std::size_t>(i)] = p.cpus > 1 ? 1 + i % (p.cpus - 1) : 0;
    }
  }
  return p;
}

// Pins every thread of a process; threads it starts later inherit the mask.
bool pin_process(pid_t pid, int cpu) {
  if (cpu < 0) return true;
  std::error_code ec;
  bool ok = true;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    ok = pin_tid(static_cast<pid_t>(std::stol(e.path().filename().string())), cpu) && ok;
  }
  return ok && !ec;
}

// The mask this process started with: what "unpinned" means here.
const cpu_set_t& initial_mask() {
  static const cpu_set_t mask = [] {
    cpu_set_t m;
    CPU_ZERO(&m);
    sched_getaffinity(0, sizeof m, &m);
    return m;
  }();
  return mask;
}

// Pins the calling thread, or (cpu < 0) lets it run anywhere again: the
// processes this one forks inherit the mask.
void pin_self(int cpu) {
  if (cpu >= 0) {
    pin_tid(0, cpu);
  } else {
    sched_setaffinity(0, sizeof(cpu_set_t), &initial_mask());
  }
}

// --- the floor -----------------------------------------------------------------------

// Round trips in ns (warm-up excluded); empty on failure.
std::vector<std::uint64_t> measure_floor(const FloorShape& shape, int stages, const Placement& place,
                                         int iters, int warmup) {
  const std::size_t bytes = sizeof(Mailbox) * static_cast<std::size_t>(stages + 2);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return {};
  auto* boxes = new (mem) Mailbox[stages + 1]{};
  auto* stop = new (static_cast<char*>(mem) + sizeof(Mailbox) * static_cast<std::size_t>(stages + 1))
      std::atomic<std::uint32_t>{0};
  std::vector<pid_t> children;
  for (int s = 1; s <= stages; ++s) {
    pid_t pid = fork();
    if (pid == 0) {
      pin_self(place.stage_cpu[static_cast<std::size_t>(s - 1)]);  // -1: anywhere, not the client's cpu
      floor_stage(boxes, stop, s, shape.route);
      _exit(0);
    }
    if (pid > 0) children.push_back(pid);
  }
  std::vector<std::uint64_t> samples;
  if (children.size() == static_cast<std::size_t>(stages)) {
    samples.reserve(static_cast<std::size_t>(iters));
    fabric::BackoffIdle idle;
    const std::uint64_t last_hop = shape.route.size() - 1;
    for (int i = 1; i <= iters + warmup; ++i) {
      const std::uint64_t round = static_cast<std::uint64_t>(i) << 8;
      const std::uint64_t t0 = now_ns();
      boxes[shape.route[0]].word.store(round, std::memory_order_release);
      bool lost = false;
      while (boxes[0].word.load(std::memory_order_acquire) != (round | last_hop)) {
        idle.idle(0);
        if (now_ns() - t0 > 5'000'000'000ull) {
          lost = true;  // a stage died: report rather than hang
          break;
        }
      }
      if (lost) {
        samples.clear();
        break;
      }
      const std::uint64_t t1 = now_ns();
      idle.reset();
      if (i > warmup) samples.push_back(t1 - t0);
    }
  }
  stop->store(1, std::memory_order_relaxed);
  for (pid_t c : children) waitpid(c, nullptr, 0);
  munmap(mem, bytes);
  return samples;
}

}  // namespace catena::cli::bench_detail
