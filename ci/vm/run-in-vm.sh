#!/usr/bin/env bash
# Runs a command inside a QEMU (TCG) VM whose stock Debian kernel provides
# soft-RoCE: rxe0 on eth0 (10.0.2.15), CATENA_PROVIDER=verbs:rxe0 and
# CATENA_TEST_ADDR=10.0.2.15 exported. Streams the VM console to stdout and
# a log file and exits with the command's exit code.
#
# Usage: ci/vm/run-in-vm.sh [OPTIONS] -- COMMAND [ARGS...]
#   --bin PATH        put PATH into the VM as /bin/<basename> (repeatable;
#                     $CATENA_VM_BINS adds more, separated by spaces)
#   --env NAME=VALUE  export a variable to COMMAND (repeatable)
#   --timeout SEC     kill the VM after SEC seconds, exit 124 (default 300)
#   --results DIR     copy back what COMMAND wrote under /results in the VM
#   --log FILE        console log (default ci/vm/cache/logs/run-*.log)
#   --shell           interactive shell in the VM after COMMAND (debugging)
#   --mem MB, --smp N VM size (default 1024 MB, 2 vCPUs)
#   --wire LPORT:RPORT:ADDR  a second NIC (eth1) on a virtual wire to another
#                     VM: UDP from 127.0.0.1:LPORT to 127.0.0.1:RPORT on the
#                     host (the peer VM swaps the ports). rxe0 then runs on
#                     eth1 with address ADDR/24 (CATENA_TEST_ADDR=ADDR)
#   --wire tap:IFNAME:ADDR  the same NIC on the host's existing tap IFNAME
#
# COMMAND runs under busybox sh inside the VM, e.g. -- sh -c 'a & b; wait'.
# Exit codes: COMMAND's own; 124 timeout; 125 VM failed before COMMAND ended.
set -euo pipefail

prog=run-in-vm.sh
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
  sed -n '2,24s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
  exit 2
}

timeout_s=300
mem_mb=1024
smp=2
results_dir=""
log=""
shell=0
bins=()
envs=()
wire=""
read -r -a env_bins <<<"${CATENA_VM_BINS:-}"
bins+=("${env_bins[@]}")

while (($# > 0)); do
  case $1 in
    --bin) bins+=("${2:?--bin needs a path}"); shift 2 ;;
    --env) envs+=("${2:?--env needs NAME=VALUE}"); shift 2 ;;
    --timeout) timeout_s=${2:?--timeout needs seconds}; shift 2 ;;
    --results) results_dir=${2:?--results needs a directory}; shift 2 ;;
    --log) log=${2:?--log needs a file}; shift 2 ;;
    --shell) shell=1; shift ;;
    --mem) mem_mb=${2:?--mem needs MB}; shift 2 ;;
    --smp) smp=${2:?--smp needs a count}; shift 2 ;;
    --wire) wire=${2:?--wire needs LPORT:RPORT:ADDR}; shift 2 ;;
    --) shift; break ;;
    -h | --help) usage ;;
    *) echo "$prog: unknown option $1 (want -- before the command)" >&2; usage ;;
  esac
