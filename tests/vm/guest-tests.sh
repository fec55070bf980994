# Tests run inside the VFIO test guest, in order, by tests/vm/init.
#
# One test per line:   run NAME COMMAND [ARGS...]
# A test passes when COMMAND exits 0. Available in the guest:
#   $NIC_A, $NIC_B   PCI addresses of the two virtio-net NICs (one QEMU hub);
#                    at boot they belong to the kernel's virtio-pci driver
#   $MAC_A, $MAC_B   their MAC addresses
#   $NIC_C, $NIC_D   two more virtio-net NICs in ONE IOMMU group (behind a
#                    PCIe-to-PCI bridge), for the group-viability test
#   $NIC_E, $MAC_E   a fifth virtio-net NIC, on a tap into a host network
#                    namespace where BCL servers run on AF_PACKET, or on
#                    AF_XDP with BCL_VM_HOST_METHOD=afxdp (when $MIXED = 1):
#                    bcl-pingpong at $HOST_PP_DESC and bcl-bw --verify at
#                    $HOST_BW_DESC (EtherType $HOST_BW_ETHERTYPE)
#   busybox applets, and every binary built by run.sh (bcl-vfio,
#   bcl-pingpong, bcl-bw, bcl-run, bcl-alltoall, bcld, plus those named in
#   BCL_VM_EXTRA_BINS)
# To add a test, add a line here (and, for a new binary, name it in
# BCL_VM_EXTRA_BINS, e.g. in the environment of run.sh or in vm.rs).
#
# The host expects every line that starts with `run ` to run and pass, once:
# run.sh and drivers/vfio/tests/vm.rs count those lines and fail unless the
# guest's `guest-tests: ran N passed N` has that N. So each test is one
# top-level line starting with `run `, never inside a condition, a loop or
# a function (a test that does not apply here passes with a SKIP line, as
# `mixed` does).

# serve_connect TOOL "SERVER ARGS" "CLIENT ARGS": runs TOOL SERVER_ARGS
# --serve in the background, passes the descriptor of its `listening:` line
# to TOOL CLIENT_ARGS --connect, and succeeds when both exit 0 (one
# process per NIC, as on two hosts). Prints both outputs.
serve_connect() {
  tool=$1 sargs=$2 cargs=$3 out=/tmp/$1.server.out
  $tool $sargs --serve > $out 2>&1 &
  spid=$!
  desc=""
  i=0
  while [ $i -lt 300 ]; do
    desc=$(sed -n 's/^listening: //p' $out)
    [ -n "$desc" ] && break
    kill -0 $spid 2>/dev/null || break
    sleep 0.1
    i=$((i + 1))
  done
  if [ -z "$desc" ]; then
    echo "$tool server did not print its descriptor:"; cat $out
    kill $spid 2>/dev/null; wait $spid
    return 1
  fi
  echo "server: listening: $desc"
  $tool $cargs --connect "$desc"
  crc=$?
  wait $spid
  src=$?
  sed 's/^/server: /' $out
  echo "client exit $crc, server exit $src"
  [ $crc = 0 ] && [ $src = 0 ]
}

# Runs a mixed (guest VFIO <-> host AF_PACKET) test only when run.sh set
# up the host side.
mixed() {
  if [ "$MIXED" != 1 ]; then echo "SKIP: BCL_VM_MIXED=0 (no host side)"; return 0; fi
  "$@"
}

# host_connects TOOL ARGS: runs TOOL ARGS --serve in the background and
# prints "BCL-VM-HOST-CONNECT: DESCRIPTOR", on which run.sh starts a bcl-bw
# client on the host side of the tap (AF_PACKET, EtherType
# $HOST_REV_ETHERTYPE, --verify); succeeds when the server exits 0.
host_connects() {
  out=/tmp/host-connects.out
  "$@" --serve > $out 2>&1 &
  spid=$!
  desc=""
  i=0
  while [ $i -lt 300 ]; do
    desc=$(sed -n 's/^listening: //p' $out)
    [ -n "$desc" ] && break
    kill -0 $spid 2>/dev/null || break
    sleep 0.1
    i=$((i + 1))
  done
  [ -n "$desc" ] && echo "BCL-VM-HOST-CONNECT: $desc"
  wait $spid
  src=$?
  cat $out
  echo "server exit $src"
  [ $src = 0 ]
}

