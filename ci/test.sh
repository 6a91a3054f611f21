#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine:
#   1. install packages, check the format (clang-format),
#   2. build with GCC (-Werror; unity batches) what the VM stages run,
#      install it into a staging prefix, build examples/ against it and run
#      them on a local cluster, and build the .deb packages,
#   3. boot the soft-RoCE VM and run the verbs provider's conformance suite,
#      the broker tests and `catena cluster demo` on verbs:rxe0 (the GCC
#      build's binaries); boot two such VMs joined by a virtual wire and
#      run a chain across it; boot one on a host tap and run the dpdk
#      provider against its rdma_rxe and against the verbs provider's oob
#      mode, and a chain mixing dpdk and verbs oob nodes,
#   4. build with Clang, ASan+UBSan and run every test with ctest (and
#      fuzz the parsers for a few seconds each: tests/fuzz/); build
#      with Clang (-Wthread-safety -Werror) and ThreadSanitizer and run
#      every test again; run clang-tidy's bug-finding checks over the GCC
#      build's batches (ci/tidy-check.sh). The Clang builds and clang-tidy
#      run in the background, at idle priority, from step 3 on.
# Exits non-zero if anything fails. Prints a summary line at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/install-deps.sh
# The network-cut failover tests need root and iproute2 (installed above): here
# they must run, not skip.
export CATENA_REQUIRE_NETNS=1
# The ZooKeeper store's tests start a ZooKeeper server (installed above):
# here one that does not start fails them instead of skipping them.
export CATENA_REQUIRE_ZK=1
started=$(date +%s)
declare -a results=()
failed=0
stage() {  # stage NAME COMMAND...
  local name=$1; shift
  echo "=== $name"
  local t0=$(date +%s)
  if "$@"; then results+=("PASS $name ($(( $(date +%s) - t0 ))s)");
  else results+=("FAIL $name ($(( $(date +%s) - t0 ))s)"); failed=$((failed + 1)); fi
}

stage "format (clang-format)" ci/format-check.sh
# The three builds are unity builds (CMake batches up to 16 sources of a
# target into one translation unit): the GCC build took 359-438 s on a clean
# clone instead of 624 s (2026-12-01), the suite 45 minutes instead of 55.
# The suite is bound by the cores (three builds, clang-tidy, two VMs' TCG
# and the tests: about 4,700 core-seconds of a 2-core machine's 4,560 in 38
# minutes, 2026-12-03), and a batch's templates and headers are compiled
# once however many sources share it: two of the control library's
# 8-source batches took 50.5 s of CPU as one and 73.1 s apart (ASan+UBSan,
# 2026-12-03), so batches of 16, not 8. A source that misses an include
# another source of its batch made passes here; a build without batches
# (ci/build.sh's default) shows it.
unity=(-DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16)
# Line tables only (-g1), not full debug info: stack traces (sanitizer
# reports, crashes) keep their files and lines, and a build takes about a
# quarter less (one batch: 17.8 s against 23.7 s with -g, 2026-12-02).
unity+=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG")
# The GCC build makes what runs on soft-RoCE below (the tools, the daemons,
# the benches, and the four test programs the VM stages run); the other test
# programs only run in the Clang builds (also -Werror), so GCC compiling them
# too was 40% of its build for nothing run (2026-12-02).
# catena_sdk is libcatena.so, for the install stage below; catena_py (the
# Python module) and catena-capi-test for the C API and Python stage.
gcc_targets="catena catenad catena-controller catena_sdk catena-perf catena-fabric-bench catena-frame-ring-bench
  catena-fabric-conformance catena-broker-test catena-catenad-test catena-dpdk-provider-test
  catena_py catena-capi-test"
# The test programs among them with their code at -O0, as in the Clang
# builds (CATENA_TEST_CODE_O0): what they test keeps -O2.
stage "build" env NINJA_TARGETS="$(echo $gcc_targets)" ci/build.sh "${unity[@]}" -DCATENA_TEST_CODE_O0=ON

