// Google Benchmark of a publisher's staging path (chain/publish.hpp), one
// thread, no fabric: what it costs to get a record of N bytes produced by
// the application into the partition's ring image, ready to send.
//   Copy:  the application fills its own buffer, PublishClient::stage copies
//          it into the ring and checksums it (Publisher::publish).
//   Claim: reserve, the application fills the frame in place, commit
//          checksums it there (Publisher::try_claim + commit).
// The ring is emptied (fail_all) whenever it fills: acknowledgements are
// not what is measured.
//   catena-publish-claim-bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <catena/chain/publish.hpp>
#include <catena/fabric/fabric.hpp>

namespace catena::chain {
namespace {

constexpr std::uint32_t kRingBytes = 4u << 20;

PublishClient make_client(fabric::Provider& provider) {
  auto mirror = provider.allocate(kRingBytes, fabric::kLocalWrite);
  if (!mirror) std::abort();
  return PublishClient(std::move(mirror.value()), kRingBytes, 8192);
}

// What the application does to produce a record: writes every byte.
void produce(std::byte* at, std::size_t n, std::uint64_t i) {
  std::memset(at, static_cast<int>(i & 0xff), n);
}

void empty_ring(PublishClient& c) {
  c.fail_all(wire::Status::unavailable, [](std::uint64_t, wire::Status, std::uint64_t) {});
}

void BM_PublishCopy(benchmark::State& state) {
  auto provider = fabric::Provider::open("soft");
  if (!provider) std::abort();
  PublishClient c = make_client(*provider.value());
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<std::byte> app(n);
  RecordHeader h{};
  h.producer_id = 7;
  std::uint64_t i = 0;
  for (auto _ : state) {
    produce(app.data(), n, i++);
    while (c.stage(h, app) != fabric::Errc::ok) empty_ring(c);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n));
}

void BM_PublishClaim(benchmark::State& state) {
  auto provider = fabric::Provider::open("soft");
  if (!provider) std::abort();
  PublishClient c = make_client(*provider.value());
  const auto n = static_cast<std::uint32_t>(state.range(0));
  RecordHeader h{};
  h.producer_id = 7;
  std::uint64_t i = 0;
  PublishClient::Reservation r;
  for (auto _ : state) {
    while (c.reserve(n, &r) != fabric::Errc::ok) empty_ring(c);
    produce(c.region_at(r), n, i++);
    if (c.commit_reserved(h, r) != fabric::Errc::ok) std::abort();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n));
}

BENCHMARK(BM_PublishCopy)->Arg(64)->Arg(64 << 10);
BENCHMARK(BM_PublishClaim)->Arg(64)->Arg(64 << 10);

}  // namespace
}  // namespace catena::chain

BENCHMARK_MAIN();