# cluster_vfio: a two-rank job started by bcl-run whose resource database
# gives this node the two NICs as vfio devices (by PCI address, no kernel
# interface) on one fabric, with BCL_METHODS=vfio: the cluster layer opens
# vfio on NIC A for local rank 0 and on NIC B for local rank 1, and the
# verified all-to-all exchange runs over it (both ranks report a vfio link).
cluster_vfio() {
  # bcl-run's rendezvous listens on 127.0.0.1.
  ip link set lo up || return 1
  cat > /tmp/vfio-cluster.toml <<EOF
[[fabric]]
name = "V"
[[node]]
name = "local"
[[node.nic]]
fabric = "V"
pci = "$NIC_A"
methods = ["vfio"]
[[node.nic]]
fabric = "V"
pci = "$NIC_B"
methods = ["vfio"]
EOF
  out=$(BCL_METHODS=vfio bcl-run -n 2 --timeout 120 --env BCL_CLUSTER=/tmp/vfio-cluster.toml -- \
    bcl-alltoall --sizes 8,1400,16384,262144 --timeout 120 2>&1)
  rc=$?
  echo "$out"
  links=$(echo "$out" | grep -c '"method":"vfio"')
  echo "exit $rc, vfio links $links"
  [ $rc = 0 ] && [ "$links" = 2 ]
}

# wait_listening FILE: the descriptor a server printed to FILE
# (`listening: DESC`), once it has (up to 30 s).
wait_listening() {
  i=0
  while [ $i -lt 300 ]; do
    d=$(sed -n 's/^listening: //p' "$1")
    [ -n "$d" ] && { echo "$d"; return 0; }
    sleep 0.1
    i=$((i + 1))
  done
  return 1
}

# bcld_vfio: a node daemon on each NIC (bcld --method vfio: the daemon owns
# the VFIO device), and two pairs of bcl-bw clients through them at once
# (--method bcld, ports 1 and 2: four processes share the two devices), as
# an unprivileged user (uid 65534, who cannot open /dev/vfio; the tools'
# runs are one job, and a job belongs to one user), all verified.
bcld_vfio() {
  mkdir -p /dev/shm
  grep -q ' /dev/shm ' /proc/mounts || mount -t tmpfs -o mode=1777 tmpfs /dev/shm || return 1
  mkdir -p /etc
  grep -q '^nobody:' /etc/passwd 2>/dev/null || echo 'nobody:x:65534:65534:nobody:/:/bin/sh' >> /etc/passwd
  grep -q '^nogroup:' /etc/group 2>/dev/null || echo 'nogroup:x:65534:' >> /etc/group
  bcld --foreground --node 2 --method vfio --nic "$NIC_A" --socket /run/bcld-a.sock > /tmp/bcld-a.out 2>&1 &
  da=$!
  bcld --foreground --node 1 --method vfio --nic "$NIC_B" --socket /run/bcld-b.sock > /tmp/bcld-b.out 2>&1 &
  db=$!
  i=0
  while [ $i -lt 600 ] && ! { [ -S /run/bcld-a.sock ] && [ -S /run/bcld-b.sock ]; }; do
    sleep 0.1
    i=$((i + 1))
  done
  cat /tmp/bcld-a.out /tmp/bcld-b.out
  su -s /bin/sh nobody -c "BCL_BCLD_SOCKET=/run/bcld-a.sock bcl-bw --method bcld --port 1 --verify --timeout-ms 60000 --serve" > /tmp/bs1.out 2>&1 &
  s1=$!
  su -s /bin/sh nobody -c "BCL_BCLD_SOCKET=/run/bcld-a.sock bcl-bw --method bcld --port 2 --verify --timeout-ms 60000 --serve" > /tmp/bs2.out 2>&1 &
  s2=$!
  d1=$(wait_listening /tmp/bs1.out) && d2=$(wait_listening /tmp/bs2.out)
  ok=$?
  if [ $ok = 0 ]; then
    su -s /bin/sh nobody -c "BCL_BCLD_SOCKET=/run/bcld-b.sock bcl-bw --method bcld --port 1 --connect '$d1' $BW" > /tmp/bc1.out 2>&1 &
    c1=$!
    su -s /bin/sh nobody -c "BCL_BCLD_SOCKET=/run/bcld-b.sock bcl-bw --method bcld --port 2 --connect '$d2' $BW" > /tmp/bc2.out 2>&1
    rc2=$?
    wait $c1
    rc1=$?
  fi
  wait $s1
  rs1=$?
  wait $s2
  rs2=$?
  for f in bs1 bc1 bs2 bc2; do sed "s/^/$f: /" /tmp/$f.out 2>/dev/null; done
  kill $da $db
  wait $da $db
  echo "servers $rs1 $rs2, clients ${rc1:-none} ${rc2:-none}"
  [ $ok = 0 ] && [ "$rs1" = 0 ] && [ "$rs2" = 0 ] && [ "$rc1" = 0 ] && [ "$rc2" = 0 ]
}

