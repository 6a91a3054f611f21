#!/usr/bin/env bash
# A 3-replica chain whose links cross a network: two soft-RoCE VMs joined by
# a virtual wire (run-in-vm.sh --wire; UDP between the two QEMUs on the
# host), so RDMA packets leave one guest's NIC and enter the other's, unlike
# inside one VM, where rdma_rxe delivers traffic between its own endpoints
# internally.
#
#   VM "peer" (10.0.3.2): one catenad (zone-c).
#   VM "main" (10.0.3.1): the controller, two catenads (zone-a, zone-b), then
#     a channel with replication 3, so its chain holds the peer's node;
#     publishes RECORDS lines of ~200 bytes and subscribes to them all; checks
#     every line arrived once and intact, the chain named the peer, and eth1
#     carried the traffic (without a crash, it sent and received at least the
#     records' bytes each way; with one, half of them in all).
#
# Usage: ci/vm/wire-chain.sh [--loss PCT] [--poweroff] [--records N] [--timeout SEC]
#   --loss PCT   netem drops PCT% of the frames each guest sends on the wire
#                (the RC transport's retransmissions must hide it)
#   --poweroff   half way through the stream the peer VM crashes: told over
#                the wire, its kernel reboots at once (sysrq b; QEMU runs with
#                -no-reboot, so the VM is gone), as a host that loses power:
#                no process ends, no disconnect is ever sent. A spare node in
#                the main VM must replace it, the publisher must see every
#                record acknowledged, and every record must be delivered
#                once, in order, intact
# Needs: build/bin/{catena,catenad,catena-controller}. Exit 0 on success.
set -euo pipefail
prog=wire-chain.sh
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$vm_dir/../.."

loss=0
poweroff=0
records=2000
timeout_s=600
while (($# > 0)); do
  case $1 in
    --loss) loss=${2:?--loss needs a percentage}; shift 2 ;;
    --poweroff) poweroff=1; shift ;;
    --records) records=${2:?--records needs a count}; shift 2 ;;
    --timeout) timeout_s=${2:?--timeout needs seconds}; shift 2 ;;
    *) die "unknown option $1 (see the header of $0)" ;;
  esac
