#!/usr/bin/env bash
# Catena against NATS JetStream on this machine, same payloads, same window,
# same percentiles:
#   1. `catena bench --json` (its own 3-broker cluster on loopback, and the
#      floor for the path)
#   2. three nats-server processes on loopback forming a JetStream cluster,
#      a stream with replicas=3 in memory, driven by nats_bench (C, libnats)
# then both systems' figures side by side with their ratios. Each system runs
# alone: NATS is started only after Catena's cluster has stopped, and stopped
# before this script returns.
#
# usage: bench/peers/compare.sh [--build-dir DIR] [--iters N] [--seconds S]
#                               [--sizes LIST] [--latency-sizes LIST]
#                               [--window N] [--nats-pin-cpu N] [--keep-dir]
#                               [--out-dir DIR]
# --window: records awaiting their ack in throughput runs, for both systems.
# --out-dir (default ./catena-compare): every latency row's HdrHistogram
# distribution, Catena's, the floor's and NATS's (<row>.hgrm), and
# latency.svg plotting them all.
# Installs nats-server and libnats-dev with apt-get when they are missing
# (needs root), and builds nats_bench if the build directory lacks it.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build_dir=$repo/build
iters=5000
seconds=2
sizes=64,1024,16384,65536
latency_sizes=64
window=4096
nats_pin=-1
keep=0
out_dir=$PWD/catena-compare

while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --latency-sizes) latency_sizes=$2; shift 2 ;;
    --window) window=$2; shift 2 ;;
    --nats-pin-cpu) nats_pin=$2; shift 2 ;;
    --keep-dir) keep=1; shift ;;
    --out-dir) out_dir=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

say() { printf '== %s\n' "$*" >&2; }