# Settings of the BCL runs: generous timeouts, since a TCG guest on a loaded
# host can stall for a long time.
PP="--sizes 8,1400,16K --iters 300 --warmup 30 --timeout-ms 60000"
BW="--sizes 64,1400,16K --iters 8 --warmup 2 --window 32 --verify --timeout-ms 60000"

run setup          bcl-vfio setup --hugepages 32 --modules-dir /lib/modules
run list-kernel    bcl-vfio list
run refuse-in-use  sh -c 'i=$(ls /sys/bus/pci/devices/$NIC_A/virtio*/net); ip link set $i up; out=$(bcl-vfio bind $NIC_A 2>&1); rc=$?; ip link set $i down; echo "$out"; [ $rc != 0 ] && echo "$out" | grep -q "in use"'
run bind           bcl-vfio bind "$NIC_A" "$NIC_B" "$NIC_E"
run list-vfio      sh -c 'bcl-vfio list && test "$(bcl-vfio list --json | grep -c "\"usable\": true")" = 3'
run check-a        bcl-vfio check --require-reset "$NIC_A"
run check-b        bcl-vfio check --require-reset "$NIC_B"
run dma-4k-fallback sh -c 'h=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages; n=$(cat $h); echo 0 > $h; out=$(bcl-vfio check $NIC_B); rc=$?; echo $n > $h; echo "$out"; [ $rc = 0 ] && echo "$out" | grep -q "(4 KiB pages"'
run exchange       bcl-vfio exchange "$NIC_A" "$NIC_B" --frames 1000
run exchange-poll  bcl-vfio exchange "$NIC_A" "$NIC_B" --frames 500 --no-interrupts --queue-size 8
run pingpong       serve_connect bcl-pingpong "--method vfio --pci $NIC_A" "--method vfio --pci $NIC_B $PP"
run pingpong-poll  serve_connect bcl-pingpong "--method vfio --ifname $NIC_A --busy-poll" "--method vfio --pci $NIC_B --busy-poll --sizes 64 --iters 100 --warmup 10 --timeout-ms 60000"
run bw-verify      serve_connect bcl-bw "--method vfio --pci $NIC_A --verify" "--method vfio --pci $NIC_B $BW"
run cluster-vfio   cluster_vfio
run bcld-vfio      bcld_vfio
run mixed-pingpong mixed bcl-pingpong --method vfio --pci "$NIC_E" --connect "$HOST_PP_DESC" $PP
run mixed-bw       mixed bcl-bw --method vfio --pci "$NIC_E" --ethertype "$HOST_BW_ETHERTYPE" --connect "$HOST_BW_DESC" $BW
run mixed-bw-rev   mixed host_connects bcl-bw --method vfio --pci "$NIC_E" --ethertype "$HOST_REV_ETHERTYPE" --verify --wait-client-s 120 --timeout-ms 60000
run group-viable   sh -c 'bcl-vfio bind $NIC_C; out=$(bcl-vfio check $NIC_C); rc=$?; bcl-vfio unbind $NIC_C; echo "$out"; [ $rc != 0 ] && echo "$out" | grep -q "device $NIC_D in the same group is bound to virtio-pci"'
run unbind-busy    sh -c 'g=$(basename $(readlink /sys/bus/pci/devices/$NIC_A/iommu_group)); exec 3<>/dev/vfio/$g; out=$(bcl-vfio unbind $NIC_A 2>&1); rc=$?; exec 3>&-; echo "$out"; [ $rc != 0 ] && echo "$out" | grep -q "in use"'
run unbind         bcl-vfio unbind "$NIC_A" "$NIC_B" "$NIC_E"
run list-restored  sh -c 'bcl-vfio list --json | grep -c "\"driver\": \"virtio-pci\"" | grep -qx 5'
