// The dpdk provider's RC engine without DPDK: two queue pairs joined by a
// simulated wire (real frames: built, ICRC'd and parsed) that drops,
// duplicates and reorders packets from a seed, stepped on a manual clock
// from one thread. A failing seed replays exactly.
#include "dpdk/rc_engine.hpp"

#include <cstring>
#include <deque>
#include <gtest/gtest.h>
#include <random>
#include <vector>

namespace catena::fabric::roce {
namespace {

struct Faults {
  double loss = 0;
  double dup = 0;
  double reorder = 0;
  bool cut = false;  // drop everything
};

// Frames in flight, delivered by Harness::step.
class Wire final : public PacketOut {
 public:
  explicit Wire(std::uint64_t seed) : rng_(seed) {}
  bool send(const Path& path, const Packet& p) noexcept override {
    std::vector<std::byte> f(frame_length(p.bth.opcode, p.payload_len));
    if (build_frame(path, p, ip_id_++, f) != f.size()) return false;
    ++sent;
    if (faults.cut || chance() < faults.loss) return true;
    queue.push_back(f);
    if (chance() < faults.dup) queue.push_back(f);
    if (queue.size() >= 2 && chance() < faults.reorder) std::swap(queue.back(), queue[queue.size() - 2]);
    return true;
  }
  double chance() { return std::uniform_real_distribution<double>(0, 1)(rng_); }

  Faults faults;
  std::deque<std::vector<std::byte>> queue;
  std::uint64_t sent = 0;

 private:
  std::mt19937_64 rng_;
  std::uint16_t ip_id_ = 0;
};

Path path_to(std::uint32_t qpn) {
  Path p;
  p.src_ip = 0x0a000001;
  p.dst_ip = 0x0a000001;
  p.dest_qpn = qpn;
  return p;
}

struct Region {
  explicit Region(std::size_t n, std::uint32_t access) : bytes(n) {
    rec.base = bytes.data();
    rec.length = n;
    rec.access = access;
  }
  std::vector<std::byte> bytes;
  RegionRecord rec;
};

class Harness {
 public:
  explicit Harness(std::uint64_t seed, QpConfig cfg = small_mtu())
      : wire(seed), a(cfg, 0x101, wire, clock), b(cfg, 0x202, wire, clock) {
    a.connect(path_to(b.qpn()), 100, 0xfffff0);  // b's first PSN is near the wrap
    b.connect(path_to(a.qpn()), 0xfffff0, 100);
  }
  static QpConfig small_mtu() {
    QpConfig c;
    c.mtu = 1024;
    c.ack_timeout_ns = 200'000;
    c.max_ack_timeout_ns = 2'000'000;
    c.rnr_delay_ns = 50'000;
    return c;
  }

  // Delivers what is on the wire, runs both engines, moves time on 10 us.
  void step() {
    for (std::size_t n = wire.queue.size(); n > 0 && !wire.queue.empty(); --n) {
      std::vector<std::byte> f = std::move(wire.queue.front());
      wire.queue.pop_front();
      Packet p;
      ASSERT_EQ(parse_frame(f, p), ParseStatus::ok);
      (p.bth.dest_qpn == a.qpn() ? a : b).on_packet(p);
    }
    a.progress();
    b.progress();
    clock.advance(std::chrono::microseconds(10));
  }
  template <class Pred>
  bool run_until(Pred done, int max_steps = 200'000) {
    for (int i = 0; i < max_steps; ++i) {
      if (done()) return true;
      step();
    }
    return done();
  }
  Completion wait_send(RcQp& qp) {
    Completion c{};
    c.status = WcStatus::general_error;
    EXPECT_TRUE(run_until([&] { return qp.poll_send(&c, 1) == 1; })) << "no send completion";
    return c;
  }
  Completion wait_recv(RcQp& qp) {
    Completion c{};
    c.status = WcStatus::general_error;
    EXPECT_TRUE(run_until([&] { return qp.poll_recv(&c, 1) == 1; })) << "no receive completion";
    return c;
  }

