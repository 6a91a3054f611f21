// The deterministic simulation of a partition (sim_world.hpp), run over many
// seeds. Environment:
//   CATENA_SIM_SEEDS=N   how many seeds Seeds runs (default 200), from
//   CATENA_SIM_FIRST=S   the first one (default 1);
//   CATENA_SIM_SEED=S    replay just seed S, printing every event;
//   CATENA_SIM_STEPS=N   steps of traffic and faults per seed (default 3000);
//   CATENA_SIM_VERBOSE=1 print every event of every run.
// A failing seed is printed with the command that replays it.
#include <chrono>
#include <cstdlib>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <string>

#include "sim_world.hpp"

namespace catena::sim {
namespace {

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

bool verbose_from_env() {
  return env_number("CATENA_SIM_VERBOSE", 0) != 0;
}

SimOptions options_for(std::uint64_t seed) {
  SimOptions o;
  o.seed = seed;
  o.steps = static_cast<int>(env_number("CATENA_SIM_STEPS", 3000));
  o.verbose = env_number("CATENA_SIM_VERBOSE", 0) != 0;
  return o;
}

std::string report(std::uint64_t seed, const SimResult& r) {
  std::string out = "seed " + std::to_string(seed) + " failed:\n";
  for (const auto& v : r.violations) out += "  " + v + "\n";
  out += "last events:\n" + r.trace_tail;
  out += "replay: CATENA_SIM_SEED=" + std::to_string(seed) +
         " build/bin/catena-sim-test --gtest_filter='Sim.Seeds'\n";
  return out;
}

class Sim : public ::testing::Test {
 protected:
  void SetUp() override { spdlog::set_level(spdlog::level::off); }
};

TEST_F(Sim, Seeds) {
  if (const char* one = std::getenv("CATENA_SIM_SEED"); one != nullptr && *one != '\0') {
    SimOptions o = options_for(std::strtoull(one, nullptr, 10));
    o.verbose = true;
    const SimResult r = run_simulation(o);
    std::printf(
        "seed %llu: %llu events, hash %016llx, %llu published, %llu acked, %llu delivered, %d kills, "
        "%d silences, final epoch %lld, %.1f s simulated\n",
        static_cast<unsigned long long>(o.seed), static_cast<unsigned long long>(r.events),
        static_cast<unsigned long long>(r.trace_hash), static_cast<unsigned long long>(r.published),
        static_cast<unsigned long long>(r.acked), static_cast<unsigned long long>(r.delivered), r.kills,
        r.silences, static_cast<long long>(r.final_epoch), r.sim_seconds);
    EXPECT_TRUE(r.ok()) << report(o.seed, r);
    return;
  }
  const std::uint64_t first = env_number("CATENA_SIM_FIRST", 1);
  const std::uint64_t count = env_number("CATENA_SIM_SEEDS", 200);
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t acked = 0;
  std::uint64_t delivered = 0;
  int kills = 0;
  int silences = 0;
  int failures = 0;
  int diverged = 0;  // seeds that ran differently once and replayed on a third run
  for (std::uint64_t seed = first; seed < first + count; ++seed) {
    const SimResult r = run_simulation(options_for(seed));
    acked += r.acked;
    delivered += r.delivered;
    kills += r.kills;
    silences += r.silences;
    if (!r.ok()) {
      ++failures;
      ADD_FAILURE() << report(seed, r);
      continue;
    }
    // Every seed runs twice: a schedule that does not replay is a failure
    // too (something outside the seed decided). Where the soft provider's
    // own thread still decides (about 1 seed in 1000 since connection keys
    // and bounded revocation came in), a third run must reproduce one of the
    // two: the seed still replays, and the divergence is reported.
    const SimResult again = run_simulation(options_for(seed));
    if (again.trace_hash != r.trace_hash) {
      const SimResult third = run_simulation(options_for(seed));
      const bool replays = third.trace_hash == r.trace_hash || third.trace_hash == again.trace_hash;
      if (replays) {
        ++diverged;
        std::printf(
            "seed %llu ran differently once (%llu and %llu events); a third run replayed one of them\n",
            static_cast<unsigned long long>(seed), static_cast<unsigned long long>(r.events),
            static_cast<unsigned long long>(again.events));
        continue;
      }
      ++failures;
      ADD_FAILURE() << "seed " << seed << " ran differently (" << r.events << ", " << again.events << " and "
                    << third.events << " events); compare the runs with CATENA_SIM_SEED=" << seed
                    << " build/bin/catena-sim-test --gtest_filter='Sim.Seeds'";
    }
  }
  // Replaying on a third try is the exception: a systematic divergence fails.
  EXPECT_LE(static_cast<std::uint64_t>(diverged) * 20, count) << diverged << " seeds ran differently once";
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "%llu seeds from %llu in %.1f s: %llu acked, %llu delivered, %d kills, %d silences, %d failed\n",
      static_cast<unsigned long long>(count), static_cast<unsigned long long>(first), secs,
      static_cast<unsigned long long>(acked), static_cast<unsigned long long>(delivered), kills, silences,
      failures);
}

// A seed replays: the same events in the same order, twice (Seeds checks
// it for every seed; this one prints where two runs part).
TEST_F(Sim, SameSeedSameTrace) {
  for (std::uint64_t seed : {7u, 42u, 1234u}) {
    if (verbose_from_env())
      std::fprintf(stderr, "=== seed %llu, first run\n", static_cast<unsigned long long>(seed));
    const SimResult a = run_simulation(options_for(seed));
    if (verbose_from_env())
      std::fprintf(stderr, "=== seed %llu, second run\n", static_cast<unsigned long long>(seed));
    const SimResult b = run_simulation(options_for(seed));
    EXPECT_GT(a.events, 100u);
    EXPECT_EQ(a.trace_hash, b.trace_hash)
        << "seed " << seed << " ran differently twice (" << a.events << " and " << b.events
        << " events); last events of the second run:\n"
        << b.trace_tail;
  }
}

// Different seeds take different paths (the RNG drives the schedule).
TEST_F(Sim, SeedsDiffer) {
  EXPECT_NE(run_simulation(options_for(1)).trace_hash, run_simulation(options_for(2)).trace_hash);
}

// The checker can fail: an acknowledgement reported one offset off is caught.
TEST_F(Sim, CheckerCatchesAWrongAckOffset) {
  SimOptions o = options_for(3);
  o.corrupt_ack = true;
  const SimResult r = run_simulation(o);
  ASSERT_FALSE(r.ok()) << "a corrupted ack offset went unnoticed";
  bool named = false;
  for (const auto& v : r.violations) named = named || v.find("acknowledged") != std::string::npos;
  EXPECT_TRUE(named) << report(o.seed, r);
}

}  // namespace
}  // namespace catena::sim
