#include "dpdk/dpdk_port.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <rte_bus_vdev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <arpa/inet.h>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <sys/file.h>

#include <catena/fabric/idle.hpp>

namespace catena::fabric::dpdk {
namespace {

constexpr std::uint32_t kPoolMbufs = 8191;  // a power of two minus one, as the mempool likes
constexpr std::uint32_t kRingSize = 4096;
constexpr std::uint16_t kBurst = 32;
constexpr std::uint32_t kQpSlots = 4096;  // QPs per port at once
constexpr std::uint64_t kLivenessPeriodNs = 5'000'000;
// Default addresses: the wires these ports model never leave the host.
constexpr std::uint32_t kRingIpv4 = 0x0a2f0001;         // 10.47.0.1
constexpr std::uint32_t kMemifClientIpv4 = 0x0a2f0102;  // 10.47.1.2

Result<void> start_eal() {
  static Mutex mu;
  static bool started = false;
  static std::string failure;
  MutexLock lock(mu);
  if (started) return {};
  if (!failure.empty()) return make_error(Errc::no_device, failure);
  // EAL pins the calling thread to its main lcore; the caller is some setup
  // thread of the application, so give it back the CPUs it had.
  cpu_set_t before;
  CPU_ZERO(&before);
  const bool have_affinity = pthread_getaffinity_np(pthread_self(), sizeof before, &before) == 0;
  // No hugepages, no PCI, no files: the provider runs on PMDs that need no
  // NIC. DPDK 22.11 turns --no-huge into legacy memory, which refuses
  // --in-memory; --no-shconf gives what --in-memory would (no shared
  // config files, so processes never see each other's EAL).
  std::string args[] = {"catena", "--no-huge", "--no-shconf", "--no-pci", "--no-telemetry",
                        "-l",     "0",         "-m",          "256",      "--log-level=lib.*:error"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const int rc = rte_eal_init(static_cast<int>(argv.size()), argv.data());
  if (have_affinity) pthread_setaffinity_np(pthread_self(), sizeof before, &before);
  if (rc < 0) {
    failure = std::string("DPDK EAL did not start: ") + rte_strerror(rte_errno);
    return make_error(Errc::no_device, failure);
  }
  started = true;
  return {};
}

// The memif server of PATH holds an exclusive lock on PATH.lock while it
// lives (the kernel drops it when the process dies), so the first port on a
// path becomes its server and the next its client. Probing the socket with a
// connect() instead crashes 22.11's memif server (its interrupt thread panics
// on the half-open connection). Returns the held lock's descriptor, or -1.
int take_memif_server_lock(const std::string& path) {
  const int fd = ::open((path + ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool parse_number(std::string_view s, double* out) {
  char* end = nullptr;
  std::string copy(s);
  *out = std::strtod(copy.c_str(), &end);
  return end != nullptr && *end == '\0' && !copy.empty();
}

template <class T>
bool parse_uint(std::string_view s, T* out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc{} && p == s.data() + s.size();
}

}  // namespace

Result<PortSpec> parse_port_spec(std::string_view spec) {
  PortSpec out;
  out.key = std::string(spec);
  bool have_kind = false;
  while (!spec.empty()) {
    const auto comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    const auto eq = item.find('=');
    const std::string_view name = item.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? std::string_view{} : item.substr(eq + 1);
    bool ok = true;
    double pct = 0;
    if (name == "ring" && eq == std::string_view::npos) {
      have_kind = true;
    } else if (name == "memif") {
      have_kind = true;
      out.kind = PortSpec::Kind::memif;
      out.memif_socket = std::string(value);
      ok = !value.empty() && value.find_first_of(",=") == std::string_view::npos;
    } else if (name == "af_packet") {
      have_kind = true;
      out.kind = PortSpec::Kind::af_packet;
      out.iface = std::string(value);
      ok = !value.empty();
    } else if (name == "role") {
      ok = value == "server" || value == "client";
      out.memif_server = value == "server";
      out.memif_role_given = true;
    } else if (name == "ip") {
      in_addr a{};
      ok = inet_pton(AF_INET, std::string(value).c_str(), &a) == 1;
      out.ipv4 = ntohl(a.s_addr);
    } else if (name == "loss" || name == "dup" || name == "reorder") {
      ok = parse_number(value, &pct) && pct >= 0 && pct <= 100;
      (name == "loss" ? out.loss : name == "dup" ? out.dup : out.reorder) = pct / 100;
    } else if (name == "seed") {
      ok = parse_uint(value, &out.seed);
    } else if (name == "mtu") {
      ok = parse_uint(value, &out.mtu) && out.mtu >= 256 && out.mtu <= 4096 && (out.mtu & (out.mtu - 1)) == 0;
    } else if (name == "timeout_us") {
      std::uint64_t us = 0;
      ok = parse_uint(value, &us) && us > 0;
      out.timeout_ns = us * 1000;
    } else {
      ok = false;
    }
    if (!ok) {
      return make_error(Errc::invalid_argument, "dpdk port spec: bad option '" + std::string(item) + "'");
    }
  }
  if (have_kind && out.kind == PortSpec::Kind::af_packet && out.ipv4 == 0) {
    return make_error(Errc::invalid_argument, "dpdk port spec '" + out.key + "': af_packet needs ip=");
  }
  if (!have_kind) {
    return make_error(Errc::invalid_argument,
                      "dpdk port spec '" + out.key + "' names no port (try dpdk:ring)");
  }
  return out;
}

Result<std::shared_ptr<Port>> Port::open(const PortSpec& spec) {
  static Mutex mu;
  static std::map<std::string, std::weak_ptr<Port>> ports;
  if (auto r = start_eal(); !r) return r.error();
  MutexLock lock(mu);
  if (auto it = ports.find(spec.key); it != ports.end()) {
    if (auto p = it->second.lock()) return p;
  }
  PortSpec resolved = spec;
  int lock_fd = -1;
  if (resolved.kind == PortSpec::Kind::memif && (resolved.memif_server || !resolved.memif_role_given)) {
    lock_fd = take_memif_server_lock(resolved.memif_socket);
    if (!resolved.memif_role_given) resolved.memif_server = lock_fd >= 0;
  }
  std::shared_ptr<Port> port(new Port(resolved));
  port->memif_lock_fd_ = lock_fd;
  if (auto r = port->start(); !r) return r.error();
  ports[spec.key] = port;
  if (spec.kind == PortSpec::Kind::memif) {
    // net_memif closes its socket lazily (on its interrupt thread) when a
    // device goes, so a new port on the same path right after would find it
    // still bound: a memif port stays until the process exits.
    static std::vector<std::shared_ptr<Port>> kept;
    kept.push_back(port);
  }
  return port;
}

Port::Port(PortSpec spec)
    : spec_(std::move(spec)), qp_by_slot_(kQpSlots, nullptr), rng_(spec_.seed * 0x9e3779b97f4a7c15ull + 1) {
  tx_batch_.reserve(2 * kBurst);
  attached_.reserve(kQpSlots);
  liveness_fds_.reserve(kQpSlots);
  MutexLock lock(mu_);
  slot_used_.assign(kQpSlots, 0);
}

Result<void> Port::start() {
  static std::atomic<int> counter{0};
  const std::string name = "catena" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  // Room for a full path-MTU frame (headers, payload, pad, ICRC) in one mbuf.
  const auto room = static_cast<std::uint16_t>(RTE_PKTMBUF_HEADROOM + roce::kMaxHeaderLen + 4096 + 8);
  pool_ = rte_pktmbuf_pool_create((name + "p").c_str(), kPoolMbufs, 0, 0, room, SOCKET_ID_ANY);
  if (pool_ == nullptr)
    return make_error(Errc::resource_exhausted, std::string("mbuf pool: ") + rte_strerror(rte_errno));
  int id = -1;
  if (spec_.kind == PortSpec::Kind::ring) {
    // One ring is both directions: what the port transmits it receives.
    ring_ = rte_ring_create((name + "r").c_str(), kRingSize, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (ring_ == nullptr) {
      return make_error(Errc::resource_exhausted, std::string("ring: ") + rte_strerror(rte_errno));
    }
    rte_ring* rings[1] = {ring_};
    id = rte_eth_from_rings(name.c_str(), rings, 1, rings, 1, static_cast<unsigned>(SOCKET_ID_ANY));
    if (id < 0) return make_error(Errc::no_device, std::string("net_ring port: ") + rte_strerror(rte_errno));
  } else {
    ring_ = rte_ring_create((name + "l").c_str(), kRingSize, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (ring_ == nullptr) {
      return make_error(Errc::resource_exhausted, std::string("ring: ") + rte_strerror(rte_errno));
    }
    std::string args;
    if (spec_.kind == PortSpec::Kind::memif) {
      // A locally administered MAC of this process and port, so the two
      // ends of a memif wire always differ.
      char mac[32];
      const auto pid = static_cast<unsigned>(getpid());
      std::snprintf(mac, sizeof mac, "02:ca:%02x:%02x:%02x:%02x", (pid >> 16) & 0xff, (pid >> 8) & 0xff,
                    pid & 0xff, static_cast<unsigned>(counter.load()) & 0xff);
      // The memif server binds PATH and leaves the file behind when it goes:
      // a stale one would refuse the next server on the same path.
      if (spec_.memif_server) ::unlink(spec_.memif_socket.c_str());
      vdev_name_ = "net_memif_" + name;
      args = std::string("role=") + (spec_.memif_server ? "server" : "client") +
             ",socket=" + spec_.memif_socket + ",socket-abstract=no,id=0,bsize=8192,mac=" + mac;
    } else {
      // A kernel interface (a tap a VM sits on, a veth): the port uses its
      // MAC. Through the qdisc, so a sniffer on the interface sees both ways.
      vdev_name_ = "net_af_packet_" + name;
      args = "iface=" + spec_.iface + ",qpairs=1,blocksz=4096,framesz=4096,framecnt=1024,qdisc_bypass=0";
    }
    if (rte_vdev_init(vdev_name_.c_str(), args.c_str()) != 0) {
      vdev_name_.clear();
      return make_error(Errc::no_device, "DPDK port " + args + " did not start");
    }
    std::uint16_t pid16 = 0;
    if (rte_eth_dev_get_port_by_name(vdev_name_.c_str(), &pid16) != 0) {
      return make_error(Errc::no_device, "DPDK port " + vdev_name_ + " not found");
    }
    id = pid16;
  }
  port_id_ = static_cast<std::uint16_t>(id);
  rte_eth_conf conf{};
  if (rte_eth_dev_configure(port_id_, 1, 1, &conf) != 0 ||
      rte_eth_rx_queue_setup(port_id_, 0, kRingSize, SOCKET_ID_ANY, nullptr, pool_) != 0 ||
      rte_eth_tx_queue_setup(port_id_, 0, kRingSize, SOCKET_ID_ANY, nullptr) != 0 ||
      rte_eth_dev_start(port_id_) != 0) {
    return make_error(Errc::io_error, "cannot start DPDK port " + name);
  }
  port_started_ = true;
  rte_ether_addr mac{};
  rte_eth_macaddr_get(port_id_, &mac);
  std::copy(std::begin(mac.addr_bytes), std::end(mac.addr_bytes), mac_.begin());
  ipv4_ = spec_.ipv4 != 0                                              ? spec_.ipv4
          : spec_.kind == PortSpec::Kind::memif && !spec_.memif_server ? kMemifClientIpv4
                                                                       : kRingIpv4;
  thread_ = std::thread([this] { run(); });
  return {};
}

Port::~Port() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (port_started_) {
    (void)rte_eth_dev_stop(port_id_);
    (void)rte_eth_dev_close(port_id_);
  }
  if (!vdev_name_.empty()) {
    (void)rte_vdev_uninit(vdev_name_.c_str());
    if (spec_.memif_server) ::unlink(spec_.memif_socket.c_str());
  }
  if (memif_lock_fd_ >= 0) {
    ::unlink((spec_.memif_socket + ".lock").c_str());
    ::close(memif_lock_fd_);
  }
  if (ring_ != nullptr) {
    // Frames still on the wire go back to the pool before it goes.
    void* m = nullptr;
    while (rte_ring_dequeue(ring_, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
    rte_ring_free(ring_);
  }
  if (pool_ != nullptr) rte_mempool_free(pool_);
}

void Port::run_sync(const std::function<void()>& fn) {
  UniqueLock lock(mu_);
  const std::uint64_t ticket = commands_done_ + commands_.size() + 1;
  commands_.push_back(fn);
  commands_pending_.store(true, std::memory_order_release);
  lock.wait(cv_, [&] {
    mu_.assert_held();  // the wait holds it when it asks
    return commands_done_ >= ticket;
  });
}

std::uint32_t Port::next_qpn() {
  MutexLock lock(mu_);
  // The low bits pick the table slot; the high bits make a reused slot a new
  // QP number, so a late packet for an old QP is dropped.
  for (std::uint32_t tries = 0; tries < 2 * roce::kPsnMask; ++tries) {
    const std::uint32_t qpn = next_qpn_++ & roce::kPsnMask;
    if (qpn < 2 || slot_used_[qpn % kQpSlots] != 0) continue;  // 0 and 1 are InfiniBand's special QPs
    slot_used_[qpn % kQpSlots] = 1;
    return qpn;
  }
  return 0;
}

void Port::release_qpn(std::uint32_t qpn) {
  MutexLock lock(mu_);
  slot_used_[qpn % kQpSlots] = 0;
}

void Port::attach(Attachment* a) {
  run_sync([this, a] {
    attached_.push_back(a);
    qp_by_slot_[a->qp->qpn() % kQpSlots] = a->qp;
  });
}

void Port::detach(Attachment* a) {
  run_sync([this, a] {
    // Work posted just before the endpoint goes (a refusal) still leaves
    // once, as from a NIC that had sent it already; then the QP is gone.
    (void)a->qp->progress();
    std::erase(attached_, a);
    if (qp_by_slot_[a->qp->qpn() % kQpSlots] == a->qp) qp_by_slot_[a->qp->qpn() % kQpSlots] = nullptr;
  });
}

roce::RegionRecord* Port::acquire_record(std::uint32_t* index) {
  MutexLock lock(mu_);
  if (!free_records_.empty()) {
    *index = free_records_.back();
    free_records_.pop_back();
  } else {
    *index = static_cast<std::uint32_t>(records_.size());
    records_.emplace_back();
  }
  return &records_[*index];
}

void Port::release_record(std::uint32_t index) {
  MutexLock lock(mu_);
  free_records_.push_back(index);
}

void Port::quiesce() const {
  const std::uint64_t seq = pass_seq_.load();
  if ((seq & 1) == 0) return;
  while (pass_seq_.load() == seq) std::this_thread::yield();
}

std::uint32_t Port::free_mbufs() const noexcept {
  return rte_mempool_avail_count(pool_);
}

double Port::chance() noexcept {
  rng_ ^= rng_ << 13;
  rng_ ^= rng_ >> 7;
  rng_ ^= rng_ << 17;
  return static_cast<double>(rng_ >> 11) / 9007199254740992.0;
}

bool Port::send(const roce::Path& path, const roce::Packet& p) noexcept {
  if (tx_batch_.size() == kBurst) flush_tx();
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) {
    counters_.no_mbuf.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  const std::size_t len = roce::build_frame(
      path, p, ip_id_++, std::span<std::byte>(rte_pktmbuf_mtod(m, std::byte*), rte_pktmbuf_tailroom(m)));
  if (len == 0) {
    rte_pktmbuf_free(m);
    return false;
  }
  m->data_len = static_cast<std::uint16_t>(len);
  m->pkt_len = static_cast<std::uint32_t>(len);
  tx_batch_.push_back(m);
  return true;
}

void Port::flush_tx() noexcept {
  if (tx_batch_.empty()) return;
  if (spec_.loss > 0 || spec_.dup > 0 || spec_.reorder > 0) {
    // The fault shim: what a lossy switch would do to the frames.
    std::size_t kept = 0;
    for (rte_mbuf* m : tx_batch_) {
      if (chance() < spec_.loss) {
        rte_pktmbuf_free(m);
        counters_.dropped_by_shim.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      tx_batch_[kept++] = m;
    }
    tx_batch_.resize(kept);
    for (std::size_t i = 0, n = tx_batch_.size(); i < n && tx_batch_.size() < kBurst * 2; ++i) {
      if (chance() >= spec_.dup) continue;
      rte_mbuf* copy = rte_pktmbuf_copy(tx_batch_[i], pool_, 0, UINT32_MAX);
      if (copy != nullptr) tx_batch_.push_back(copy);
    }
    for (std::size_t i = 0; i + 1 < tx_batch_.size(); ++i) {
      if (chance() < spec_.reorder) std::swap(tx_batch_[i], tx_batch_[i + 1]);
    }
  }
  if (spec_.kind != PortSpec::Kind::ring) {
    // Frames to this port's own MAC never reach the wire: they loop back.
    std::size_t kept = 0;
    for (rte_mbuf* m : tx_batch_) {
      if (std::memcmp(rte_pktmbuf_mtod(m, const std::uint8_t*), mac_.data(), 6) != 0) {
        tx_batch_[kept++] = m;
      } else if (rte_ring_enqueue(ring_, m) != 0) {
        counters_.dropped_tx_full.fetch_add(1, std::memory_order_relaxed);
        rte_pktmbuf_free(m);
      }
    }
    tx_batch_.resize(kept);
  }
  const auto n = static_cast<std::uint16_t>(tx_batch_.size());
  const std::uint16_t sent = n == 0 ? 0 : rte_eth_tx_burst(port_id_, 0, tx_batch_.data(), n);
  counters_.tx_frames.fetch_add(sent, std::memory_order_relaxed);
  if (sent < n) counters_.dropped_tx_full.fetch_add(n - sent, std::memory_order_relaxed);
  for (std::uint16_t i = sent; i < n; ++i) rte_pktmbuf_free(tx_batch_[i]);  // the wire is full: lost
  tx_batch_.clear();
}

int Port::receive(rte_mbuf** rx, std::uint16_t n) noexcept {
  counters_.rx_frames.fetch_add(n, std::memory_order_relaxed);
  for (std::uint16_t i = 0; i < n; ++i) {
    roce::Packet p;
    // Every frame fits one mbuf (the pool's room is a full path-MTU frame).
    const auto st =
        rx[i]->nb_segs != 1
            ? roce::ParseStatus::malformed
            : roce::parse_frame(
                  std::span<const std::byte>(rte_pktmbuf_mtod(rx[i], const std::byte*), rx[i]->data_len), p);
    if (st == roce::ParseStatus::ok) {
      roce::RcQp* qp = qp_by_slot_[p.bth.dest_qpn % kQpSlots];
      if (qp != nullptr && qp->qpn() == p.bth.dest_qpn) qp->on_packet(p);
    } else if (st != roce::ParseStatus::not_roce) {
      counters_.bad_frames.fetch_add(1, std::memory_order_relaxed);
    } else if (roce::arp_reply_in_place(
                   std::span<std::byte>(rte_pktmbuf_mtod(rx[i], std::byte*), rx[i]->data_len), mac_, ipv4_)) {
      // The request's buffer goes back out as the reply.
      counters_.arp_replies.fetch_add(1, std::memory_order_relaxed);
      if (tx_batch_.size() == kBurst) flush_tx();
      tx_batch_.push_back(rx[i]);
      continue;
    }
    rte_pktmbuf_free(rx[i]);
  }
  return n;
}

int Port::pass() {
  int work = 0;
  if (commands_pending_.load(std::memory_order_acquire)) {
    UniqueLock lock(mu_);
    std::vector<std::function<void()>> todo;
    todo.swap(commands_);
    commands_pending_.store(false, std::memory_order_relaxed);
    for (auto& fn : todo) fn();
    commands_done_ += todo.size();
    cv_.notify_all();
    work += static_cast<int>(todo.size());
  }
  rte_mbuf* rx[kBurst];
  work += receive(rx, rte_eth_rx_burst(port_id_, 0, rx, kBurst));
  if (spec_.kind != PortSpec::Kind::ring) {
    work += receive(rx, static_cast<std::uint16_t>(
                            rte_ring_dequeue_burst(ring_, reinterpret_cast<void**>(rx), kBurst, nullptr)));
  }
  for (Attachment* a : attached_) work += a->qp->progress();
  flush_tx();
  return work;
}

void Port::check_liveness() {
  // One poll() over the connections' TCP sockets every few milliseconds:
  // housekeeping, not per message.
  std::vector<pollfd>& fds = liveness_fds_;
  fds.clear();
  for (Attachment* a : attached_) {
    if (!a->peer_gone.load(std::memory_order_relaxed)) fds.push_back(pollfd{a->liveness_fd, POLLIN, 0});
  }
  if (fds.empty() || ::poll(fds.data(), fds.size(), 0) <= 0) return;
  for (const pollfd& f : fds) {
    if (f.revents == 0) continue;
    char byte;
    if ((f.revents & (POLLHUP | POLLERR)) == 0 && ::recv(f.fd, &byte, 1, MSG_DONTWAIT) > 0) continue;
    for (Attachment* a : attached_) {
      if (a->liveness_fd != f.fd) continue;
      a->qp->set_error(WcStatus::flushed);
      a->peer_gone.store(true, std::memory_order_release);
    }
  }
}

int Port::try_pass(bool with_housekeeping) {
  if (pass_token_.exchange(true, std::memory_order_acquire)) return -1;
  pass_seq_.fetch_add(1);  // odd: in a pass
  const int work = pass();
  if (with_housekeeping) {
    const std::uint64_t now = now_ns();
    if (now >= next_liveness_ns_) {
      check_liveness();
      next_liveness_ns_ = now + kLivenessPeriodNs;
    }
  }
  pass_seq_.fetch_add(1);
  pass_token_.store(false, std::memory_order_release);
  return work;
}

void Port::run() {
  pthread_setname_np(pthread_self(), "catena-dpdk");
  // Not where the creating thread was pinned: an application that pins a
  // spinning thread to a core would otherwise starve its own progress.
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int cpu = 0; cpu < CPU_SETSIZE && cpu < static_cast<int>(std::thread::hardware_concurrency()); ++cpu) {
    CPU_SET(cpu, &all);
  }
  (void)pthread_setaffinity_np(pthread_self(), sizeof all, &all);
  BackoffIdle idle;
  while (!stop_.load(std::memory_order_relaxed)) {
    // A polling application thread running the pass counts as no work
    // here: this thread backs off while someone else drives the port.
    idle.idle(std::max(try_pass(true), 0));
  }
}

}  // namespace catena::fabric::dpdk