# The test stages leave the cores idle much of the time (tests wait on
# timers, sockets and child processes), and the Clang builds and clang-tidy
# need nothing but cores. So those run in the background, one after the
# other, under SCHED_IDLE: they get a core only when no test process wants
# it, and a test that wakes up preempts them at once, so the tests see the
# machine as they would alone. Each background stage writes its output to
# $bg/KEY.log and "rc seconds" to $bg/KEY.done; `collect` waits for it.
bg=$(mktemp -d)
background() {  # background KEY COMMAND...
  local key=$1; shift
  local t0=$(date +%s) rc=0
  "$@" > "$bg/$key.log" 2>&1 || rc=$?
  echo "$rc $(( $(date +%s) - t0 ))" > "$bg/$key.tmp" && mv "$bg/$key.tmp" "$bg/$key.done"
}
collect() {  # collect KEY NAME: prints the stage's output, records its result; fails if it did
  local key=$1 name=$2 t0=$(date +%s) rc secs
  while [ ! -f "$bg/$key.done" ]; do sleep 1; done
  read -r rc secs < "$bg/$key.done"
  echo "=== $name (background: ${secs}s, waited for it $(( $(date +%s) - t0 ))s)"
  cat "$bg/$key.log"
  if [ "$rc" -eq 0 ]; then results+=("PASS $name (${secs}s, background)"); return 0; fi
  results+=("FAIL $name (${secs}s, background)"); failed=$((failed + 1)); return 1
}
(
  chrt --idle -p 0 "$BASHPID" >/dev/null
  # With Clang: GCC's ASan build took 647 s of a 30-minute suite, Clang's
  # about a third of that (2026-12-01), and Clang's UBSan checks more
  # (pointer overflow).
  # With the libFuzzer targets (tests/fuzz/): the parsers of what a peer
  # writes (record frames, the frame ring, a partition's log, RoCEv2
  # frames, the RC queue pair, the controller's requests), each fuzzed for
  # 5 s (CATENA_FUZZ_SECONDS) by the ASan ctest run below.
  # Both sanitizer builds compile the tests and the generated Thrift code at
  # -O0 (CATENA_TEST_CODE_O0): 3-4x less CPU for those batches; what they
  # test keeps -O2.
  background asan env BUILD_DIR=build-asan CC=clang CXX=clang++ ci/build.sh \
    "${unity[@]}" -DCATENA_SANITIZE=ON -DCATENA_FUZZ=ON -DCATENA_BUILD_BENCH=OFF -DCATENA_TEST_CODE_O0=ON
  # One build serves both Clang checks: the lock annotations
  # (-Wthread-safety, an error under -Werror) and ThreadSanitizer with the
  # owner-thread checks.
  background tsan env BUILD_DIR=build-tsan CC=clang CXX=clang++ ci/build.sh \
    "${unity[@]}" -DCATENA_TSAN=ON -DCATENA_BUILD_BENCH=OFF -DCATENA_TEST_CODE_O0=ON
  # clang-tidy reads the GCC build's batches (its compile_commands.json and
  # generated Thrift headers), each once.
  background tidy env BUILD_DIR=build ci/tidy-check.sh
) &
background_pid=$!
trap 'pkill -TERM -P "$background_pid" 2>/dev/null || true' EXIT

# Install into a staging prefix, build examples/ against it (find_package
# and pkg-config), run them on a local cluster of the staged binaries, and
# build the .deb packages (~1 minute; the Clang builds run beside it).
stage "install and link (examples/, .debs)" ci/install-check.sh build
# The C API and the Python module against a local cluster. Python only here:
# the sanitizer builds do not build the module (python3 is uninstrumented).
stage "C API and Python (ctest, GCC build)" ctest --test-dir build -R '^broker_(capi|python)$' --output-on-failure

