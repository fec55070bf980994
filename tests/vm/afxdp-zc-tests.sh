# Tests of the afxdp method inside the test guest, on the guest kernel's own
# virtio-net driver, which binds AF_XDP sockets zero-copy in newer kernels
# (veth, the only NIC the host has, refuses zero-copy). Run by tests/vm/run.sh
# with BCL_VM_TESTS=tests/vm/afxdp-zc-tests.sh, BCL_VM_MIXED=0 and a kernel
# that new (BCL_VM_KERNEL_SUITE=trixie-backports: 7.3 binds zero-copy, the
# 6.12 of bookworm-backports refuses it); drivers/vfio/tests/vm.rs does
# that. Same format and rules as guest-tests.sh: one `run NAME COMMAND` line
# per test, each must run and pass once.
#
# NICs A and B are virtio-net devices on one QEMU hub, with
# iommu_platform=on: virtio-net's zero-copy needs the DMA API, which the
# emulated IOMMU gives it. Every afxdp run here must report its queue bound
# zero-copy ("queue 0: zero-copy" in the method's notes), not only pass.

iface() { ls /sys/bus/pci/devices/$1/virtio*/net 2>/dev/null | head -1; }
IF_A=$(iface "$NIC_A")
IF_B=$(iface "$NIC_B")

# zero_copy FILE: FILE (a tool's output) says the afxdp queue was bound
# zero-copy; prints the mode line either way.
zero_copy() {
  line=$(grep -m1 'queue 0: ' "$1")
  echo "BCL-VM-AFXDP-MODE: ${line#"# afxdp: "}"
  echo "$line" | grep -q 'queue 0: zero-copy'
}

# listening OUT PID: waits for the `listening:` line of a server writing to
# OUT, prints its descriptor; fails if the server ends first.
listening() {
  i=0
  while [ $i -lt 600 ]; do
    d=$(sed -n 's/^listening: //p' "$1")
    [ -n "$d" ] && { echo "$d"; return 0; }
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
    i=$((i + 1))
  done
  return 1
}

# stream SERVER_ARGS CLIENT_ARGS: a verified bcl-bw stream over afxdp from
# NIC B (client) to NIC A (server); both must exit 0 and bind zero-copy.
stream() {
  so=/tmp/stream.server.out co=/tmp/stream.client.out
  bcl-bw --method afxdp --ifname "$IF_A" $1 --serve > $so 2>&1 &
  spid=$!
  if ! desc=$(listening $so $spid); then
    echo "server did not start:"; cat $so; kill $spid 2>/dev/null; wait $spid
    return 1
  fi
  bcl-bw --method afxdp --ifname "$IF_B" $2 --connect "$desc" > $co 2>&1
  crc=$?
  wait $spid
  src=$?
  sed 's/^/server: /' $so
  sed 's/^/client: /' $co
  echo "client exit $crc, server exit $src"
  zero_copy $so && zero_copy $co && [ $crc = 0 ] && [ $src = 0 ]
}

# foreign: while NIC A's queue is bound zero-copy (an afxdp server waiting
# for its client, XDP program attached), a verified packet (AF_PACKET)
# stream on EtherType 0x88b6 runs to NIC A, and the afxdp stream (0x88b5)
# runs beside it: frames the XDP program does not take go to the kernel
# (in zero-copy mode the driver copies them out of the UMEM into an skb),
# and neither stream loses, duplicates, reorders or corrupts anything.
foreign() {
  xo=/tmp/foreign.afxdp.server.out xc=/tmp/foreign.afxdp.client.out
  po=/tmp/foreign.packet.server.out pc=/tmp/foreign.packet.client.out
  bcl-bw --method afxdp --ifname "$IF_A" --verify --serve > $xo 2>&1 &
  xpid=$!
  if ! xdesc=$(listening $xo $xpid); then
    echo "afxdp server did not start:"; cat $xo; kill $xpid 2>/dev/null; wait $xpid
    return 1
  fi
  bcl-bw --method packet --ifname "$IF_A" --ethertype 0x88b6 --verify --serve > $po 2>&1 &
  ppid=$!
  if ! pdesc=$(listening $po $ppid); then
    echo "packet server did not start:"; cat $po; kill $ppid $xpid 2>/dev/null; wait
    return 1
  fi
  bcl-bw --method packet --ifname "$IF_B" --ethertype 0x88b6 --connect "$pdesc" $BW_LONG > $pc 2>&1 &
  pcpid=$!
  bcl-bw --method afxdp --ifname "$IF_B" --connect "$xdesc" $BW > $xc 2>&1
  xcrc=$?
  wait $xpid
  xsrc=$?
  wait $pcpid
  pcrc=$?
  wait $ppid
  psrc=$?
  for f in $xo $xc $po $pc; do sed "s|^|$(basename $f .out): |" $f; done
  echo "afxdp client $xcrc server $xsrc, packet client $pcrc server $psrc"
  zero_copy $xo && zero_copy $xc &&
    [ $xcrc = 0 ] && [ $xsrc = 0 ] && [ $pcrc = 0 ] && [ $psrc = 0 ]
}

# killed: an afxdp server killed with SIGKILL (its XDP program and socket
# left to the kernel's cleanup) is followed on the same NIC by a new one
# that binds zero-copy again and serves a verified stream.
killed() {
  ko=/tmp/killed.server.out
  bcl-bw --method afxdp --ifname "$IF_A" --verify --serve > $ko 2>&1 &
  kpid=$!
  if ! listening $ko $kpid > /dev/null; then
    echo "server did not start:"; cat $ko; kill $kpid 2>/dev/null; wait $kpid
    return 1
  fi
  zero_copy $ko || return 1
  kill -9 $kpid
  wait $kpid
  echo "server killed (SIGKILL); XDP on $IF_A now: $(ip link show "$IF_A" | grep -o 'prog/xdp id [0-9]*' || echo none)"
  stream "--verify" "$BW"
}

# Generous timeouts: a TCG guest on a loaded host can stall for long.
BW="--sizes 64,1400,16K --iters 8 --warmup 2 --window 32 --verify --timeout-ms 60000"
BW_LONG="--sizes 64,1400 --iters 60 --warmup 2 --window 32 --verify --timeout-ms 60000"

run links-up    sh -c "ip link set lo up && ip link set $IF_A up && ip link set $IF_B up && echo \"NICs: A $IF_A, B $IF_B\" && test -n \"$IF_A\" && test -n \"$IF_B\""
run stream      stream "--verify" "$BW"
run foreign     foreign
run killed      killed
