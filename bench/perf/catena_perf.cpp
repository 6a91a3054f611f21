// catena-perf: latency and bandwidth of the fabric between two processes, in
// the spirit of perftest's ib_write_lat / ib_write_bw, with the transport's
// floor measured in the same run (see floors.hpp).
//
// The tool forks: the child is the responder (pinned to CPU 1), the parent
// the initiator (CPU 0). The responder reflects every WRITE WITH IMMEDIATE:
// the immediate carries a command in its top 4 bits and a length below.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <vector>

#include <catena/fabric/fabric.hpp>

#include "floors.hpp"
#include "stats.hpp"

namespace catena::bench {
namespace {

using fabric::Completion;
using fabric::Endpoint;
using fabric::Errc;
using fabric::LocalBuffer;
using fabric::MemoryRegion;
using fabric::Provider;
using fabric::RemoteRegion;

constexpr std::uint32_t kCmdEcho = 0;
constexpr std::uint32_t kCmdBwDone = 1;
constexpr std::uint32_t kCmdStop = 2;
constexpr std::uint32_t kLenMask = (1u << 28) - 1;
constexpr std::size_t kRegionBytes = (1u << 20) + 4096;
constexpr std::uint32_t kRecvDepth = 64;

struct Options {
  std::vector<std::string> providers;
  std::string addr = "127.0.0.1";
  int iters = 20000;
  std::vector<std::uint32_t> lat_sizes{64};
  std::vector<std::uint32_t> bw_sizes{4096, 65536, 1u << 20};
  double bw_seconds = 1.0;
  std::vector<std::uint32_t> bw_batches{1};
  // 0: every bandwidth write from and to offset 0 (perftest's ib_write_bw:
  // cache-resident on a soft provider); else the writes walk this many
  // bytes at both ends, as a publisher appends through a segment, so the
  // copies go to and from memory not in cache.
  std::uint64_t bw_span = 0;
  bool json = false;
  bool pin = true;
  int ib_gid_index = -1;  // for ib_write_lat on RoCE (-x); -1: its default
};

// The data region at both ends: room for the latency and bandwidth writes,
// and for --bw-span.
std::size_t region_bytes(const Options& o) {
  return std::max<std::size_t>(kRegionBytes, o.bw_span);
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "catena-perf: %s\n", what.c_str());
  std::exit(2);
}

template <class T>
T must(fabric::Result<T> r, const char* what) {
  if (!r) die(std::string(what) + ": " + r.error().message);
  return std::move(r.value());
}

void must_post(Errc e, const char* what) {
  if (e != Errc::ok) die(std::string(what) + ": " + std::string(fabric::to_string(e)));
}

// Spin-polls (both processes own a pinned core) until one completion arrives.
Completion wait_one(Endpoint& ep, bool recv_side) {
  Completion c{};
  for (;;) {
    int n = recv_side ? ep.poll_recv(&c, 1) : ep.poll_send(&c, 1);
    if (n == 1) {
      if (c.status != fabric::WcStatus::success) {
        die("completion failed: " + std::string(fabric::to_string(c.status)));
      }
      return c;
    }
    if (ep.state() != fabric::EndpointState::connected) die("endpoint lost its connection");
  }
}

void drain_send(Endpoint& ep) {
  Completion c[16];
  int n;
  while ((n = ep.poll_send(c, 16)) > 0) {
    for (int i = 0; i < n; ++i) {
      if (c[i].status != fabric::WcStatus::success) {
        die("send completion failed: " + std::string(fabric::to_string(c[i].status)));
      }
    }
  }
}

// Exchange RemoteRegions with a SEND each way.
RemoteRegion swap_regions(Endpoint& ep, MemoryRegion& scratch, const RemoteRegion& mine) {
  must_post(ep.post_recv(0, {&scratch, 64, sizeof(RemoteRegion)}), "post_recv");
  std::memcpy(scratch.data(), &mine, sizeof mine);
  must_post(ep.post_send(0, {&scratch, 0, sizeof(RemoteRegion)}), "post_send");
  wait_one(ep, false);
  wait_one(ep, true);
  RemoteRegion theirs;
  std::memcpy(&theirs, scratch.data() + 64, sizeof theirs);
  return theirs;
}

void responder(const Options& o, const std::string& spec, int addr_pipe) {
  auto provider = must(Provider::open(spec), "open provider");
  auto listener = must(provider->listen(o.addr + ":0"), "listen");
  std::string a = listener->address();
  std::uint32_t n = static_cast<std::uint32_t>(a.size());
  if (write(addr_pipe, &n, 4) != 4 || write(addr_pipe, a.data(), n) != static_cast<ssize_t>(n)) die("pipe");
  auto ep = must(listener->accept(std::chrono::milliseconds(30000)), "accept");
  auto region =
      must(provider->allocate(region_bytes(o), fabric::kLocalWrite | fabric::kRemoteWrite), "allocate");
  auto scratch = must(provider->allocate(4096, fabric::kLocalWrite), "allocate");
  RemoteRegion peer = swap_regions(*ep, *scratch, must(ep->expose(*region), "expose"));
  for (std::uint32_t i = 0; i < kRecvDepth; ++i)
    must_post(ep->post_recv(i, {scratch.get(), 1024, 64}), "recv");
  for (;;) {
    Completion c = wait_one(*ep, true);
    must_post(ep->post_recv(c.wr_id, {scratch.get(), 1024, 64}), "recv");
    std::uint32_t cmd = c.imm >> 28;
    if (cmd == kCmdStop) break;
    std::uint32_t len = cmd == kCmdEcho ? (c.imm & kLenMask) : 8;
    must_post(ep->post_write_imm(c.imm, {region.get(), 0, len}, {peer, 0}, c.imm), "write_imm");
    drain_send(*ep);
  }
  // The initiator stops polling once it has sent `stop`: completions of our
  // last replies may never be acknowledged, so they are not waited for.
}

struct Session {
  std::unique_ptr<Provider> provider;
  std::unique_ptr<Endpoint> ep;
  std::unique_ptr<MemoryRegion> region;
  std::unique_ptr<MemoryRegion> scratch;
  RemoteRegion peer;
};

Percentiles latency(Session& s, std::uint32_t bytes, int iters) {
  std::vector<std::uint64_t> samples;
  samples.reserve(static_cast<std::size_t>(iters));
  const int warmup = std::max(100, iters / 10);
  for (int i = 0; i < warmup + iters; ++i) {
    std::uint64_t t0 = now_ns();
    must_post(s.ep->post_write_imm(1, {s.region.get(), 0, bytes}, {s.peer, 0}, (kCmdEcho << 28) | bytes),
              "write_imm");
    Completion c = wait_one(*s.ep, true);
    std::uint64_t t1 = now_ns();
    must_post(s.ep->post_recv(c.wr_id, {s.scratch.get(), 1024, 64}), "recv");
    drain_send(*s.ep);
    if (i >= warmup) samples.push_back(t1 - t0);
  }
  // The last write's completion may still be outstanding.
  return percentiles(std::move(samples));
}

// `batch` writes per doorbell (Endpoint::hold_posts; 1: each write posted
// alone and signalled, as perftest's ib_write_bw does by default). With a
// `span`, the k-th write goes from and to offset (k * bytes) mod span at
// both ends; one lap over it first, untimed, so that no page is touched for
// the first time while timed.
double bandwidth_gbps(Session& s, std::uint32_t bytes, double seconds, std::uint32_t batch,
                      std::uint64_t span) {
  const std::uint32_t window = std::min<std::uint32_t>(64, s.ep->caps().send_queue_depth - 1);
  const std::uint64_t places = span >= bytes ? span / bytes : 1;
  std::uint64_t next = 0;  // writes posted
  std::uint32_t outstanding = 0;
  std::uint64_t done_bytes = 0;
  Completion c[32];
  auto run = [&](std::uint64_t until_ns, std::uint64_t until_writes) {
    while (now_ns() < until_ns && next < until_writes) {
      bool room = true;
      while (room && outstanding < window && next < until_writes) {
        if (batch > 1) s.ep->hold_posts();
        for (std::uint32_t i = 0; i < batch && outstanding < window; ++i) {
          const std::uint64_t at = (next % places) * bytes;
          Errc e = s.ep->post_write(2, {s.region.get(), at, bytes}, {s.peer, at});
          if (e == Errc::backpressure) {
            room = false;
            break;
          }
          must_post(e, "write");
          ++outstanding;
          ++next;
        }
        if (batch > 1) s.ep->release_posts();
      }
      int n = s.ep->poll_send(c, 32);
      for (int i = 0; i < n; ++i) {
        if (c[i].status != fabric::WcStatus::success) die("write failed");
        done_bytes += bytes;
      }
      outstanding -= static_cast<std::uint32_t>(n);
    }
  };
  if (span > 0) {
    std::memset(s.region->data(), 0x5a, places * bytes);
    run(~0ull, places);
    for (; outstanding > 0; --outstanding) wait_one(*s.ep, false);
    next = 0;
  }
  std::uint64_t t0 = now_ns();
  done_bytes = 0;
  const std::uint64_t until = t0 + static_cast<std::uint64_t>(seconds * 1e9);
  run(until, ~0ull);
  while (outstanding > 0) {
    wait_one(*s.ep, false);
    done_bytes += bytes;
    --outstanding;
  }
  // Ordering: the responder's reply to this arrives after every write landed.
  must_post(s.ep->post_write_imm(3, {s.region.get(), 0, 8}, {s.peer, 0}, kCmdBwDone << 28), "write_imm");
  Completion r = wait_one(*s.ep, true);
  std::uint64_t t1 = now_ns();
  must_post(s.ep->post_recv(r.wr_id, {s.scratch.get(), 1024, 64}), "recv");
  drain_send(*s.ep);
  return static_cast<double>(done_bytes) * 8.0 / static_cast<double>(t1 - t0);
}

bool is_verbs(const std::string& spec) {
  return spec.rfind("verbs:", 0) == 0;
}

std::string floor_kind(const std::string& spec) {
  if (is_verbs(spec)) return "ib_write_lat";
  if (spec.starts_with("dpdk:")) return "udp_pingpong";
  return spec == "soft" || spec == "soft:shm" ? "shm_cacheline_pingpong" : "tcp_nodelay_pingpong";
}

void run_provider(const Options& o, const std::string& spec) {
  const bool verbs = is_verbs(spec);
  const bool shm_floor = floor_kind(spec) == "shm_cacheline_pingpong";
  const int floor_iters = o.iters;
  // On an RDMA device the floor is the device's own write ping-pong,
  // measured first, with nothing else running.
  Percentiles device_floor;
  std::string floor_error;
  if (verbs) {
    DeviceFloor f;
    if (ib_write_lat_floor(spec.substr(6), o.ib_gid_index, std::min(o.iters, 100000), 64, &f, &floor_error)) {
      device_floor.p50 = f.rtt_p50_ns;
      device_floor.p99 = f.rtt_p99_ns;
    } else {
      std::fprintf(stderr, "catena-perf: %s floor unavailable: %s\n", spec.c_str(), floor_error.c_str());
    }
  }
  ShmFloor shm = ShmFloor::create();
  int port = 0;
  const bool udp_floor = floor_kind(spec) == "udp_pingpong";
  int tcp_listen = shm_floor || verbs || udp_floor ? -1 : tcp_floor_listen(&port);
  int udp_fd = udp_floor ? udp_floor_bind(&port) : -1;
  int fds[2];
  if (pipe(fds) != 0) die("pipe");
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    close(fds[0]);
    if (o.pin) pin_to_cpu(1);
    if (shm_floor) {
      shm_pingpong_responder(shm, floor_iters);
    } else if (udp_floor) {
      udp_pingpong_responder(udp_fd, floor_iters, 64);
    } else if (!verbs) {
      tcp_pingpong_responder(tcp_listen, floor_iters, 64);
    }
    responder(o, spec, fds[1]);
    _exit(0);
  }
  close(fds[1]);
  if (tcp_listen >= 0) close(tcp_listen);
  if (udp_fd >= 0) close(udp_fd);
  if (o.pin) pin_to_cpu(0);
  Percentiles floor = verbs       ? device_floor
                      : shm_floor ? percentiles(shm_pingpong_initiator(shm, floor_iters))
                      : udp_floor ? percentiles(udp_pingpong_initiator("127.0.0.1", port, floor_iters, 64))
                                  : percentiles(tcp_pingpong_initiator("127.0.0.1", port, floor_iters, 64));

