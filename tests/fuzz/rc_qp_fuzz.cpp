// The dpdk provider's RC queue pair (fabric/src/dpdk/rc_*.cpp) acting on
// packets from a peer that may say anything: requests at any PSN, with any
// key, address and length, ACKs and NAKs for PSNs never sent, read
// responses nobody asked for, messages cut short or too long; while the
// application posts sends and receives and time moves on. Every packet goes
// through build_frame() and parse_frame() first, as on the wire: the engine
// sees only what a port would hand it.
//
// Properties:
// - memory: a region without remote write access, and a region after it was
//   destroyed, are never written (compared byte for byte at the end);
//   AddressSanitizer sees every access outside the buffers;
// - what the engine sends parses back to itself and carries at most a path
//   MTU of payload;
// - completions: each posted work request completes at most once, with a
//   status that exists; a receive completes with no more bytes than it
//   posted; once the QP is in the error state, every request still posted
//   completes (flushed) and none is lost.
#include <array>
#include <cstdint>
#include <cstring>
#include <fuzzer/FuzzedDataProvider.h>
#include <map>
#include <vector>

#include <catena/fabric/clock.hpp>

#include "dpdk/rc_engine.hpp"
#include "fuzz_check.hpp"

using namespace catena::fabric;
using namespace catena::fabric::roce;

namespace {

struct Region {
  Region(std::size_t n, std::uint32_t access) : bytes(n) {
    for (std::size_t i = 0; i < n; ++i) bytes[i] = std::byte(static_cast<std::uint8_t>(i * 7 + 1));
    rec.base = bytes.data();
    rec.length = n;
    rec.access = access;
  }
  RegionRef ref() const { return RegionRef{&rec, rec.generation.load()}; }
  std::vector<std::byte> bytes;
  RegionRecord rec;
};

// The wire toward the peer: checks every packet the engine sends.
class Sink final : public PacketOut {
 public:
  explicit Sink(std::uint32_t mtu) : mtu_(mtu) {}
  bool send(const Path& path, const Packet& p) noexcept override {
    if (refuse) return false;
    std::vector<std::byte> f(frame_length(p.bth.opcode, p.payload_len));
    FUZZ_CHECK(build_frame(path, p, 0, f) == f.size());
    Packet r;
    FUZZ_CHECK(parse_frame(f, r) == ParseStatus::ok);
    FUZZ_CHECK(r.payload_len == p.payload_len && r.payload_len <= mtu_);
    last_psn[static_cast<std::size_t>(r.bth.opcode == static_cast<std::uint8_t>(Op::acknowledge))] =
        r.bth.psn;
    ++sent;
    return true;
  }
  bool refuse = false;
  std::uint64_t sent = 0;
  std::array<std::uint32_t, 2> last_psn{};  // [0] the last request or response, [1] the last ACK