done
(($# > 0 || shell)) || { echo "$prog: no command given" >&2; usage; }
[[ $timeout_s =~ ^[0-9]+$ ]] || die "--timeout wants whole seconds, got $timeout_s"
for b in "${bins[@]}"; do
  [[ -f $b ]] || die "--bin $b: no such file"
done
for e in "${envs[@]}"; do
  [[ $e =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env wants NAME=VALUE, got $e"
done
wire_qemu=()
if [[ $wire =~ ^tap:([A-Za-z0-9_-]+):([0-9]+\.[0-9]+\.[0-9]+\.([0-9]+))$ ]]; then
  # eth1 on an existing host tap device (the host side of the wire is a
  # program on that interface, e.g. the dpdk provider: ci/vm/dpdk-interop.sh).
  wire_addr=${BASH_REMATCH[2]}
  wire_mac=$(printf '52:54:00:ca:7e:%02x' "${BASH_REMATCH[3]}")
  # shellcheck disable=SC2054 # the commas are qemu's, inside one argument
  wire_qemu=(-netdev "tap,id=wire,ifname=${BASH_REMATCH[1]},script=no,downscript=no"
    -device "virtio-net-pci,netdev=wire,mac=$wire_mac,romfile=")
elif [[ -n $wire ]]; then
  [[ $wire =~ ^([0-9]+):([0-9]+):([0-9]+\.[0-9]+\.[0-9]+\.([0-9]+))$ ]] \
    || die "--wire wants LPORT:RPORT:ADDR or tap:IFNAME:ADDR (IPv4), got $wire"
  wire_addr=${BASH_REMATCH[3]}
  # One MAC per address: both ends of the wire must differ.
  wire_mac=$(printf '52:54:00:ca:7e:%02x' "${BASH_REMATCH[4]}")
  # shellcheck disable=SC2054 # the commas are qemu's, inside one argument
  wire_qemu=(-netdev "socket,id=wire,udp=127.0.0.1:${BASH_REMATCH[2]},localaddr=127.0.0.1:${BASH_REMATCH[1]}"
    -device "virtio-net-pci,netdev=wire,mac=$wire_mac,romfile=")
fi

start=$EPOCHREALTIME
mkdir -p "$vm_cache/tmp" "$vm_cache/logs"
work=$(mktemp -d "$vm_cache/tmp/run.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
if [[ -z $log ]]; then
  log=$vm_cache/logs/run-$(date +%Y%m%d-%H%M%S)-$$.log
  ln -sfn "$(basename "$log")" "$vm_cache/logs/last.log"
  # Keep the 20 newest logs.
  find "$vm_cache/logs" -name 'run-*.log' -printf '%T@ %p\n' | sort -rn | tail -n +21 \
    | cut -d' ' -f2- | xargs -r rm -f --
fi
mkdir -p "$(dirname "$log")"

kernel_image=$("$vm_dir/build-image.sh" "$work/base.cpio.gz" "${bins[@]}")

# elapsed FROM TO prints TO - FROM (two $EPOCHREALTIME values) in seconds.
elapsed() {
  awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'
}

# sh_quote ARG prints ARG single-quoted for busybox sh.
sh_quote() {
  printf "'%s'" "${1//\'/\'\\\'\'}"
}

# A second cpio appended to the image carries this run's command and
# settings; the kernel unpacks concatenated archives in order.
mkdir -p "$work/overlay/catena"
{
  printf 'exec'
  for a in "$@"; do printf ' %s' "$(sh_quote "$a")"; done
  printf '\n'
} >"$work/overlay/catena/cmd"
((${#} > 0)) || rm "$work/overlay/catena/cmd"
for e in "${envs[@]}"; do
  printf 'export %s=%s\n' "${e%%=*}" "$(sh_quote "${e#*=}")"
done >"$work/overlay/catena/env"
((shell)) && touch "$work/overlay/catena/shell"
[[ -n $wire ]] && echo "$wire_addr" >"$work/overlay/catena/wire"
[[ -n $results_dir ]] && touch "$work/overlay/catena/results"
(cd "$work/overlay" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) \
  | gzip -1 >"$work/overlay.cpio.gz"
cat "$work/base.cpio.gz" "$work/overlay.cpio.gz" >"$work/initrd.cpio.gz"

# Extra qemu arguments for debugging, e.g. CATENA_VM_QEMU_EXTRA='-s' for gdb.
read -r -a qemu_extra <<<"${CATENA_VM_QEMU_EXTRA:-}"
# shellcheck disable=SC2054 # the commas are qemu's, inside one argument
qemu=(
  qemu-system-x86_64 -accel tcg -cpu max -m "$mem_mb" -smp "$smp"
  -nographic -no-reboot -vga none
  -kernel "$kernel_image" -initrd "$work/initrd.cpio.gz"
  # panic=-1: a dying init reboots at once, which -no-reboot turns into exit.
  -append "console=ttyS0 quiet panic=-1 mitigations=off"
  # restrict=on: the guest reaches nothing outside the VM, not even the host.
  -netdev user,id=net0,restrict=on -device virtio-net-pci,netdev=net0,romfile=
  "${wire_qemu[@]}"
  "${qemu_extra[@]}"
)

note "booting VM (timeout ${timeout_s}s, log $log)"
boot_start=$EPOCHREALTIME
# --foreground keeps qemu in the terminal's process group: an interactive
# --shell gets the tty, and qemu is not stopped by SIGTTIN.
stdin=/dev/null
((shell)) && stdin=/dev/stdin
set +e
timeout --foreground --kill-after=10 "$timeout_s" "${qemu[@]}" <"$stdin" 2>&1 \
  | sed -u -e 's/\r$//' -e 's/\x1b\[[0-9;?]*[A-Za-z]//g' -e 's/\x1bc//g' \
  | tee "$log" \
  | awk '
      /^CATENA_VM_RESULTS_BEGIN$/ { skipping = 1; n = 0; next }
      /^CATENA_VM_RESULTS_END$/ { skipping = 0; print "[results archive: " n " lines]"; fflush(); next }
      skipping { n++; next }
      { print; fflush() }'
qemu_rc=${PIPESTATUS[0]}
set -e
end=$EPOCHREALTIME

# Not anchored at line start: output without a final newline may precede.
ready=$(sed -n 's/.*CATENA_VM_READY uptime=\([0-9.]*\)s$/\1/p' "$log" | tail -n 1)
marker=$(sed -n 's/.*CATENA_VM_EXIT=\([0-9][0-9]*\)$/\1/p' "$log" | tail -n 1)
error=$(sed -n 's/.*CATENA_VM_ERROR=//p' "$log" | tail -n 1)

if [[ -n $results_dir ]] && grep -q '^CATENA_VM_RESULTS_END$' "$log"; then
  mkdir -p "$results_dir"
  sed -n '/^CATENA_VM_RESULTS_BEGIN$/,/^CATENA_VM_RESULTS_END$/p' "$log" \
    | sed '1d;$d' | base64 -d | tar -xzf - -C "$results_dir" \
    || die "could not unpack /results from the log (see $log)"
  note "copied /results to $results_dir"
fi

note "guest ready at ${ready:-?}s of guest uptime; wall time: build $(elapsed "$start" "$boot_start")s, VM $(elapsed "$boot_start" "$end")s, total $(elapsed "$start" "$end")s"
if [[ -n $marker ]]; then
  note "command exited $marker"
  exit "$marker"
fi
if [[ -n $error ]]; then
  note "VM setup failed: $error (log $log)"
  exit 125
fi
if ((qemu_rc == 124 || qemu_rc == 137)); then
  note "timed out after ${timeout_s}s (log $log)"
  exit 124
fi
note "VM ended without CATENA_VM_EXIT (qemu rc $qemu_rc; log $log)"
exit 125