if [ -x ci/vm/run-in-vm.sh ]; then
  # The same fabric conformance suite and the same 3-broker chain test as on
  # the host, against the verbs provider on a real rdma_rxe device (the suite
  # twice: rdma_cm, then the oob mode, verbs:rxe0,oob); catenad's
  # listen-address check on a real device; catena-perf against the device's
  # own floor (perftest's ib_write_lat, in the same run); then the main job as a user runs
  # it on RDMA, plain and with a broker killed, and `cluster up` serving
  # publish/subscribe (small counts: under a minute in all).
  stage "verbs on soft-RoCE (VM): fabric conformance + chain e2e + cluster demo" ci/vm/run-in-vm.sh --timeout 900 \
    --bin build/bin/catena-fabric-conformance --bin build/bin/catena-broker-test \
    --bin build/bin/catena-catenad-test --bin build/bin/catena --bin build/bin/catenad \
    --bin build/bin/catena-controller --bin build/bin/catena-perf --bin /usr/bin/ib_write_lat -- \
    sh -c '/bin/catena-fabric-conformance && CATENA_PROVIDER=verbs:rxe0,oob /bin/catena-fabric-conformance &&
           /bin/catena-broker-test && /bin/catena-catenad-test &&
           catena-perf --provider verbs:rxe0 --ib-gid-index 1 --iters 2000 --bw-sizes 4096 --bw-seconds 0.2 --json |
             grep "\"floor\":\"ib_write_lat\",\"floor_p50_ns\":[1-9]" &&
           catena --provider verbs:rxe0 cluster demo --records 2000 &&
           catena --provider verbs:rxe0 cluster demo --records 2000 --kill &&
           catena --provider verbs:rxe0 cluster up --detach --dir up && export CATENA_CONTROLLER=$(sed -n "s/^CONTROLLER=//p" up/cluster.env) &&
           catena channel create c --partitions 2 && seq 1 300 | catena --provider verbs:rxe0 publish c --quiet &&
           catena --provider verbs:rxe0 subscribe c --count 300 --timeout-ms 10000 > sub.txt &&
           catena cluster down --dir up && [ "$(sort -u sub.txt | wc -l)" -eq 300 ]'
  # The dpdk provider (RoCEv2 on DPDK) on the host side of a tap against
  # the kernel's rdma_rxe in the VM: WRITE, WRITE WITH IMMEDIATE, READ,
  # SEND, RNR and a bad key in both directions; then the dpdk provider
  # against the verbs provider's oob mode (verbs:rxe0,oob), each side
  # listening once (~15 s).
  stage "dpdk against rdma_rxe (VM on a tap)" ci/vm/dpdk-interop.sh build
  # A chain mixing providers: a dpdk catenad on the host tap, two
  # verbs:rxe0,oob catenads in the VM, replication 3, every record once
  # and in order (~40 s).
  stage "chain mixing dpdk and verbs oob (VM on a tap)" ci/vm/mixed-chain.sh build
  # Inside one VM rdma_rxe delivers its own traffic internally; here two VMs
  # joined by a virtual wire carry a chain's links over it (eth1's counters
  # must move): plain, with 2% of the frames dropped, and with the peer VM
  # crashing mid-stream (repaired by a spare; every record delivered once).
  # The 2% loss run used to fail often: links stalled for seconds on
  # rdma_cm's 2.1 s ACK timeout (now 268 ms, 2026-12-01). One failure of
  # another kind was seen since (a subscriber's remote replica delivering
  # nothing; subscribers now move on after 3 s), so a failure is run again
  # once, loudly, rather than hidden: a second failure fails the stage.
  # The peer-crash run hung once (2026-12-02 05:02, commit 6e65728; the same
  # controller and broker code had passed it an hour before): a `catena
  # status` got no answer from the controller for 60 s after the spare
  # started, then nothing until the 600 s timeout. Not understood yet: it
  # too is run again once, loudly, with a shorter timeout (a good run takes
  # about 40 s).
  stage "verbs across two VMs (wire): chain, 2% loss, peer crash" sh -c \
    'ci/vm/wire-chain.sh --records 2000 &&
     { ci/vm/wire-chain.sh --records 2000 --loss 2 ||
       { echo "wire-chain: KNOWN FLAKE: the 2% loss run failed; running it once more"; ci/vm/wire-chain.sh --records 2000 --loss 2; }; } &&
     { ci/vm/wire-chain.sh --records 2000 --poweroff --timeout 240 ||
       { echo "wire-chain: KNOWN FLAKE: the peer-crash run failed; running it once more"; ci/vm/wire-chain.sh --records 2000 --poweroff --timeout 240; }; }'
else
  results+=("FAIL soft-RoCE VM harness missing"); failed=$((failed + 1))
fi

# Every test, under ASan+UBSan and then under TSan, but the multi-process
# failover programme: half its tests under each (failover_0 under ASan,
# failover_1 under TSan: each about 4 of the suite's 37 minutes when all ran
# under both, 2026-12-02), and three more long multi-process runs only under
# ASan: the chaos soak, the chain tests on the dpdk provider and the CLI's
# scripts (46 s, 59 s and 20-25 s under TSan, 2026-12-06; TSan runs the dpdk
# provider's own tests, and the daemons' in every other multi-process test). (A plain build's run
# repeated what the ASan run does, 350 s of a suite that must stay short,
# 2026-12-02; the GCC build's binaries run on soft-RoCE above). The
# simulation's seeds are single-threaded schedules: 50 under ASan, a window
# that moves with the commit count (commit N runs seeds 50 (N mod 2000) + 1
# on: every commit tries schedules the one before did not, where a fixed
# 100 ran the same ones each time for 58 s; a failing seed is printed with
# the command that replays it), and 5 fixed others under TSan, where a seed
# takes about 5x as long and a single-threaded schedule has no race to find
# (30 seeds there took 60 s of the stage, 2026-12-02).
sim_first=$(( $(git rev-list --count HEAD 2>/dev/null || echo 0) % 2000 * 50 + 1 ))
if collect asan "build (clang, asan+ubsan)"; then
  stage "ctest (asan+ubsan)" env ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 CATENA_SIM_SEEDS=50 CATENA_SIM_FIRST="$sim_first" \
    ctest --test-dir build-asan --output-on-failure --timeout 900 -j1 -E '^failover_1$'
fi
if collect tsan "build (clang, thread-safety, tsan)"; then
  stage "ctest (tsan)" env BUILD_DIR=build-tsan CATENA_SIM_SEEDS=5 CATENA_SIM_FIRST=261 ci/tsan-test.sh -E '^(failover_0|chaos|broker_chain_e2e_dpdk|broker_cli)$'
fi

collect tidy "clang-tidy" || true
wait "$background_pid" || true
echo "=== summary ($(( $(date +%s) - started ))s)"
printf '  %s\n' "${results[@]}"
passed=$(( ${#results[@]} - failed ))
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
