#!/usr/bin/env bash
# The dpdk provider against the kernel's rdma_rxe, both directions: WRITE,
# WRITE WITH IMMEDIATE, SEND, READ, RNR and a bad key (ci/vm/rxe_interop.c
# lists the steps; tests/fabric/dpdk_interop_test.cpp is the host half).
# Then the dpdk provider against the verbs provider's oob mode
# (verbs:rxe0,oob) on that rdma_rxe, through both real providers, once with
# the dpdk side listening and once with the verbs side listening
# (tests/fabric/oob_interop_test.cpp is both halves).
#
# One VM: its eth1 (10.9.0.1, rxe0 on it) is a tap on the host. On the host
# side of that tap the dpdk provider runs on a net_af_packet port as
# 10.9.0.2, and the kernel holds 10.9.0.3 for the TCP handshake. Needs root
# (the tap) and a build with DPDK. About 15 s.
#
# Usage: ci/vm/dpdk-interop.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
bin=$build/bin/catena-dpdk-provider-test
conf=$build/bin/catena-fabric-conformance
[[ -x $bin ]] || { echo "dpdk-interop: $bin missing: build with DPDK first" >&2; exit 2; }
[[ -x $conf ]] || { echo "dpdk-interop: $conf missing: build first" >&2; exit 2; }
tap=ctap$$
work=$(mktemp -d)
cleanup() {
  [[ -n ${host:-} ]] && kill "$host" 2>/dev/null
  ip link del "$tap" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip tuntap add dev "$tap" mode tap
ip addr add 10.9.0.3/24 dev "$tap"
ip link set "$tap" up
cc -O2 -Wall -Wextra -o "$work/rxe_interop" ci/vm/rxe_interop.c -libverbs
dpdk="dpdk:af_packet=$tap,ip=10.9.0.2,mtu=1024,timeout_us=20000"
oob="--gtest_filter=OobInterop.*"
# Host: rxe_interop's peer, then the oob listener, then the oob dialer.
(
  CATENA_DPDK_INTEROP=$dpdk CATENA_DPDK_INTEROP_LISTEN=10.9.0.3:7471 "$bin" --gtest_filter='DpdkInterop.*' || exit 1
  echo "==== oob: dpdk listens, verbs dials"
  CATENA_OOB_INTEROP_SPEC=$dpdk CATENA_OOB_INTEROP_ROLE=listen CATENA_OOB_INTEROP_ADDR=10.9.0.3:7472 "$conf" "$oob" || exit 1
  echo "==== oob: verbs listens, dpdk dials"
  CATENA_OOB_INTEROP_SPEC=$dpdk CATENA_OOB_INTEROP_ROLE=connect CATENA_OOB_INTEROP_ADDR=10.9.0.1:7473 "$conf" "$oob"
) >"$work/host.log" 2>&1 &
host=$!
vm_rc=0
ci/vm/run-in-vm.sh --timeout 300 --wire "tap:$tap:10.9.0.1" --bin "$work/rxe_interop" --bin "$conf" \
  --env CATENA_OOB_INTEROP_SPEC=verbs:rxe0,oob -- sh -c "/bin/rxe_interop 10.9.0.3 7471 &&
    CATENA_OOB_INTEROP_ROLE=connect CATENA_OOB_INTEROP_ADDR=10.9.0.3:7472 /bin/catena-fabric-conformance '$oob' &&
    CATENA_OOB_INTEROP_ROLE=listen CATENA_OOB_INTEROP_ADDR=10.9.0.1:7473 /bin/catena-fabric-conformance '$oob'" ||
  vm_rc=$?
host_rc=0
wait "$host" || host_rc=$?
host=""
echo "---- host (dpdk provider on $tap) ----"
cat "$work/host.log"
echo "dpdk-interop: VM (rxe, then verbs oob) exit $vm_rc, host (dpdk) exit $host_rc"
((vm_rc == 0 && host_rc == 0))
