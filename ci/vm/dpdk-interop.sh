#!/usr/bin/env bash
# The dpdk provider against the kernel's rdma_rxe, both directions: WRITE,
# WRITE WITH IMMEDIATE, SEND, READ, RNR and a bad key (ci/vm/rxe_interop.c
# lists the steps; tests/fabric/dpdk_interop_test.cpp is the host half).
#
# One VM: its eth1 (10.9.0.1, rxe0 on it) is a tap on the host. On the host
# side of that tap the dpdk provider runs on a net_af_packet port as
# 10.9.0.2, and the kernel holds 10.9.0.3 for the TCP handshake. Needs root
# (the tap) and a build with DPDK. About 10 s.
#
# Usage: ci/vm/dpdk-interop.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
bin=$build/bin/catena-dpdk-provider-test
[[ -x $bin ]] || { echo "dpdk-interop: $bin missing: build with DPDK first" >&2; exit 2; }
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
CATENA_DPDK_INTEROP="dpdk:af_packet=$tap,ip=10.9.0.2,mtu=1024,timeout_us=20000" CATENA_DPDK_INTEROP_LISTEN=10.9.0.3:7471 \
  "$bin" --gtest_filter='DpdkInterop.*' >"$work/host.log" 2>&1 &
host=$!
vm_rc=0
ci/vm/run-in-vm.sh --timeout 180 --wire "tap:$tap:10.9.0.1" --bin "$work/rxe_interop" \
  -- /bin/rxe_interop 10.9.0.3 7471 || vm_rc=$?
host_rc=0
wait "$host" || host_rc=$?
host=""
echo "---- host (dpdk provider on $tap) ----"
cat "$work/host.log"
echo "dpdk-interop: VM (rxe) exit $vm_rc, host (dpdk) exit $host_rc"
((vm_rc == 0 && host_rc == 0))