  catena::ManualClock clock;
  Wire wire;
  RcQp a;
  RcQp b;
};

void fill(std::vector<std::byte>& v, std::size_t off, std::size_t len, std::uint32_t seed) {
  for (std::size_t i = 0; i < len; ++i) v[off + i] = std::byte(static_cast<std::uint8_t>(seed * 31 + i * 7));
}
bool check(const std::vector<std::byte>& v, std::size_t off, std::size_t len, std::uint32_t seed) {
  for (std::size_t i = 0; i < len; ++i) {
    if (v[off + i] != std::byte(static_cast<std::uint8_t>(seed * 31 + i * 7))) return false;
  }
  return true;
}

SendWqe wqe(SendOp op, std::uint64_t id, std::byte* local, std::uint32_t len, std::uint32_t rkey,
            std::uint64_t off, std::uint32_t imm = 0) {
  SendWqe w;
  w.op = op;
  w.wr_id = id;
  w.local = local;
  w.length = len;
  w.rkey = rkey;
  w.remote_offset = off;
  w.imm = imm;
  return w;
}

TEST(RcEngine, WriteReadSendAcrossSizesAndTheMtu) {
  Harness h(1);
  Region src(1 << 16, kLocalWrite), dst(1 << 16, kRemoteWrite | kRemoteRead), back(1 << 16, kLocalWrite),
      rbuf(1 << 16, kLocalWrite);
  const std::uint32_t key = h.b.keys().add(dst.rec);
  std::uint32_t seed = 1;
  for (std::uint32_t len : {1u, 3u, 1023u, 1024u, 1025u, 4096u, 10000u, 65536u}) {
    fill(src.bytes, 0, len, seed);
    ASSERT_EQ(h.a.post_send(wqe(SendOp::write, 1, src.bytes.data(), len, key, 0)), Errc::ok);
    EXPECT_EQ(h.wait_send(h.a).status, WcStatus::success) << len;
    EXPECT_TRUE(check(dst.bytes, 0, len, seed)) << len;
    ASSERT_EQ(h.a.post_send(wqe(SendOp::read, 2, back.bytes.data(), len, key, 0)), Errc::ok);
    Completion c = h.wait_send(h.a);
    EXPECT_EQ(c.status, WcStatus::success);
    EXPECT_EQ(c.opcode, Opcode::read);
    EXPECT_TRUE(check(back.bytes, 0, len, seed)) << len;
    RecvWqe r{3, rbuf.bytes.data(), 1 << 16, {}};
    ASSERT_EQ(h.b.post_recv(r), Errc::ok);
    ASSERT_EQ(h.a.post_send(wqe(SendOp::send, 4, src.bytes.data(), len, 0, 0)), Errc::ok);
    c = h.wait_recv(h.b);
    EXPECT_EQ(c.status, WcStatus::success);
    EXPECT_EQ(c.byte_len, len);
    EXPECT_TRUE(check(rbuf.bytes, 0, len, seed));
    EXPECT_EQ(h.wait_send(h.a).status, WcStatus::success);
    ++seed;
  }
  EXPECT_EQ(h.a.stats().retransmits, 0u);
}

// The same mixed stream of writes with immediate and reads over a wire that
// loses, duplicates and reorders: every payload lands, every immediate
// arrives once and in order, every completion is a success, in order.
class LossyWire : public ::testing::TestWithParam<int> {};

TEST_P(LossyWire, EverythingArrivesOnceInOrder) {
  const auto seed = static_cast<std::uint64_t>(GetParam());
  Harness h(seed);
  h.wire.faults = Faults{0.05, 0.03, 0.05, false};
  constexpr std::uint32_t kSlot = 3000;
  constexpr std::uint32_t kSlots = 8;
  constexpr int kOps = 300;
  Region src(kSlot * kSlots, kLocalWrite), dst(kSlot * kSlots, kRemoteWrite | kRemoteRead),
      back(kSlot * kSlots, kLocalWrite);
  const std::uint32_t key = h.b.keys().add(dst.rec);
  int posted = 0, completed = 0, received = 0;
  const int window = 4;
  for (int i = 0; i < window; ++i)
    ASSERT_EQ(h.b.post_recv(RecvWqe{static_cast<std::uint64_t>(i), nullptr, 0, {}}), Errc::ok);
  auto len_of = [](int i) { return 1 + static_cast<std::uint32_t>(i) * 977 % kSlot; };
  const bool ok = h.run_until([&] {
    while (posted < kOps && posted - completed < window) {
      const std::uint32_t slot = static_cast<std::uint32_t>(posted) % kSlots;
      if (posted % 3 == 2) {  // read back what an earlier write put there
        EXPECT_EQ(h.a.post_send(
                      wqe(SendOp::read, posted, back.bytes.data() + slot * kSlot, kSlot, key, slot * kSlot)),
                  Errc::ok);
      } else {
        fill(src.bytes, slot * kSlot, len_of(posted), posted);
        EXPECT_EQ(h.a.post_send(wqe(SendOp::write_imm, posted, src.bytes.data() + slot * kSlot,
                                    len_of(posted), key, slot * kSlot, static_cast<std::uint32_t>(posted))),
                  Errc::ok);
      }
      ++posted;
    }
    Completion c;
    while (h.a.poll_send(&c, 1) == 1) {
      EXPECT_EQ(c.status, WcStatus::success) << "op " << c.wr_id;
      EXPECT_EQ(c.wr_id, static_cast<std::uint64_t>(completed));
      if (c.opcode == Opcode::read) {
        const std::uint32_t slot = static_cast<std::uint32_t>(c.wr_id) % kSlots;
        EXPECT_TRUE(std::memcmp(back.bytes.data() + slot * kSlot, dst.bytes.data() + slot * kSlot, kSlot) ==
                    0);
      }
      ++completed;
    }
    while (h.b.poll_recv(&c, 1) == 1) {
      EXPECT_EQ(c.status, WcStatus::success);
      EXPECT_EQ(c.opcode, Opcode::recv_write_imm);
      int expect = received + received / 2;  // writes are the ops i with i % 3 != 2
      EXPECT_EQ(c.imm, static_cast<std::uint32_t>(expect)) << "immediates out of order or repeated";
      EXPECT_EQ(c.byte_len, len_of(expect));
      EXPECT_TRUE(
          check(dst.bytes, (static_cast<std::uint32_t>(expect) % kSlots) * kSlot, len_of(expect), expect));
      ++received;
      EXPECT_EQ(h.b.post_recv(RecvWqe{static_cast<std::uint64_t>(received), nullptr, 0, {}}), Errc::ok);
    }
    return completed == kOps && received == kOps - kOps / 3;
  });
  EXPECT_TRUE(ok) << "seed " << seed << ": " << completed << " completed, " << received << " received";
  EXPECT_GT(h.a.stats().retransmits + h.b.stats().duplicates, 0u) << "the faults never hit";
  EXPECT_EQ(h.a.state(), QpState::ready);
}

INSTANTIATE_TEST_SUITE_P(Seeds, LossyWire, ::testing::Range(1, 21));

TEST(RcEngine, BadKeyIsRemoteAccessErrorAndChangesNothing) {
  Harness h(2);
  Region src(8192, kLocalWrite), dst(4096, kRemoteWrite);
  fill(src.bytes, 0, 8192, 9);
  const std::uint32_t key = h.b.keys().add(dst.rec);
  ASSERT_EQ(h.a.post_send(wqe(SendOp::write, 1, src.bytes.data(), 4096, key ^ 0x5a5a0000u, 0)), Errc::ok);
  ASSERT_EQ(h.a.post_send(wqe(SendOp::write, 2, src.bytes.data(), 64, key, 0)), Errc::ok);
  Completion c = h.wait_send(h.a);
  EXPECT_EQ(c.wr_id, 1u);
  EXPECT_EQ(c.status, WcStatus::remote_access_error);
  c = h.wait_send(h.a);
  EXPECT_EQ(c.wr_id, 2u);
  EXPECT_EQ(c.status, WcStatus::flushed);
  EXPECT_EQ(h.a.state(), QpState::error);
  for (auto x : dst.bytes) ASSERT_EQ(x, std::byte{0});
}

TEST(RcEngine, OutOfBoundsMissingRightAndDestroyedRegionAreRefused) {
  for (int variant = 0; variant < 3; ++variant) {
    Harness h(3);
    Region src(8192, kLocalWrite), dst(4096, variant == 1 ? kRemoteRead : kRemoteWrite);
    const std::uint32_t key = h.b.keys().add(dst.rec);
    if (variant == 2) dst.rec.generation.fetch_add(1);
    const std::uint32_t len = variant == 0 ? 4097 : 64;
    ASSERT_EQ(h.a.post_send(wqe(SendOp::write, 1, src.bytes.data(), len, key, 0)), Errc::ok);
    EXPECT_EQ(h.wait_send(h.a).status, WcStatus::remote_access_error) << variant;
  }
}

TEST(RcEngine, ZeroLengthWriteNeedsNoKeyAndStillDeliversItsImmediate) {
  Harness h(4);
  Region src(64, kLocalWrite);
  ASSERT_EQ(h.b.post_recv(RecvWqe{9, nullptr, 0, {}}), Errc::ok);
  ASSERT_EQ(h.a.post_send(wqe(SendOp::write_imm, 1, src.bytes.data(), 0, 0xbad, 128, 0xabcd)), Errc::ok);
  EXPECT_EQ(h.wait_send(h.a).status, WcStatus::success);
  Completion r = h.wait_recv(h.b);
  EXPECT_EQ(r.imm, 0xabcdu);
  EXPECT_EQ(r.byte_len, 0u);
}

TEST(RcEngine, SendWithoutReceiveWaitsOnRnrUntilOneIsPosted) {
  Harness h(5);
  Region src(64, kLocalWrite), rbuf(64, kLocalWrite);
  fill(src.bytes, 0, 64, 42);
  ASSERT_EQ(h.a.post_send(wqe(SendOp::send, 1, src.bytes.data(), 64, 0, 0)), Errc::ok);
  for (int i = 0; i < 2000; ++i) h.step();  // 20 ms: far past the retry limit's time
  Completion c;
  EXPECT_EQ(h.a.poll_send(&c, 1), 0);
  EXPECT_GT(h.b.stats().rnr_naks_sent, 10u);
  // Slow RNR NAKs (later than the ACK timeout) are answers too: the wait
  // never turns into retry_exceeded.
  h.wire.faults.loss = 0.1;
  for (int i = 0; i < 5000; ++i) h.step();
  EXPECT_EQ(h.a.state(), QpState::ready);
  EXPECT_EQ(h.a.state(), QpState::ready);
  h.wire.faults.loss = 0;
  ASSERT_EQ(h.b.post_recv(RecvWqe{7, rbuf.bytes.data(), 64, {}}), Errc::ok);
  c = h.wait_recv(h.b);
  EXPECT_EQ(c.wr_id, 7u);
  EXPECT_TRUE(check(rbuf.bytes, 0, 64, 42));
  EXPECT_EQ(h.wait_send(h.a).status, WcStatus::success);
}

TEST(RcEngine, SilentPeerEndsInRetryExceededThenFlushes) {
  Harness h(6);
  Region src(64, kLocalWrite), dst(64, kRemoteWrite);
  const std::uint32_t key = h.b.keys().add(dst.rec);
  h.wire.faults.cut = true;
  ASSERT_EQ(h.a.post_send(wqe(SendOp::write, 1, src.bytes.data(), 8, key, 0)), Errc::ok);
  ASSERT_EQ(h.a.post_send(wqe(SendOp::write, 2, src.bytes.data(), 8, key, 0)), Errc::ok);
  Completion c = h.wait_send(h.a);
  EXPECT_EQ(c.wr_id, 1u);
  EXPECT_EQ(c.status, WcStatus::retry_exceeded);
  EXPECT_EQ(h.wait_send(h.a).status, WcStatus::flushed);
  EXPECT_EQ(h.a.stats().timeouts, h.a.config().retry_limit + 1);
}

TEST(RcEngine, ReceiveTooSmallIsALengthErrorAtTheTarget) {
  Harness h(7);
  Region src(4096, kLocalWrite), rbuf(16, kLocalWrite);
  ASSERT_EQ(h.b.post_recv(RecvWqe{1, rbuf.bytes.data(), 16, {}}), Errc::ok);
  ASSERT_EQ(h.a.post_send(wqe(SendOp::send, 1, src.bytes.data(), 2000, 0, 0)), Errc::ok);
  EXPECT_EQ(h.wait_recv(h.b).status, WcStatus::local_length_error);
  EXPECT_NE(h.wait_send(h.a).status, WcStatus::success);
}

TEST(RcEngine, QueuesFillAtTheirDepth) {
  QpConfig cfg = Harness::small_mtu();
  cfg.sq_depth = 8;
  cfg.rq_depth = 4;
  Harness h(8, cfg);
  Region src(64, kLocalWrite), dst(64, kRemoteWrite);
  const std::uint32_t key = h.b.keys().add(dst.rec);
  for (int i = 0; i < 8; ++i)
    ASSERT_EQ(h.a.post_send(wqe(SendOp::write, i, src.bytes.data(), 8, key, 0)), Errc::ok);
  EXPECT_EQ(h.a.post_send(wqe(SendOp::write, 9, src.bytes.data(), 8, key, 0)), Errc::backpressure);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(h.b.post_recv(RecvWqe{0, nullptr, 0, {}}), Errc::ok);
  EXPECT_EQ(h.b.post_recv(RecvWqe{0, nullptr, 0, {}}), Errc::backpressure);
  Completion c[8];
  int got = 0;
  EXPECT_TRUE(h.run_until([&] { return (got += h.a.poll_send(c, 8)) == 8; }));
}

}  // namespace
}  // namespace catena::fabric::roce
