#!/usr/bin/busybox sh
# PID 1 of the soft-RoCE VM (busybox sh). Loads the modules listed in
# /etc/catena-modules, gives eth0 (eth1 with --wire) a static address,
# creates rxe0 on it, runs /catena/cmd (written by run-in-vm.sh), reports its
# exit code on the console as CATENA_VM_EXIT=<rc> and powers off. Anything
# that goes wrong before the command runs is reported as
# CATENA_VM_ERROR=<reason>.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
/usr/bin/busybox --install -s
export HOME=/root TERM=dumb

mount -t devtmpfs devtmpfs /dev
# The initramfs has no /dev/console node, so the kernel started us without
# stdio: take the console now that devtmpfs provides it.
exec </dev/console >/dev/console 2>&1
echo # the firmware's last line has no newline
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run

addr=10.0.2.15
netdev=eth0
rxe=rxe0
# run-in-vm.sh --wire: rxe0 runs on the NIC wired to another VM instead.
if [ -f /catena/wire ]; then
  read -r addr </catena/wire
  netdev=eth1
fi

halt_vm() {
  sync
  poweroff -f
  reboot -f # with qemu -no-reboot this also ends the VM
}

fail() {
  echo "CATENA_VM_ERROR=$*"
  dmesg | tail -n 30
  halt_vm
}

# wait_for TENTHS CMD... polls CMD every 0.1 s until it succeeds.
wait_for() {
  n=$1
  shift
  while ! "$@" 2>/dev/null; do
    n=$((n - 1))
    [ "$n" -gt 0 ] || return 1
    sleep 0.1
  done
}

while read -r m; do
  insmod "/lib/modules/catena/$m.ko" || fail "insmod $m"
done </etc/catena-modules
grep -q ' /sys/kernel/config ' /proc/mounts || mount -t configfs configfs /sys/kernel/config

wait_for 50 test -e /sys/class/net/$netdev || fail "no $netdev (virtio-net)"
# No duplicate address detection and no router solicitations: the link-local
# address (GID 0) is usable at once and nothing is sent towards qemu's gateway.
for c in all default $netdev; do
  echo 0 >"/proc/sys/net/ipv6/conf/$c/accept_dad"
  echo 0 >"/proc/sys/net/ipv6/conf/$c/router_solicitations"
done
ip link set lo up || fail "lo up"
ip link set $netdev up || fail "$netdev up"
ip addr add $addr/24 dev $netdev || fail "address on $netdev"

rdma link add $rxe type rxe netdev $netdev || fail "rdma link add $rxe"
port=/sys/class/infiniband/$rxe/ports/1
port_active() { grep -q ACTIVE $port/state; }
# GID 1 is the IPv4-mapped GID of $addr; tests select it by index.
gid1_ready() { ! grep -q '^0000:0000:0000:0000:0000:0000:0000:0000$' $port/gids/1; }
wait_for 100 port_active || fail "$rxe not ACTIVE: $(cat $port/state)"
wait_for 100 gid1_ready || fail "$rxe has no GID 1"

export CATENA_PROVIDER=verbs:$rxe CATENA_TEST_ADDR=$addr CATENA_IN_VM=1
# Variables passed with run-in-vm.sh --env.
[ -f /catena/env ] && . /catena/env

read -r up _ </proc/uptime
echo "CATENA_VM_READY uptime=${up}s"
cd /root || fail "no /root"
if [ -f /catena/cmd ]; then
  sh /catena/cmd </dev/null
  rc=$?
else
  rc=0
fi

if [ -f /catena/shell ] || [ ! -f /catena/cmd ]; then
  echo "catena-vm: command exited $rc; interactive shell (exit to power off)"
  setsid cttyhack sh -l
fi

if [ -f /catena/results ] && [ -n "$(ls -A /results)" ]; then
  # Quiet the kernel so its messages cannot split the encoded archive.
  dmesg -n 1
  echo # in case the command's output did not end in a newline
  echo CATENA_VM_RESULTS_BEGIN
  tar -C /results -czf - . | base64
  echo CATENA_VM_RESULTS_END
fi
echo "CATENA_VM_EXIT=$rc"
halt_vm