done
[[ $loss =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--loss wants a percentage, got $loss"
[[ $records =~ ^[0-9]+$ ]] || die "--records wants a count, got $records"
bins=(--bin build/bin/catena --bin build/bin/catenad --bin build/bin/catena-controller --bin /usr/sbin/tc)
for b in build/bin/catena build/bin/catenad build/bin/catena-controller; do
  [[ -x $b ]] || die "$b missing: build first"
done

# Two free UDP ports on the host's loopback for the wire's ends.
read -r port_a port_b < <(python3 -c '
import socket
s = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')

# Loss on what each guest sends: every frame crosses one netem.
netem='true'
if [[ $loss != 0 ]]; then
  netem="/usr/bin/tc qdisc add dev eth1 root netem loss ${loss}% && /usr/bin/tc qdisc show dev eth1"
fi
controller=10.0.3.1:7400
pad=$(printf '%0192d' 0)  # with the zero-padded sequence number: ~200-byte records
peer_cmd="$netem && catenad --controller $controller --provider verbs:rxe0 --admin-listen 10.0.3.2:0 \
  --zone zone-c --grace-ms 1000 --log-level info &
if [ $poweroff = 1 ]; then
  nc -l -p 9000 >/dev/null && echo b >/proc/sysrq-trigger
fi
wait"
main_cmd="$netem || exit 1
catena-controller --listen $controller --data-dir /tmp/ctl --heartbeat-timeout-ms 3000 \
  --probe-timeout-ms 1000 > /tmp/controller.log 2>&1 &
for z in a b; do
  catenad --controller $controller --provider verbs:rxe0 --admin-listen 10.0.3.1:0 --zone zone-\$z \
    --grace-ms 1000 --log-level info > /tmp/node-\$z.log 2>&1 &
done
# What a failure needs to be understood: the subscriber's connection events,
# the chain, the brokers' and the controller's logs, rdma_rxe's counters.
diag() {
  echo '--- wire-chain diagnostics: publisher (SPDLOG_LEVEL=debug)'; tail -n 40 /tmp/pub.err
  echo '--- subscriber (SPDLOG_LEVEL=debug)'; tail -n 40 /tmp/sub.err
  echo '--- channel'; catena channel describe wire; catena status
  for f in /tmp/node-*.log; do echo \"--- \$f\"; tail -n 25 \$f; done
  echo '--- controller'; grep -v 'registered\\|heartbeat' /tmp/controller.log | tail -n 25
  echo '--- rxe0 counters (main VM)'
  for c in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do echo \"\$(basename \$c) \$(cat \$c)\"; done
}
export CATENA_CONTROLLER=$controller
n=0
until [ \$(catena status 2>/dev/null | grep -c ALIVE) -ge 3 ]; do
  n=\$((n + 1)); [ \$n -lt 600 ] || { echo 'wire-chain: 3 nodes never registered'; catena status; exit 1; }
  sleep 0.2
done
catena channel create wire --partitions 1 --replication 3 || exit 1
catena channel describe wire | tee /tmp/describe
grep -q '10.0.3.2:' /tmp/describe || { echo 'wire-chain: the chain does not hold the peer node'; exit 1; }
stat() { cat /sys/class/net/eth1/statistics/\$1; }
seq -w 1 $records | sed 's/\$/ $pad/' > /tmp/sent
bytes=\$(tr -d '\\n' < /tmp/sent | wc -c)
half=\$(($records / 2))
tx0=\$(stat tx_bytes); rx0=\$(stat rx_bytes); txp0=\$(stat tx_packets)
if [ $poweroff = 1 ]; then
  # A spare in the peer's zone, started after placement so the chain holds the peer.
  catenad --controller $controller --provider verbs:rxe0 --admin-listen 10.0.3.1:0 --zone zone-c \
    --grace-ms 1000 --log-level warn &
  n=0
  until [ \$(catena status 2>/dev/null | grep -c ALIVE) -ge 4 ]; do
    n=\$((n + 1)); [ \$n -lt 300 ] || { echo 'wire-chain: the spare never registered'; exit 1; }
    sleep 0.2
  done
  # Half the stream, then the peer crashes, then the rest.
  { head -n \$half /tmp/sent
    echo crash | nc 10.0.3.2 9000 || echo 'wire-chain: could not tell the peer to crash' >&2
    echo \"wire-chain: peer crashed after \$half records (\$(date +%T))\" >&2
    sleep 1
    tail -n +\$((half + 1)) /tmp/sent; } | catena --provider verbs:rxe0 publish wire --quiet || exit 1
  n=0
  # Repaired: three members again, none of them the peer, none still joining.
  until catena channel describe wire > /tmp/describe && [ \$(grep -o 'node-[0-9]*(' /tmp/describe | wc -l) -eq 3 ] \
        && ! grep -q '10.0.3.2:' /tmp/describe && ! grep -q joining /tmp/describe; do
    n=\$((n + 1)); [ \$n -lt 300 ] || { echo 'wire-chain: the chain was not repaired'; cat /tmp/describe; catena status
      grep -v 'registered\\|heartbeat' /tmp/controller.log | tail -40; exit 1; }
    sleep 0.2
  done
  echo 'wire-chain: repaired:'; cat /tmp/describe; grep -v 'registered\\|heartbeat' /tmp/controller.log | tail -20
  crossed=\$((bytes / 2))  # the peer saw the first half, in one direction or the other
else
  SPDLOG_LEVEL=debug catena --provider verbs:rxe0 publish wire --quiet < /tmp/sent 2> /tmp/pub.err ||
    { echo 'wire-chain: publish failed'; diag; exit 1; }
  grep -v '\\[debug\\]' /tmp/pub.err
fi
SPDLOG_LEVEL=debug catena --provider verbs:rxe0 subscribe wire --count $records --timeout-ms 30000 > /tmp/got \
  2> /tmp/sub.err || { echo \"wire-chain: the subscriber failed after \$(wc -l < /tmp/got) records\"; diag; exit 1; }
tx=\$((\$(stat tx_bytes) - tx0)); rx=\$((\$(stat rx_bytes) - rx0)); txp=\$((\$(stat tx_packets) - txp0))
echo \"wire-chain: $records records (\$bytes bytes) published, \$(wc -l < /tmp/got) delivered; eth1 sent \$tx bytes in \$txp packets, received \$rx bytes\"
cmp -s /tmp/got /tmp/sent || { echo 'wire-chain: delivered records differ from the published ones (once each, in order)'; diag; exit 1; }
if [ $poweroff = 1 ]; then
  [ \$((tx + rx)) -ge \$crossed ] || { echo 'wire-chain: the chain traffic did not cross eth1'; exit 1; }
else
  # Every record crossed the wire at least once: into the peer (it is the
  # middle or the tail), out of it (the head), or both; the subscriber may
  # read from a replica on this side.
  [ \$((tx + rx)) -ge \$bytes ] || { echo 'wire-chain: the chain traffic did not cross eth1'; exit 1; }
fi
/usr/bin/tc -s qdisc show dev eth1 | grep -i dropped || true
echo 'wire-chain: OK'"

logs=$vm_cache/logs
mkdir -p "$logs"
run_id=wire-$(date +%Y%m%d-%H%M%S)-$$  # one set of logs per run: CI clones may share the cache
# Keep the logs of the 10 newest runs (3 files each).
find "$logs" -name 'wire-*' -printf '%T@ %p\n' | sort -rn | tail -n +28 | cut -d' ' -f2- | xargs -r rm -f --
peer_out=$logs/$run_id-peer.out
note "peer VM (10.0.3.2) booting; console in $peer_out"
# Its own process group, so that stopping it stops its QEMU too.
setsid ci/vm/run-in-vm.sh --timeout "$timeout_s" --log "$logs/$run_id-peer.log" --wire "$port_b:$port_a:10.0.3.2" \
  "${bins[@]}" -- sh -c "$peer_cmd" >"$peer_out" 2>&1 &
peer_pid=$!
# The peer only serves: it ends when the main VM is done.
stop_peer() {
  kill -TERM -- "-$peer_pid" 2>/dev/null || true
  wait "$peer_pid" 2>/dev/null || true
}
trap stop_peer EXIT
set +e
ci/vm/run-in-vm.sh --timeout "$timeout_s" --log "$logs/$run_id-main.log" --wire "$port_a:$port_b:10.0.3.1" \
  "${bins[@]}" -- sh -c "$main_cmd"
rc=$?
set -e
if ((poweroff)) && kill -0 "$peer_pid" 2>/dev/null; then
  note "the peer VM is still running: it did not crash"
  rc=1
fi
if ((rc != 0)); then
  # The peer's catenad logs to the peer VM's console, which run-in-vm.sh
  # keeps in its --log file.
  echo "--- peer VM (10.0.3.2): catenad"
  grep -a '^\[20' "$logs/$run_id-peer.log" | tail -n 40 || true
fi
note "main VM exited $rc (peer log: $logs/$run_id-peer.log)"
exit "$rc"
