// `catena bench`: the catena measurements, each on a Publisher the caller
// set up (see bench.cpp for what each figure means).
#include <algorithm>
#include <atomic>
#include <charconv>
#include <string>
#include <string_view>
#include <thread>

#include <catena/broker/publisher.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/fabric/clock.hpp>
#include <catena/fabric/idle.hpp>

#include "bench_parts.hpp"
#include "floors.hpp"

namespace catena::cli::bench_detail {

using namespace std::chrono_literals;
using catena::bench::now_ns;

// --- catena measurements -------------------------------------------------------------------

std::vector<std::byte> make_payload(std::uint32_t bytes) {
  std::vector<std::byte> p(bytes);
  for (std::uint32_t i = 0; i < bytes; ++i) p[i] = static_cast<std::byte>('a' + i % 26);
  return p;
}

std::string tagged_record(std::string_view tag, std::uint64_t id, std::size_t bytes) {
  std::string s = std::string(tag) + ":" + std::to_string(id) + ":";
  s.resize(std::max(bytes, s.size()), 'x');
  return s;
}

std::uint64_t tagged_id(std::string_view tag, std::span<const std::byte> payload) {
  const std::string_view p(reinterpret_cast<const char*>(payload.data()), payload.size());
  if (p.size() <= tag.size() + 1 || p.substr(0, tag.size()) != tag || p[tag.size()] != ':') return ~0ull;
  std::uint64_t id = 0;
  const char* first = p.data() + tag.size() + 1;
  const auto [end, ec] = std::from_chars(first, p.data() + p.size(), id);
  return ec == std::errc() && end != first ? id : ~0ull;
}

// Keeps the pipeline full for `seconds` (or until `max_records` were acked,
// if not 0), then waits for the last acks. Between two polls it publishes
// up to `rounds` rounds over the partitions (at least 256 records), as an
// application with records queued for many partitions would: a poll visits
// every partition's session, and with one record per partition per poll
// (256 partitions) that visit cost as much as the record and every flush
// sent one record.
Throughput throughput(Publisher& pub, std::uint32_t bytes, double seconds, std::uint64_t max_records,
                      std::uint32_t partitions, std::uint32_t rounds) {
  if (partitions == 0) throw Fail{"throughput: a channel has at least one partition"};
  const auto payload = make_payload(bytes);
  // What the acks update, behind one pointer: the callback (this and the
  // publish time) fits std::function's inline storage (16 bytes with
  // libstdc++), so a publish allocates nothing (a larger capture cost a
  // malloc and a free per record, 7% of the publisher's cycles).
  struct Acks {
    Throughput out;
    std::uint64_t failed = 0;
    std::string first_failure;
  } acks;
  Throughput& out = acks.out;
  out.ack_ns.reserve(1u << 20);
  fabric::BackoffIdle idle;
  const std::uint64_t start = now_ns();
  const std::uint64_t end = start + static_cast<std::uint64_t>(seconds * 1e9);
  std::uint64_t now = start;
  std::uint32_t next = 0;  // the partition of the next record
  const std::uint32_t per_poll =
      std::max<std::uint32_t>(256, std::max<std::uint32_t>(rounds, 1) * partitions);
  while (now < end && (max_records == 0 || out.acked < max_records)) {
    int work = 0;
    for (std::uint32_t k = 0; k < per_poll; ++k) {
      const auto e = pub.publish_to(next, payload, [a = &acks, t0 = now](const PublishResult& r) {
        if (r.status != PublishStatus::ok) {
          if (a->failed++ == 0) {
            a->first_failure =
                "partition " + std::to_string(r.partition) + ": " + std::string(client::to_string(r.error()));
          }
          return;
        }
        ++a->out.acked;
        if (a->out.ack_ns.size() < a->out.ack_ns.capacity()) a->out.ack_ns.push_back(now_ns() - t0);
      });
      if (e == client::ErrorCode::backpressure) break;
      if (e != client::ErrorCode::ok) throw Fail{"publish: " + std::string(client::to_string(e))};
      ++work;
      if (++next == partitions) next = 0;
    }
    work += pub.poll();
    idle.idle(work);
    now = now_ns();
  }
  if (!pub.flush(30s)) throw Fail{"flush timed out"};
  out.elapsed_ns = now_ns() - start;
  if (acks.failed > 0)
    throw Fail{std::to_string(acks.failed) + " records refused, the first " + acks.first_failure};
  return std::move(out);
}

// One lap through every segment slot of a channel's log, pipelined. Until a
// page of the log has been touched in every process that maps it (the
// publisher's image of the head's ring, each replica's slots and its image of
// its successor's, a subscriber's ring), each first touch is a page fault,
// ~20 us each on this kind of VM: a short run would measure the faults, which
// a long-running broker pays once. Returns MB/s of that lap.
double warm_log(Publisher& pub, int slots, std::int64_t segment_bytes, std::uint64_t* bytes_out) {
  const std::uint32_t wb = 64u << 10;
  const std::uint64_t lap = static_cast<std::uint64_t>(slots) * static_cast<std::uint64_t>(segment_bytes);
  Throughput w = throughput(pub, wb, 120.0, lap / wb + 1);
  *bytes_out = w.acked * wb;
  return static_cast<double>(w.acked * wb) * 1e3 /
         static_cast<double>(std::max<std::uint64_t>(w.elapsed_ns, 1));
}

std::int64_t segment_memory_taken(control::ControllerClient& admin) {
  auto st = admin.cluster_status();
  if (!st) return -1;
  std::int64_t sum = 0;
  for (const auto& n : st->nodes) {
    if (!n.stats.__isset.segment_memory_bytes) return -1;
    sum += n.stats.segment_memory_bytes + (n.stats.__isset.zeroed_bytes ? n.stats.zeroed_bytes : 0);
  }
  return sum;
}

WarmUp warm_until_steady(Publisher& pub, double round_seconds, int max_rounds,
                         const std::function<std::int64_t()>& segment_memory, std::uint32_t bytes,
                         std::uint32_t partitions, std::uint32_t rounds, int flat_rounds) {
  const std::uint32_t wb = bytes;
  WarmUp out;
  double best = 0;
  int memory_flat_rounds = 0;  // the last rounds in a row that took no segment memory
  std::int64_t held = segment_memory();
  while (out.rounds < max_rounds) {
    const Throughput w = throughput(pub, wb, round_seconds, 0, partitions, rounds);
    ++out.rounds;
    out.bytes += w.acked * wb;
    out.seconds += static_cast<double>(w.elapsed_ns) / 1e9;
    out.last_mb_per_s = static_cast<double>(w.acked * wb) * 1e3 /
                        static_cast<double>(std::max<std::uint64_t>(w.elapsed_ns, 1));
    const std::int64_t before = held;
    held = segment_memory();
    out.segment_memory = held;
    // A round that took no new memory at a rate still rising warmed only
    // the slots that rate cycles through: a faster round after it (or the
    // measured run) reaches further ones, cold (the 64 KiB row measured
    // 987 MB/s after a warm-up that stopped at 841, against 1.7-1.8 GB/s).
    const bool rate_flat = out.rounds >= 3 && out.last_mb_per_s < best * 1.05;
    memory_flat_rounds = held < 0 || before < 0 || held <= before ? memory_flat_rounds + 1 : 0;
    const bool memory_flat = memory_flat_rounds >= flat_rounds;
    if (rate_flat && memory_flat) {
      out.steady = true;
      break;
    }
    // What keeps it going, for the report if max_rounds ends it.
    out.unsettled = !rate_flat && !memory_flat ? "the rate still rising and still taking segment memory"
                    : !memory_flat             ? "still taking segment memory"
                                               : "the rate still rising";
    best = std::max(best, out.last_mb_per_s);
  }
  return out;
}

// publish -> commit ack, one record in flight.
std::vector<std::uint64_t> commit_ack_latency(Publisher& pub, std::uint32_t bytes, int iters, int warmup,
                                              std::uint64_t* elapsed) {
  const auto payload = make_payload(bytes);
  std::vector<std::uint64_t> samples;
  samples.reserve(static_cast<std::size_t>(iters));
  fabric::BackoffIdle idle;
  bool acked = false;
  PublishStatus status = PublishStatus::ok;
  std::uint64_t t1 = 0;
  const std::uint64_t start = now_ns();
  for (int i = 0; i < iters + warmup; ++i) {
    acked = false;
    std::uint64_t t0 = 0;
    client::ErrorCode e;
    // The tail's ack can come before the head returns ring space: a
    // back-pressured publish waits (outside the measurement) and retries.
    while ((t0 = now_ns(), e = pub.publish_to(0, payload, [&](const PublishResult& r) {
             t1 = now_ns();
             status = r.status;
             acked = true;
           })) == client::ErrorCode::backpressure) {
      idle.idle(pub.poll());
    }
    if (e != client::ErrorCode::ok) throw Fail{"publish: " + std::string(client::to_string(e))};
    idle.reset();
    while (!acked) idle.idle(pub.poll());
    if (status != PublishStatus::ok) throw Fail{"publish refused: " + std::string(client::to_string(status))};
    if (i >= warmup) samples.push_back(t1 - t0);
  }
  *elapsed = now_ns() - start;
  return samples;
}

// publish -> delivery to a subscriber of the tail on another thread, one
// record in flight (the next is published once this one was both delivered
// and acknowledged). Latency from the record's own timestamp (the publisher's
// wall clock, same host) to the subscriber's wall clock on receipt.
std::vector<std::uint64_t> delivery_latency(Publisher& pub, RouteSource& routes, const std::string& channel,
                                            const std::string& provider, int sub_cpu, std::uint32_t bytes,
                                            int iters, int warmup, std::uint64_t* elapsed) {
  SubscriberOptions so;
  so.provider = provider;
  so.start = Start::latest;
  auto sub = Subscriber::create(routes, channel, so);
  if (!sub) throw Fail{"subscriber: " + sub.error().message};
  std::atomic<std::uint64_t> delivered{0};
  std::atomic<bool> stop{false};
  std::vector<std::uint64_t> lat;
  lat.reserve(static_cast<std::size_t>(iters + warmup) + 16);
  // The subscriber thread owns `sub` and `lat` until joined.
  std::thread t([&] {
    pin_self(sub_cpu);
    fabric::BackoffIdle idle;
    while (!stop.load(std::memory_order_relaxed)) {
      idle.idle(sub.value()->poll([&](const Message& m) {
        lat.push_back(catena::wall_clock_ns() - m.timestamp_ns);
        delivered.fetch_add(1, std::memory_order_release);
      }));
    }
  });
  const auto payload = make_payload(bytes);
  fabric::BackoffIdle idle;
  bool acked = false;
  const std::uint64_t start = now_ns();
  std::string error;
  // The subscriber starts at the end of the partition once its connection is
  // up: keep publishing until it sees records, then count from there.
  std::uint64_t base = 0;
  const std::uint64_t connect_deadline = now_ns() + 5'000'000'000ull;
  for (int counted = -1; counted < iters + warmup;) {
    acked = false;
    client::ErrorCode e;
    while ((e = pub.publish_to(0, payload, [&](const PublishResult&) { acked = true; })) ==
           client::ErrorCode::backpressure) {
      idle.idle(pub.poll());
    }
    if (e != client::ErrorCode::ok) {
      error = "publish: " + std::string(client::to_string(e));
      break;
    }
    idle.reset();
    const std::uint64_t deadline = now_ns() + 2'000'000'000ull;
    while (!acked || (counted >= 0 && delivered.load(std::memory_order_acquire) < base + counted + 1)) {
      idle.idle(pub.poll());
      if (now_ns() > deadline) break;
    }
    if (counted < 0) {
      if (delivered.load(std::memory_order_acquire) > 0) {
        // Connected. Warm the subscriber's ring (a lap of it, for the
        // reason warm_log() gives), then let everything drain.
        (void)throughput(pub, 64u << 10, 60.0, SubscriberOptions{}.ring_bytes / (64u << 10) * 5 / 4 + 1);
        for (std::uint64_t seen = ~0ull; seen != delivered.load(std::memory_order_acquire);) {
          seen = delivered.load(std::memory_order_acquire);
          std::this_thread::sleep_for(50ms);
        }
        base = delivered.load(std::memory_order_acquire);
        counted = 0;
      } else if (now_ns() > connect_deadline) {
        error = "the subscriber received nothing in 5 s";
        break;
      }
    } else if (delivered.load(std::memory_order_acquire) < base + counted + 1) {
      error = "a record was not delivered within 2 s";
      break;
    } else {
      ++counted;
    }
  }
  *elapsed = now_ns() - start;
  stop = true;
  t.join();
  if (!error.empty()) throw Fail{error};
  const std::size_t skip = static_cast<std::size_t>(base) + static_cast<std::size_t>(warmup);
  if (lat.size() <= skip) return {};
  return {lat.begin() + static_cast<std::ptrdiff_t>(skip), lat.end()};
}

}  // namespace catena::cli::bench_detail
