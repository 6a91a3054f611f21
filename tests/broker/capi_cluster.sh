#!/usr/bin/env bash
# capi_cluster.sh BIN_DIR COMMAND...: runs COMMAND CONTROLLER CHANNEL against a
# local cluster of BIN_DIR's binaries (3 nodes; channel "capi", 4 partitions,
# replication 2, and "capi-full", below), then takes the cluster down. COMMAND's exit status is this
# script's.
set -euo pipefail
bin=${1:?usage: capi_cluster.sh BIN_DIR COMMAND...}
shift
dir=$(mktemp -d /tmp/catena-capi.XXXXXX)
cleanup() {
  if [ -f "$dir/cluster.env" ]; then "$bin/catena" cluster down --dir "$dir" >/dev/null 2>&1 || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
"$bin/catena" cluster up --detach --dir "$dir" --nodes 3 --controller-port 0 > "$dir/up.log" 2>&1 ||
  { cat "$dir/up.log" >&2; exit 1; }
controller=$(sed -n 's/^CONTROLLER=//p' "$dir/cluster.env")
[ -n "$controller" ] || { echo "no CONTROLLER in $dir/cluster.env" >&2; exit 1; }
"$bin/catena" --controller "$controller" channel create capi --partitions 4 --replication 2 >/dev/null
# One whose log fills within its ttl (64 KiB segments, kept 500 ms + the local
# cluster's 1 s grace): a publisher is held back and told why (log_full).
"$bin/catena" --controller "$controller" channel create capi-full --partitions 1 --replication 2 \
  --segment-bytes 65536 --ttl-ms 500 >/dev/null
"$@" "$controller" capi