 private:
  std::uint32_t mtu_;
};

bool known(WcStatus s) {
  switch (s) {
    case WcStatus::success:
    case WcStatus::remote_access_error:
    case WcStatus::local_protection_error:
    case WcStatus::local_length_error:
    case WcStatus::flushed:
    case WcStatus::retry_exceeded:
    case WcStatus::general_error:
      return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  static constexpr std::uint32_t kMtus[] = {256, 1024, 4096};
  QpConfig cfg;
  cfg.mtu = kMtus[in.ConsumeIntegralInRange(0, 2)];
  cfg.sq_depth = in.ConsumeIntegralInRange<std::uint32_t>(1, 16);
  cfg.rq_depth = in.ConsumeIntegralInRange<std::uint32_t>(1, 16);
  cfg.window = in.ConsumeIntegralInRange<std::uint32_t>(1, 64);
  cfg.max_reads = in.ConsumeIntegralInRange<std::uint32_t>(1, 4);
  cfg.read_burst = in.ConsumeIntegralInRange<std::uint32_t>(1, 8);
  cfg.ack_every = in.ConsumeIntegralInRange<std::uint32_t>(1, 8);
  cfg.retry_limit = in.ConsumeIntegralInRange<std::uint32_t>(0, 4);
  cfg.ack_timeout_ns = 100'000;
  cfg.max_ack_timeout_ns = 400'000;
  cfg.rnr_delay_ns = 50'000;

  catena::ManualClock clock;
  Sink sink(cfg.mtu);
  RcQp qp(cfg, 0x111, sink, clock);
  Path path;
  path.dest_qpn = 0x222;
  const std::uint32_t send_psn = in.ConsumeIntegral<std::uint32_t>() & kPsnMask;
  std::uint32_t peer_psn = in.ConsumeIntegral<std::uint32_t>() & kPsnMask;  // the peer's next request PSN
  qp.connect(path, send_psn, peer_psn);

  Region writable(in.ConsumeIntegralInRange<std::size_t>(1, 3 * 4096), kRemoteWrite | kRemoteRead);
  Region readonly(in.ConsumeIntegralInRange<std::size_t>(1, 4096), kRemoteRead);
  Region doomed(in.ConsumeIntegralInRange<std::size_t>(1, 4096), kRemoteWrite | kRemoteRead);
  Region local(3 * 4096, kLocalWrite);
  Region receive(2 * 4096, kLocalWrite);
  const std::vector<std::byte> readonly_before = readonly.bytes;
  std::vector<std::byte> doomed_after;  // its bytes when it was destroyed
  const std::array<std::uint32_t, 3> keys{qp.keys().add(writable.rec), qp.keys().add(readonly.rec),
                                          qp.keys().add(doomed.rec)};

  std::map<std::uint64_t, std::uint32_t> sends;     // posted, not completed: wr_id -> length
  std::map<std::uint64_t, std::uint32_t> receives;  // the same for receives
  std::uint64_t next_wr = 1;

  auto poll = [&] {
    Completion c[8];
    for (int n; (n = qp.poll_send(c, 8)) > 0;) {
      for (int i = 0; i < n; ++i) {
        FUZZ_CHECK(known(c[i].status));
        FUZZ_CHECK(sends.erase(c[i].wr_id) == 1);
      }
    }
    for (int n; (n = qp.poll_recv(c, 8)) > 0;) {
      for (int i = 0; i < n; ++i) {
        FUZZ_CHECK(known(c[i].status));
        auto it = receives.find(c[i].wr_id);
        FUZZ_CHECK(it != receives.end());
        if (c[i].status == WcStatus::success && c[i].opcode == Opcode::recv)
          FUZZ_CHECK(c[i].byte_len <= it->second);
        receives.erase(it);
      }
    }
  };

  // A packet from the peer, through the wire format.
  auto deliver = [&](Packet p) {
    p.bth.dest_qpn = qp.qpn();
    std::vector<std::byte> f(frame_length(p.bth.opcode, layout_of(p.bth.opcode).payload ? p.payload_len : 0));
    if (!layout_of(p.bth.opcode).payload) p.payload_len = 0;
    if (build_frame(path, p, 0, f) != f.size()) return;
    Packet got;
    if (parse_frame(f, got) != ParseStatus::ok) return;
    qp.on_packet(got);
  };
  auto pick_psn = [&](std::uint32_t base) {
    switch (in.ConsumeIntegralInRange(0, 3)) {
      case 0:
        return base;
      case 1:
        return psn_add(base, in.ConsumeIntegralInRange<std::uint32_t>(0, 8));
      case 2:
        return psn_add(base, kPsnMask + 1 - in.ConsumeIntegralInRange<std::uint32_t>(1, 8));
      default:
        return in.ConsumeIntegral<std::uint32_t>() & kPsnMask;
    }
  };
  auto pick_key = [&] {
    const int k = in.ConsumeIntegralInRange(0, 3);
    return k < 3 ? keys[static_cast<std::size_t>(k)] : in.ConsumeIntegral<std::uint32_t>();
  };
  std::vector<std::uint8_t> payload;

  while (in.remaining_bytes() > 0) {
    switch (in.ConsumeIntegralInRange(0, 9)) {
      case 0:
      case 1: {  // a request from the peer
        Packet p;
        p.bth.opcode = in.ConsumeIntegralInRange<std::uint8_t>(0, 0x0c);
        p.bth.psn = pick_psn(peer_psn);
        p.bth.ack_req = in.ConsumeBool();
        p.reth = Reth{in.ConsumeBool() ? in.ConsumeIntegralInRange<std::uint64_t>(0, 4 * 4096)
                                       : in.ConsumeIntegral<std::uint64_t>(),
                      pick_key(),
                      in.ConsumeBool() ? in.ConsumeIntegralInRange<std::uint32_t>(0, 3 * 4096)
                                       : in.ConsumeIntegral<std::uint32_t>()};
        p.imm = in.ConsumeIntegral<std::uint32_t>();
        const std::uint32_t len =
            in.ConsumeBool() ? cfg.mtu : in.ConsumeIntegralInRange<std::uint32_t>(0, cfg.mtu + 8);
        payload = in.ConsumeBytes<std::uint8_t>(len);
        payload.resize(len, 0x5a);
        p.payload = reinterpret_cast<const std::byte*>(payload.data());
        p.payload_len = len;
        deliver(p);
        if (p.bth.psn == peer_psn) {
          peer_psn = psn_add(peer_psn, static_cast<Op>(p.bth.opcode) == Op::read_request
                                           ? (p.reth.dma_len + cfg.mtu - 1) / cfg.mtu + (p.reth.dma_len == 0)
                                           : 1);
        }
        break;
      }
      case 2: {  // an ACK or a NAK
        Packet p;
        p.bth.opcode = static_cast<std::uint8_t>(Op::acknowledge);
        p.bth.psn = pick_psn(sink.last_psn[0]);
        static constexpr std::uint8_t kSyndromes[] = {kAethAck,
                                                      kAethRnrNak | 1,
                                                      kAethNakPsnSeq,
                                                      kAethNakInvalidRequest,
                                                      kAethNakRemoteAccess,
                                                      kAethNakRemoteOperational};
        p.aeth = Aeth{in.ConsumeBool() ? kSyndromes[in.ConsumeIntegralInRange(0, 5)]
                                       : in.ConsumeIntegral<std::uint8_t>(),
                      in.ConsumeIntegral<std::uint32_t>() & kPsnMask};
        deliver(p);
        break;
      }
      case 3: {  // a read response
        Packet p;
        p.bth.opcode = in.ConsumeIntegralInRange<std::uint8_t>(0x0d, 0x10);
        p.bth.psn = pick_psn(sink.last_psn[0]);
        p.aeth = Aeth{kAethAck, 0};
        const std::uint32_t len =
            in.ConsumeBool() ? cfg.mtu : in.ConsumeIntegralInRange<std::uint32_t>(0, cfg.mtu);
        payload = in.ConsumeBytes<std::uint8_t>(len);
        payload.resize(len, 0xa5);
        p.payload = reinterpret_cast<const std::byte*>(payload.data());
        p.payload_len = len;
        deliver(p);
        break;
      }
      case 4: {  // the application posts a receive
        const std::uint32_t off = in.ConsumeIntegralInRange<std::uint32_t>(0, 4096);
        const std::uint32_t len = in.ConsumeIntegralInRange<std::uint32_t>(0, 4096);
        RecvWqe w{next_wr, receive.bytes.data() + off, len, receive.ref()};
        if (qp.post_recv(w) == catena::fabric::Errc::ok) receives[next_wr] = len;
        ++next_wr;
        break;
      }
      case 5: {  // the application posts a send, write or read
        SendWqe w;
        w.wr_id = next_wr;
        w.op = static_cast<SendOp>(in.ConsumeIntegralInRange(0, 3));
        const std::uint32_t off = in.ConsumeIntegralInRange<std::uint32_t>(0, 4096);
        w.length = in.ConsumeIntegralInRange<std::uint32_t>(0, 2 * 4096);
        w.local = local.bytes.data() + off;
        w.region = local.ref();
        w.rkey = in.ConsumeIntegral<std::uint32_t>();
        w.remote_offset = in.ConsumeIntegralInRange<std::uint64_t>(0, 8192);
        w.imm = in.ConsumeIntegral<std::uint32_t>();
        if (qp.post_send(w) == catena::fabric::Errc::ok) sends[next_wr] = w.length;
        ++next_wr;
        break;
      }
      case 6:  // time passes; the progress thread runs
        clock.advance(std::chrono::microseconds(in.ConsumeIntegralInRange(0, 500)));
        sink.refuse = in.ConsumeIntegralInRange(0, 7) == 0;
        qp.progress();
        sink.refuse = false;
        break;
      case 7:
        poll();
        break;
      case 8:  // the doomed region is destroyed (its key stays in the table)
        if (doomed_after.empty()) {
          doomed.rec.generation.fetch_add(1);
          doomed_after = doomed.bytes;
        }
        break;
      default:
        for (int i = in.ConsumeIntegralInRange(1, 8); i > 0; --i) qp.progress();
        break;
    }
  }
  FUZZ_CHECK(readonly.bytes == readonly_before);
  if (!doomed_after.empty()) FUZZ_CHECK(doomed.bytes == doomed_after);
  // The end of the connection: everything still posted completes.
  poll();
  qp.set_error(WcStatus::flushed);
  for (int i = 0; i < 4; ++i) qp.progress();
  poll();
  FUZZ_CHECK(sends.empty());
  FUZZ_CHECK(receives.empty());
  return 0;
}
