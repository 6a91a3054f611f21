// Google Benchmark micro-benchmarks of the fabric operations, one process,
// one thread driving both endpoints of a connected pair: this isolates the
// provider's own cost per operation (no cross-core wake-ups). The two-process
// figures with floors come from catena-perf.
//   catena-fabric-bench                       soft provider (same-host: shm)
//   CATENA_PROVIDER=soft:tcp catena-fabric-bench
#include <benchmark/benchmark.h>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <catena/fabric/fabric.hpp>

namespace catena::fabric {
namespace {

struct Pair {
  std::unique_ptr<Provider> provider;
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Endpoint> a, b;
  std::unique_ptr<MemoryRegion> src, dst, rbuf;
  RemoteRegion dst_key;  // given to a by b, whose side dst is on
};

Pair& pair() {
  static Pair p = [] {
    Pair q;
    const char* spec = std::getenv("CATENA_PROVIDER");
    auto prov = Provider::open(spec && *spec ? spec : "soft");
    if (!prov) throw std::runtime_error(prov.error().message);
    q.provider = std::move(prov.value());
    auto l = q.provider->listen("127.0.0.1:0");
    if (!l) throw std::runtime_error(l.error().message);
    q.listener = std::move(l.value());
    auto fut = std::async(std::launch::async, [&] { return q.provider->connect(q.listener->address()); });
    auto acc = q.listener->accept(std::chrono::milliseconds(10000));
    auto con = fut.get();
    if (!acc || !con) throw std::runtime_error("connect failed");
    q.a = std::move(con.value());
    q.b = std::move(acc.value());
    q.src = std::move(q.provider->allocate(1 << 20, kLocalWrite).value());
    q.dst = std::move(q.provider->allocate(1 << 20, kLocalWrite | kRemoteWrite | kRemoteRead).value());
    q.rbuf = std::move(q.provider->allocate(4096, kLocalWrite).value());
    auto key = q.b->expose(*q.dst);
    if (!key) throw std::runtime_error(key.error().message);
    q.dst_key = key.value();
    return q;
  }();
  return p;
}

template <class Fn>
void spin_until(Fn&& fn) {
  while (!fn()) {
  }
}

// Post + complete one RDMA WRITE of `bytes`.
void BM_Write(benchmark::State& state) {
  auto& p = pair();
  const auto bytes = static_cast<std::uint32_t>(state.range(0));
  Completion c;
  for (auto _ : state) {
    if (p.a->post_write(1, {p.src.get(), 0, bytes}, {p.dst_key, 0}) != Errc::ok) {
      state.SkipWithError("post_write failed");
      break;
    }
    spin_until([&] { return p.a->poll_send(&c, 1) == 1; });
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * bytes);
}
BENCHMARK(BM_Write)->RangeMultiplier(8)->Range(8, 1 << 20);

// WRITE WITH IMMEDIATE: initiator completion + target receive completion.
void BM_WriteImm(benchmark::State& state) {
  auto& p = pair();
  const auto bytes = static_cast<std::uint32_t>(state.range(0));
  Completion c;
  for (auto _ : state) {
    if (p.b->post_recv(1, {p.rbuf.get(), 0, 64}) != Errc::ok ||
        p.a->post_write_imm(1, {p.src.get(), 0, bytes}, {p.dst_key, 0}, 7) != Errc::ok) {
      state.SkipWithError("post failed");
      break;
    }
    spin_until([&] { return p.b->poll_recv(&c, 1) == 1; });
    spin_until([&] { return p.a->poll_send(&c, 1) == 1; });
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * bytes);
}
BENCHMARK(BM_WriteImm)->RangeMultiplier(8)->Range(8, 1 << 20);

void BM_Read(benchmark::State& state) {
  auto& p = pair();
  const auto bytes = static_cast<std::uint32_t>(state.range(0));
  Completion c;
  for (auto _ : state) {
    if (p.a->post_read(1, {p.src.get(), 0, bytes}, {p.dst_key, 0}) != Errc::ok) {
      state.SkipWithError("post_read failed");
      break;
    }
    spin_until([&] { return p.a->poll_send(&c, 1) == 1; });
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * bytes);
}
BENCHMARK(BM_Read)->RangeMultiplier(8)->Range(8, 1 << 20);

void BM_SendRecv(benchmark::State& state) {
  auto& p = pair();
  const auto bytes =
      static_cast<std::uint32_t>(std::min<std::int64_t>(state.range(0), p.a->caps().max_send_size));
  Completion c;
  for (auto _ : state) {
    if (p.b->post_recv(1, {p.rbuf.get(), 0, 4096}) != Errc::ok ||
        p.a->post_send(1, {p.src.get(), 0, bytes}) != Errc::ok) {
      state.SkipWithError("post failed");
      break;
    }
    spin_until([&] { return p.b->poll_recv(&c, 1) == 1; });
    spin_until([&] { return p.a->poll_send(&c, 1) == 1; });
  }
}
BENCHMARK(BM_SendRecv)->Arg(8)->Arg(64)->Arg(512)->Arg(4096);

// The provider $CATENA_PROVIDER names ("soft" when unset), one per process.
Provider& shared_provider() {
  static std::unique_ptr<Provider> provider = [] {
    const char* spec = std::getenv("CATENA_PROVIDER");
    auto prov = Provider::open(spec && *spec ? spec : "soft");
    if (!prov) throw std::runtime_error(prov.error().message);
    return std::move(prov.value());
  }();
  return *provider;
}

// A remotely writable region of `bytes`, or nullptr with the run marked
// skipped (the provider's error).
std::unique_ptr<MemoryRegion> allocate_or_skip(benchmark::State& state, Provider& provider,
                                               std::size_t bytes) {
  auto mr = provider.allocate(bytes, kLocalWrite | kRemoteWrite | kRemoteRead);
  if (!mr) {
    state.SkipWithError(mr.error().message.c_str());
    return nullptr;
  }
  return std::move(mr.value());
}

// Allocate (zeroed, registered on verbs) and free one region of `bytes`:
// what a partition pays when a segment takes fresh memory.
void BM_AllocateRegion(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    auto mr = allocate_or_skip(state, shared_provider(), bytes);
    if (!mr) break;
    benchmark::DoNotOptimize(mr->data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_AllocateRegion)->Arg(64 << 10)->Arg(2 << 20)->Arg(64 << 20)->Unit(benchmark::kMillisecond);

// A segment's memory over its life as the data thread sees it: allocate
// `bytes`, write every byte of it (records arriving), free it, and again.
// On the soft provider the memory a free gives back stays warm (zeroed
// with its pages, within `soft:warm=<MiB>`, 256 by default) and the next
// allocation of its size takes it: compare `CATENA_PROVIDER=soft:warm=0`,
// where every allocation's first writes fault its pages in.
void BM_SegmentLife(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    auto mr = allocate_or_skip(state, shared_provider(), bytes);
    if (!mr) break;
    std::memset(mr->data(), 0x5a, bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_SegmentLife)->Arg(16 << 20)->Arg(64 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();

// A partition whose rate grows: it takes one more segment of `bytes`
// every 200 ms (the pause is not timed) and keeps them all (nothing is
// freed to reuse). From the second allocation of a size on, the provider
// makes the next one ahead on a thread of its own (soft: a spare range
// populated and written, so the next one's writes find their pages; verbs:
// a region zeroed and registered, VerbsSpares), so compare `soft:warm=0`,
// `verbs:<device>,warm=0`. 24 segments, all freed at the end.
void BM_SegmentGrowth(benchmark::State& state) {
  const char* spec = std::getenv("CATENA_PROVIDER");
  auto prov = Provider::open(spec && *spec ? spec : "soft");
  if (!prov) {
    state.SkipWithError(prov.error().message.c_str());
    return;
  }
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<std::unique_ptr<MemoryRegion>> held;
  for (auto _ : state) {
    auto mr = allocate_or_skip(state, *prov.value(), bytes);
    if (!mr) break;
    std::memset(mr->data(), 0x5a, bytes);
    benchmark::ClobberMemory();
    held.push_back(std::move(mr));
    state.PauseTiming();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    state.ResumeTiming();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_SegmentGrowth)
    ->Arg(16 << 20)
    ->Arg(64 << 20)
    ->Iterations(24)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace catena::fabric

BENCHMARK_MAIN();