# --- prerequisites ---------------------------------------------------------------
install_missing() {
  local missing=()
  command -v nats-server >/dev/null || missing+=(nats-server)
  pkg-config --exists libnats 2>/dev/null || missing+=(libnats-dev)
  [[ ${#missing[@]} -eq 0 ]] && return 0
  say "installing ${missing[*]}"
  local sudo=()
  [[ $(id -u) -ne 0 ]] && sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
}
install_missing

bin=$build_dir/bin
for b in catena catenad catena-controller; do
  if [[ ! -x $bin/$b ]]; then
    echo "compare.sh: $bin/$b missing: build first (cmake -S $repo -B $build_dir -G Ninja && ninja -C $build_dir)" >&2
    exit 1
  fi
done
if [[ ! -x $bin/nats_bench ]]; then
  say "building nats_bench in $build_dir"
  cmake -S "$repo" -B "$build_dir" >/dev/null
  cmake --build "$build_dir" --target nats_bench >/dev/null
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/catena-compare.XXXXXX")
nats_pids=()
cleanup() {
  for p in "${nats_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${nats_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [[ $keep -eq 1 ]]; then echo "compare.sh: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

# --- 1. Catena -----------------------------------------------------------------------
mkdir -p "$out_dir"
rm -f "$out_dir"/*.hgrm "$out_dir"/*.samples "$out_dir"/latency.svg
say "catena bench (its own cluster in $work/catena)"
"$bin/catena" bench --json --dir "$work/catena" --out-dir "$out_dir" --iters "$iters" --seconds "$seconds" \
  --sizes "$sizes" --latency-sizes "$latency_sizes" --window "$window" >"$work/catena.jsonl" 2>"$work/catena.err" || {
  cat "$work/catena.err" >&2
  exit 1
}
cat "$work/catena.err" >&2

# field <json line> <key>: a flat JSON object's number or string value.
field() {
  local v
  v=$(grep -o "\"$2\":[^,}]*" <<<"$1" | head -n1 | cut -d: -f2-)
  v=${v#\"}
  printf '%s' "${v%\"}"
}
row() {  # row <file> <system> <mode> <bytes>
  grep "\"system\":\"$2\"" "$1" | grep "\"mode\":\"$3\"" | grep "\"bytes\":$4," | head -n1 || true
}
floor_line=$(row "$work/catena.jsonl" floor floor 64)
floor_p50=$(field "$floor_line" p50_ns)

# --- 2. NATS JetStream ---------------------------------------------------------------
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 40000))
    # Nothing listens there, and we did not hand it out already.
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && [[ " ${used_ports[*]:-} " != *" $p "* ]]; then
      used_ports+=("$p")
      echo "$p"
      return
    fi
  done
}
used_ports=()
client_ports=() cluster_ports=()
for i in 1 2 3; do
  client_ports+=("$(free_port)")
  cluster_ports+=("$(free_port)")
done
routes=""
for c in "${cluster_ports[@]}"; do routes+="nats-route://127.0.0.1:$c, "; done
for i in 0 1 2; do
  p=${client_ports[$i]}
  mkdir -p "$work/nats-$p"
  cat >"$work/nats-$p.conf" <<EOF
server_name: nats-$p
listen: 127.0.0.1:$p
jetstream {
  store_dir: "$work/nats-$p"
  max_memory_store: 2G
  max_file_store: 1G
}
cluster {
  name: catena-compare
  listen: 127.0.0.1:${cluster_ports[$i]}
  routes: [ ${routes%, } ]
}
EOF
  nats-server -c "$work/nats-$p.conf" >"$work/nats-$p.log" 2>&1 &
  nats_pids+=($!)
done
say "nats-server $(nats-server --version | awk '{print $2}'): 3 servers on 127.0.0.1:${client_ports[*]} (JetStream cluster)"
for p in "${client_ports[@]}"; do
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && break
    sleep 0.1
  done
done

servers=""
for p in "${client_ports[@]}"; do servers+="nats://127.0.0.1:$p,"; done
say "nats_bench (stream R=3, memory storage)"
"$bin/nats_bench" --json --servers "nats://127.0.0.1:${client_ports[0]}" --replicas 3 --iters "$iters" \
  --seconds "$seconds" --sizes "$sizes" --latency-sizes "$latency_sizes" --pin-cpu "$nats_pin" --window "$window" \
  --floor-p50-ns "${floor_p50:-0}" --samples-dir "$out_dir" >"$work/nats.jsonl"

for p in "${nats_pids[@]}"; do kill "$p" 2>/dev/null || true; done
for p in "${nats_pids[@]}"; do wait "$p" 2>/dev/null || true; done
nats_pids=()

# --- 3. side by side -----------------------------------------------------------------
all=$work/all.jsonl
cat "$work/catena.jsonl" "$work/nats.jsonl" >"$all"
echo
echo "## raw (JSON lines)"
cat "$all"
echo
printf '%-7s %-19s %7s %11s %11s %11s %13s %10s\n' system mode bytes "p50 us" "p99 us" "p99.9 us" "msgs/s" "MB/s"
while IFS= read -r l; do
  awk -v s="$(field "$l" system)" -v m="$(field "$l" mode)" -v b="$(field "$l" bytes)" -v p50="$(field "$l" p50_ns)" \
    -v p99="$(field "$l" p99_ns)" -v p999="$(field "$l" p999_ns)" -v r="$(field "$l" msgs_per_s)" \
    -v mb="$(field "$l" mb_per_s)" \
    'BEGIN { printf "%-7s %-19s %7s %11.1f %11.1f %11.1f %13.0f %10.1f\n", s, m, b, p50/1e3, p99/1e3, p999/1e3, r, mb }'
done <"$all"

echo
echo "## ratios"
IFS=, read -ra lat_list <<<"$latency_sizes"
for b in "${lat_list[@]}"; do
  for mode in commit_ack_latency delivery_latency; do
    c=$(row "$work/catena.jsonl" catena "$mode" "$b")
    n=$(row "$work/nats.jsonl" nats "$mode" "$b")
    [[ -z $c || -z $n ]] && continue
    cp=$(field "$c" p50_ns)
    np=$(field "$n" p50_ns)
    awk -v m="$mode" -v b="$b" -v c="$cp" -v n="$np" -v f="${floor_p50:-0}" 'BEGIN {
      printf "%-19s %6s B  p50 catena %8.1f us  nats %8.1f us  nats/catena %6.2fx   catena/floor %5.2fx (floor p50 %.1f us)\n",
        m, b, c/1e3, n/1e3, (c > 0 ? n/c : 0), (f > 0 ? c/f : 0), f/1e3 }'
  done
done
IFS=, read -ra size_list <<<"$sizes"
for b in "${size_list[@]}"; do
  c=$(row "$work/catena.jsonl" catena throughput "$b")
  n=$(row "$work/nats.jsonl" nats throughput "$b")
  [[ -z $c || -z $n ]] && continue
  cm=$(field "$c" msgs_per_s)
  nm=$(field "$n" msgs_per_s)
  awk -v b="$b" -v c="$cm" -v n="$nm" 'BEGIN {
    printf "%-19s %6s B  catena %12.0f msg/s  nats %10.0f msg/s  catena/nats %7.2fx\n", "throughput", b, c, n, (n > 0 ? c/n : 0) }'
done
echo
echo "## latency by percentile (HdrHistogram .hgrm, microseconds)"
"$bin/catena" bench --replot --out-dir "$out_dir"
echo
echo "targets (reported, not asserted): commit-ack p50 <= 1.5x floor; >= 10x below NATS; throughput >= 20x NATS"