  std::uint32_t n = 0;
  if (read(fds[0], &n, 4) != 4 || n > 256) die("responder did not start (see its error above)");
  std::string addr(n, '\0');
  if (read(fds[0], addr.data(), n) != static_cast<ssize_t>(n)) die("pipe");
  Session s;
  s.provider = must(Provider::open(spec), "open provider");
  s.ep = must(s.provider->connect(addr), "connect");
  s.region =
      must(s.provider->allocate(region_bytes(o), fabric::kLocalWrite | fabric::kRemoteWrite), "allocate");
  s.scratch = must(s.provider->allocate(4096, fabric::kLocalWrite), "allocate");
  s.peer = swap_regions(*s.ep, *s.scratch, must(s.ep->expose(*s.region), "expose"));
  for (std::uint32_t i = 0; i < kRecvDepth; ++i) {
    must_post(s.ep->post_recv(i, {s.scratch.get(), 1024, 64}), "recv");
  }

  const unsigned cores = std::thread::hardware_concurrency();
  const std::string pinning = o.pin ? "initiator cpu0, responder cpu1, busy-poll" : "unpinned";
  for (std::uint32_t bytes : o.lat_sizes) {
    Percentiles p = latency(s, bytes, o.iters);
    double ratio = floor.p50 ? static_cast<double>(p.p50) / static_cast<double>(floor.p50) : 0.0;
    if (o.json) {
      nlohmann::json j{{"provider", spec},
                       {"op", "write_imm_rtt"},
                       {"bytes", bytes},
                       {"iters", p.count},
                       {"p50_ns", p.p50},
                       {"p99_ns", p.p99},
                       {"p999_ns", p.p999},
                       {"max_ns", p.max},
                       {"floor", floor_kind(spec)},
                       {"floor_p50_ns", floor.p50},
                       {"floor_p99_ns", floor.p99},
                       {"ratio_p50", ratio},
                       {"cores", cores},
                       {"pinning", pinning}};
      std::cout << j.dump() << std::endl;
    } else {
      std::printf(
          "%-10s write_imm round trip %7u B: p50 %8.2f us  p99 %8.2f us  p99.9 %8.2f us  max %9.2f us\n",
          spec.c_str(), bytes, p.p50 / 1e3, p.p99 / 1e3, p.p999 / 1e3, p.max / 1e3);
      std::printf("%-10s floor (%s): p50 %8.2f us  p99 %8.2f us  -> fabric/floor p50 = %.2fx\n", spec.c_str(),
                  floor_kind(spec).c_str(), floor.p50 / 1e3, floor.p99 / 1e3, ratio);
    }
  }
  for (std::uint32_t bytes : o.bw_sizes) {
    for (std::uint32_t batch : o.bw_batches) {
      double gbps = bandwidth_gbps(s, bytes, o.bw_seconds, batch, o.bw_span);
      if (o.json) {
        nlohmann::json j{{"provider", spec}, {"op", "write_bw"},  {"bytes", bytes}, {"gbps", gbps},
                         {"batch", batch},   {"span", o.bw_span}, {"cores", cores}, {"pinning", pinning}};
        std::cout << j.dump() << std::endl;
      } else {
        std::printf("%-10s write bandwidth %9u B, %2u per doorbell%s: %8.2f Gb/s\n", spec.c_str(), bytes,
                    batch, o.bw_span > 0 ? (" over " + std::to_string(o.bw_span >> 20) + " MiB").c_str() : "",
                    gbps);
      }
    }
  }
  // The responder exits on `stop`, possibly before acknowledging it: its
  // completion may be flushed, which is fine here.
  must_post(s.ep->post_write_imm(4, {s.region.get(), 0, 8}, {s.peer, 0}, kCmdStop << 28), "write_imm");
  int status = 0;
  waitpid(pid, &status, 0);
  close(fds[0]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("responder failed");
}

}  // namespace
}  // namespace catena::bench

