#!/usr/bin/env bash
# Proves the soft-RoCE VM harness end to end with stock rdma-core tools:
# device discovery, an RC RDMA write latency test over GID 1, an rdma_cm
# send latency test, an rping pair, copying /results back, and exit-code
# propagation. One boot; about 20 s (35 s on a cold cache).
#
# Usage: ci/vm/selfcheck.sh [--timeout SEC]
set -euo pipefail

prog=selfcheck.sh
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

timeout_s=240
if (($# > 0)); then
  [[ $1 == --timeout && $# -eq 2 ]] || { sed -n '2,7s/^# \{0,1\}//p' "$0" >&2; exit 2; }
  timeout_s=$2
fi

ensure_packages ibverbs-utils perftest rdmacm-utils

results=$(mktemp -d "${TMPDIR:-/tmp}/catena-vm-selfcheck.XXXXXX")
trap 'rm -rf "$results"' EXIT

# Runs under busybox sh in the VM. A perftest or rping server must listen
# before its client connects, so clients retry a few times.
script='
set -e
retry() {
  i=0
  until "$@"; do
    i=$((i + 1))
    [ $i -lt 10 ] || return 1
    echo "(server not listening yet; retrying)"
    sleep 1
  done
}

echo "== ibv_devices"; ibv_devices
echo "== ibv_devinfo"; ibv_devinfo -d rxe0
ibv_devinfo -v -d rxe0 >/results/devinfo.txt

echo "== ib_write_lat (RC RDMA write, GID index 1)"
ib_write_lat -d rxe0 -x 1 -n 200 >/tmp/lat-server.log 2>&1 &
srv=$!
retry ib_write_lat -d rxe0 -x 1 -n 200 "$CATENA_TEST_ADDR"
wait $srv

echo "== ib_send_lat -R (connection set up by rdma_cm)"
ib_send_lat -d rxe0 -R -n 200 >/tmp/send-server.log 2>&1 &
srv=$!
retry ib_send_lat -d rxe0 -R -n 200 "$CATENA_TEST_ADDR"
wait $srv

echo "== rping"
rping -s -a "$CATENA_TEST_ADDR" -C 10 >/tmp/rping-server.log 2>&1 &
srv=$!
retry rping -c -a "$CATENA_TEST_ADDR" -C 10 -v
wait $srv

echo "selfcheck-ok" >/results/ok
# A distinctive code proves the command'"'"'s exit status reaches the host.
exit 42
'

set +e
"$vm_dir/run-in-vm.sh" --timeout "$timeout_s" --results "$results" \
  --bin "$(command -v ibv_devices)" --bin "$(command -v ibv_devinfo)" \
  --bin "$(command -v ib_write_lat)" --bin "$(command -v ib_send_lat)" \
  --bin "$(command -v rping)" \
  -- sh -c "$script"
rc=$?
set -e

[[ $rc -eq 42 ]] || die "VM command exited $rc, want 42 (see the log above)"
[[ $(cat "$results/ok" 2>/dev/null) == selfcheck-ok ]] || die "/results/ok did not come back"
grep -q 'state:.*PORT_ACTIVE' "$results/devinfo.txt" || die "/results/devinfo.txt lacks an active port"
echo "selfcheck.sh: OK (verbs, rdma_cm, rping, /results and exit code all work in the VM)"
