#!/bin/sh
# /init of the rxe VM (PID 1), appended to the image at every boot by xtask/src/vm/mod.rs.
#
# It loads the kernel modules, mounts the host's control directory (9p tag "ctl") on /run/vm
# and the host directories listed in /run/vm/mounts at their host paths, creates the rxe
# devices that /run/vm/env describes, runs /run/vm/cmd with /run/vm/timeout seconds to finish
# (or an interactive shell in /run/vm/cwd when /run/vm/shell exists), writes its exit code
# to /run/vm/rc (124 when it ran out of time) and the kernel log to /run/vm/dmesg, and powers
# off.
#
# Devices (the variables of /run/vm/env, see xtask/src/rxe/topology.rs):
#   $ZVERBS_TEST_DEVICE on dummy0 ($ZVERBS_TEST_ADDR): both ends of a connection on one device
#   $ZVERBS_TEST_PAIR (a,b) on the two ends of a veth pair ($ZVERBS_TEST_PAIR_ADDRS): packets
#   cross a link
export PATH=/usr/sbin:/usr/bin HOME=/root TERM=dumb
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
ln -sf /proc/self/fd /dev/fd
hostname rxevm
CTL=/run/vm

log() { echo "[rxevm $(cut -d' ' -f1 /proc/uptime)] $*"; }
off() {
  sync
  poweroff -f
  sleep 5
  echo o > /proc/sysrq-trigger
}
# finish RC: reports RC and the kernel log to the host, then powers off.
finish() {
  cd /
  dmesg > "$CTL/dmesg" 2>/dev/null
  echo "$1" > "$CTL/rc"
  sync
  umount -a -t 9p 2>/dev/null
  off
}
fail() {
  log "FAILED: $*"
  finish 125
}

while read -r mod params; do
  insmod "$mod" $params || log "insmod $mod failed"
done < /etc/zverbs-vm/modules

P9="trans=virtio,version=9p2000.L,msize=512000"
mkdir -p "$CTL"
mount -t 9p -o "$P9" ctl "$CTL" || { log "cannot mount the control directory"; off; }
TAB=$(printf '\t')
while IFS="$TAB" read -r tag path; do
  mkdir -p "$path" && mount -t 9p -o "$P9" "$tag" "$path" || fail "cannot mount $path"
done < "$CTL/mounts"

# The topology, exported to the command as well.
set -a
. "$CTL/env"
set +a

ip link set lo up
# Single device: rxe on a dummy interface.
ip link add dummy0 type dummy
ip addr add "$ZVERBS_TEST_ADDR/24" dev dummy0
ip link set dummy0 up
rdma link add "$ZVERBS_TEST_DEVICE" type rxe netdev dummy0 || fail "rdma link add $ZVERBS_TEST_DEVICE"

# Two devices on the two ends of a veth pair.
A=${ZVERBS_TEST_PAIR%,*}; B=${ZVERBS_TEST_PAIR#*,}
AA=${ZVERBS_TEST_PAIR_ADDRS%,*}; BA=${ZVERBS_TEST_PAIR_ADDRS#*,}
ip link add veth1 type veth peer name veth2
ip addr add "$AA/24" dev veth1
ip addr add "$BA/24" dev veth2
ip link set veth1 up
ip link set veth2 up
rdma link add "$A" type rxe netdev veth1 || fail "rdma link add $A"
rdma link add "$B" type rxe netdev veth2 || fail "rdma link add $B"
# Both addresses are local to this one network namespace, so by default traffic between them
# goes through lo, and rxe drops what arrives on lo (modifying a QP to RTR fails). rxe in
# Linux 6.1 listens on its UDP port in the initial namespace only, so a namespace per end is
# no way out. Instead, route locally generated traffic between the two addresses out through
# the veth ("iif lo" rules match output only), consulting the local table after that, and
# accept packets from a local address on the veth.
for i in all veth1 veth2; do
  echo 1 > /proc/sys/net/ipv4/conf/$i/accept_local
  echo 0 > /proc/sys/net/ipv4/conf/$i/rp_filter
done
ip rule add pref 100 lookup local && ip rule del pref 0 lookup local
ip route add "$BA/32" dev veth1 src "$AA" table 101
ip route add "$AA/32" dev veth2 src "$BA" table 102
ip rule add pref 10 iif lo from "$AA" to "$BA" lookup 101
ip rule add pref 11 iif lo from "$BA" to "$AA" lookup 102
ip neigh replace "$BA" lladdr "$(cat /sys/class/net/veth2/address)" dev veth1 nud permanent
ip neigh replace "$AA" lladdr "$(cat /sys/class/net/veth1/address)" dev veth2 nud permanent

for d in "$ZVERBS_TEST_DEVICE" "$A" "$B"; do
  n=0
  until grep -q ACTIVE "/sys/class/infiniband/$d/ports/1/state" 2>/dev/null; do
    n=$((n + 1)); [ $n -gt 100 ] && fail "$d: port not active"
    sleep 0.1
  done
done
log "$(rdma link show | tr '\n' ';')"

ulimit -l unlimited   # memory registration pins pages
ulimit -c 0
# Keep the kernel's messages off the console while the command runs (they are in $CTL/dmesg).
echo 1 > /proc/sys/kernel/printk

if [ -e "$CTL/shell" ]; then
  log "shell: devices $ZVERBS_TEST_DEVICE, $A, $B; 'exit' powers off"
  cd "$(cat "$CTL/cwd")" || cd /
  setsid cttyhack sh
  finish 0
fi

TMO=$(cat "$CTL/timeout")
echo ZVERBS_VM_BEGIN
"$CTL/cmd" &
pid=$!
( sleep "$TMO"; touch "$CTL/timedout"; kill -KILL "$pid" 2>/dev/null ) &
dog=$!
wait $pid
rc=$?
kill $dog 2>/dev/null
if [ -e "$CTL/timedout" ]; then
  echo "rxevm: the command ran out of time (${TMO}s)"
  rc=124
fi
printf '\nZVERBS_VM_END %s\n' "$rc"
finish $rc