int main(int argc, char** argv) {
  using catena::bench::Options;
  Options o;
  if (const char* a = std::getenv("CATENA_TEST_ADDR")) o.addr = a;
  CLI::App app{"catena-perf: fabric latency/bandwidth between two local processes, with the transport floor"};
  app.add_option("--provider", o.providers,
                 "provider spec(s): soft, soft:shm, soft:tcp, verbs:<dev>, dpdk:memif=<path> (default: soft "
                 "and soft:tcp)");
  app.add_option("--addr", o.addr, "IP address the responder listens on")->capture_default_str();
  app.add_option("--iters", o.iters, "latency round trips per size")
      ->capture_default_str()
      ->check(CLI::Range(100, 10000000));
  app.add_option("--lat-sizes", o.lat_sizes, "latency message sizes in bytes")
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--bw-sizes", o.bw_sizes, "bandwidth message sizes in bytes")
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--bw-seconds", o.bw_seconds, "seconds per bandwidth size")->capture_default_str();
  app.add_option("--bw-batch", o.bw_batches,
                 "writes per doorbell in the bandwidth runs, one run each (e.g. 1,16: alone and signalled, "
                 "then 16 per ibv_post_send with the last signalled)")
      ->delimiter(',')
      ->check(CLI::Range(1u, 64u));
  app.add_option("--bw-span", o.bw_span,
                 "bytes the bandwidth writes walk at both ends (0: all at offset 0, cache-resident, as "
                 "perftest; 67108864: through a 64 MiB segment, to and from memory not in cache)")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 32));
  app.add_flag("--json", o.json, "one JSON object per line per measurement");
  app.add_option("--ib-gid-index", o.ib_gid_index,
                 "GID index for ib_write_lat, the floor of verbs providers (RoCE/soft-RoCE: usually 1)");
  bool no_pin = false;
  app.add_flag("--no-pin", no_pin, "do not pin the two processes to CPUs 0 and 1");
  CLI11_PARSE(app, argc, argv);
  o.pin = !no_pin;
  if (o.providers.empty()) o.providers = {"soft", "soft:tcp"};
  if (!o.json) {
    std::printf("catena-perf: %u cores, %s\n", std::thread::hardware_concurrency(),
                o.pin ? "initiator pinned to cpu0, responder to cpu1" : "unpinned");
  }
  for (const auto& spec : o.providers) catena::bench::run_provider(o, spec);
  return 0;
}
