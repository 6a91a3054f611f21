#!/usr/bin/env bash
# A 3-replica chain that mixes providers: head and tail are catenads on the
# verbs provider's oob mode (verbs:rxe0,oob) in the soft-RoCE VM, the middle
# one runs on the dpdk provider on the host, joined by a tap (as in
# dpdk-interop.sh). So a verbs node dials a dpdk one (head to middle) and a
# dpdk node dials a verbs one (middle to tail).
#
#   VM (eth1 10.9.0.1, rxe0 on it): the controller, catenad zone-a and
#     zone-c (verbs:rxe0,oob), the publisher and the subscriber.
#   Host: catenad zone-b on dpdk:af_packet=TAP,ip=10.9.0.2; the kernel's
#     10.9.0.3 on the tap carries its TCP (admin, handshakes, controller).
#
# A channel with replication 3 (so its chain holds all three), RECORDS lines
# of ~200 bytes published and subscribed; every line must arrive once, in
# order, intact, and the host's node must be the chain's middle. Needs root (the
# tap), a build with DPDK and build/bin/{catena,catenad,catena-controller}.
# About 40 s.
#
# Usage: ci/vm/mixed-chain.sh [--records N] [BUILD_DIR]
set -euo pipefail
prog=mixed-chain.sh
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$vm_dir/../.."
records=500
if [[ ${1:-} == --records ]]; then
  records=${2:?--records needs a count}
  shift 2
fi
[[ $records =~ ^[0-9]+$ ]] || die "--records wants a count, got $records"
build=${1:-build}
for b in catena catenad catena-controller; do
  [[ -x $build/bin/$b ]] || die "$build/bin/$b missing: build first"
done
tap=ctap$$
work=$(mktemp -d)
cleanup() {
  [[ -n ${host:-} ]] && kill "$host" 2>/dev/null && wait "$host" 2>/dev/null
  ip link del "$tap" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip tuntap add dev "$tap" mode tap
ip addr add 10.9.0.3/24 dev "$tap"
ip link set "$tap" up

controller=10.9.0.1:7400
oob=verbs:rxe0,oob
pad=$(printf '%0192d' 0)  # with the zero-padded sequence number: ~200-byte records
# Nodes join in chain order: the VM's zone-a node, then the host's (the
# middle), then the VM's zone-c node. The host's registers once one node is
# alive (the VM's controller and first node are up), and the VM starts its
# second one once two are.
(
  export CATENA_CONTROLLER=$controller
  until [[ $("$build/bin/catena" status 2>/dev/null | grep -c ALIVE) -ge 1 ]]; do sleep 0.5; done
  exec "$build/bin/catenad" --controller "$controller" \
    --provider "dpdk:af_packet=$tap,ip=10.9.0.2,mtu=1024,timeout_us=20000" \
    --admin-listen 10.9.0.3:0 --fabric-listen 10.9.0.3:0 --zone zone-b --grace-ms 1000 --log-level info
) >"$work/host-node.log" 2>&1 &
host=$!

vm_cmd="catena-controller --listen $controller --data-dir /tmp/ctl --heartbeat-timeout-ms 3000 \
  --probe-timeout-ms 1000 > /tmp/controller.log 2>&1 &
node() {
  catenad --controller $controller --provider $oob --admin-listen 10.9.0.1:0 --zone zone-\$1 \
    --grace-ms 1000 --log-level info > /tmp/node-\$1.log 2>&1 &
}
alive() {
  n=0
  until [ \$(catena status 2>/dev/null | grep -c ALIVE) -ge \$1 ]; do
    n=\$((n + 1)); [ \$n -lt 600 ] || { echo \"mixed-chain: \$1 nodes never registered\"; diag; exit 1; }
    sleep 0.2
  done
}
diag() {
  echo '--- channel'; catena channel describe mixed; catena status
  for f in /tmp/node-*.log; do echo \"--- \$f\"; tail -n 25 \$f; done
  echo '--- publisher'; tail -n 20 /tmp/pub.err; echo '--- subscriber'; tail -n 20 /tmp/sub.err
  echo '--- controller'; grep -v 'registered\\|heartbeat' /tmp/controller.log | tail -n 25
}
export CATENA_CONTROLLER=$controller
node a; alive 1
alive 2  # the host's dpdk node
node c; alive 3
catena channel create mixed --partitions 1 --replication 3 || { diag; exit 1; }
catena channel describe mixed | tee /tmp/describe
grep -q 'chain: node-[0-9]*(10.9.0.1:[0-9]*) -> node-[0-9]*(10.9.0.3:[0-9]*) -> node-[0-9]*(10.9.0.1:' /tmp/describe ||
  { echo 'mixed-chain: the dpdk node is not the middle of the chain'; exit 1; }
seq -w 1 $records | sed 's/\$/ $pad/' > /tmp/sent
catena --provider $oob publish mixed --quiet < /tmp/sent 2> /tmp/pub.err ||
  { echo 'mixed-chain: publish failed'; diag; exit 1; }
catena --provider $oob subscribe mixed --count $records --timeout-ms 30000 > /tmp/got 2> /tmp/sub.err ||
  { echo \"mixed-chain: the subscriber failed after \$(wc -l < /tmp/got) records\"; diag; exit 1; }
echo \"mixed-chain: $records records published, \$(wc -l < /tmp/got) delivered\"
cmp -s /tmp/got /tmp/sent || { echo 'mixed-chain: delivered records differ from the published ones'; diag; exit 1; }
echo 'mixed-chain: OK'"

rc=0
ci/vm/run-in-vm.sh --timeout 240 --wire "tap:$tap:10.9.0.1" --bin "$build/bin/catena" --bin "$build/bin/catenad" \
  --bin "$build/bin/catena-controller" -- sh -c "$vm_cmd" || rc=$?
if ((rc != 0)); then
  echo "---- host node (dpdk on $tap) ----"
  tail -n 40 "$work/host-node.log"
fi
note "VM exited $rc"
exit "$rc"
