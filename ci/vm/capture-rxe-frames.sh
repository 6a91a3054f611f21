#!/usr/bin/env bash
# Records the RoCEv2 frames rdma_rxe builds, as golden test data for the dpdk
# provider's codec (tests/fabric/data/rxe_frames.txt, read by
# tests/fabric/roce_wire_test.cpp).
#
# One VM (run-in-vm.sh --wire): rxe0 on eth1 = 10.9.0.1, whose wire ends on
# the host in rxe_reflector.py (10.9.0.2). ci/vm/rxe_capture.c makes rxe
# send one of each RC frame through it; the reflector records them and
# sends them back so rxe's responses are on the wire too. About a minute.
#
# Usage: ci/vm/capture-rxe-frames.sh [OUT_FILE]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-tests/fabric/data/rxe_frames.txt}
work=$(mktemp -d)
trap 'kill "${reflector:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
cc -O2 -Wall -Wextra -o "$work/rxe_capture" ci/vm/rxe_capture.c -libverbs
read -r vm_port host_port < <(python3 -c '
import socket
s = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
python3 ci/vm/rxe_reflector.py "$host_port" "$vm_port" "$work/frames.txt" &
reflector=$!
ci/vm/run-in-vm.sh --timeout 240 --wire "$vm_port:$host_port:10.9.0.1" --bin "$work/rxe_capture" -- /bin/rxe_capture
sleep 0.5
mkdir -p "$(dirname "$out")"
{
  echo "# RoCEv2 frames built by rdma_rxe (Linux $(ls ci/vm/cache/kernel 2>/dev/null | head -1)),"
  echo "# recorded by ci/vm/capture-rxe-frames.sh on $(date -u +%Y-%m-%d): one Ethernet frame per line, hex,"
  echo "# in wire order, ICRC included. ci/vm/rxe_capture.c says which operations made them."
  cat "$work/frames.txt"
} >"$out"
echo "capture-rxe-frames: $(grep -vc '^#' "$out") frames in $out"
