#!/usr/bin/env bash
# tests/vm/run.sh — boot a QEMU guest with an emulated Intel IOMMU and two
# virtio-net NICs on one QEMU hub (plus two that share an IOMMU group, for
# the group-viability test, and a fifth on a tap into a host network
# namespace), bind them to vfio-pci and run tests/vm/guest-tests.sh inside
# it (bcl-vfio list/bind/check/exchange/unbind, bcl-pingpong and bcl-bw
# --method vfio between the two NICs, a two-rank bcl-run job whose cluster
# layer opens vfio on each rank's NIC, two node daemons on vfio serving two
# pairs of clients at once, and the tools against BCL on
# AF_PACKET, or AF_XDP with BCL_VM_HOST_METHOD=afxdp, on the host side of
# the tap).
#
# Exit status: 0 when the guest reports "BCL-VM-RESULT: PASS" and that it
# ran and passed every test of the list ("guest-tests: ran N passed N", N
# the number of lines of the list that start with `run `); 1 when a test
# failed, fewer or more tests ran than the list has, the guest crashed or
# timed out; 2 when the harness could not run (cannot install packages, no
# kernel, build failed).
#
# What it does (everything cached, so reruns take seconds plus the boot):
#   1. installs qemu-system-x86 and busybox-static with apt-get if missing
#      (needs root then);
#   2. downloads the Debian kernel that linux-image-amd64 currently depends
#      on (apt-get download), extracts vmlinuz and the vfio/virtio modules
#      into $BCL_VM_CACHE (default /var/cache/bcl-vm);
#   3. builds statically linked guest binaries (glibc static-pie) into
#      $BCL_VM_TARGET_DIR (default <repo>/target/vm-guest);
#   4. mixed test (unless BCL_VM_MIXED=0): creates a network namespace with
#      a tap interface for the fifth guest NIC and starts, in it, the very
#      same static bcl-pingpong and bcl-bw binaries as servers on the
#      `packet` method (AF_PACKET on the tap, or `afxdp` with
#      BCL_VM_HOST_METHOD=afxdp; bcl-bw on EtherType 0x88b6 so that the two
#      servers see only their own frames); their `listening:`
#      descriptors go to the guest, whose clients use `--method vfio`; in
#      the other direction, when the guest prints
#      "BCL-VM-HOST-CONNECT: DESCRIPTOR" (a bcl-bw server on vfio), a host
#      bcl-bw client on packet connects to it (EtherType 0x88b7);
#   5. builds a busybox initramfs with the modules, the binaries, init and
#      guest-tests.sh;
#   6. boots QEMU (KVM when it works, else TCG; see BCL_VM_ACCEL) inside that
#      namespace, checks the guest's PASS/FAIL markers and the host
#      servers' exit status (bcl-bw --verify: nothing lost, duplicated,
#      reordered or corrupted).
#
# Environment:
#   BCL_VM_ACCEL=auto|kvm|tcg   auto (default): KVM if the CPU has VMX/SVM and
#                               /dev/kvm is usable and the guest reaches init
#                               within BCL_VM_KVM_PROBE seconds, else TCG
#   BCL_VM_TIMEOUT=600          seconds for boot + tests
#   BCL_VM_KVM_PROBE=30         seconds KVM gets to reach init before the
#                               fallback to TCG
#   BCL_VM_EXTRA_BINS="a b"     more workspace binaries to build and put in
#                               the guest's /bin (bcl-vfio, bcl-pingpong,
#                               bcl-bw, bcl-run, bcl-alltoall and bcld
#                               always are)
#   BCL_VM_MIXED=0              leave out the guest <-> host (tap) test; the
#                               fifth NIC is then on a QEMU hub of its own
#   BCL_VM_HOST_METHOD=packet   method of the host side of the mixed test:
#                               packet (AF_PACKET) or afxdp (AF_XDP)
#   BCL_VM_TESTS=FILE           test list to run instead of guest-tests.sh
#   BCL_VM_CACHE=DIR            download/kernel cache
#   BCL_VM_TARGET_DIR=DIR       cargo target dir for the static build
#   BCL_VM_KERNEL_REFRESH=1     look up the current kernel package again
#   BCL_VM_KERNEL_SUITE=SUITE   take the kernel from this Debian suite instead
#                               (e.g. trixie-backports, for a kernel whose
#                               virtio-net has AF_XDP zero-copy), through a
#                               private apt configuration under the cache
#                               (the host's own apt sources stay as they are)
#   BCL_VM_KEEP=1               keep the work directory (console log, initrd)
#   BCL_VM_QEMU_EXTRA="..."     extra QEMU arguments (e.g. -d trace:virtqueue_pop)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VM=$ROOT/tests/vm
CACHE=${BCL_VM_CACHE:-/var/cache/bcl-vm}
TARGET=${BCL_VM_TARGET_DIR:-$ROOT/target/vm-guest}
ACCEL=${BCL_VM_ACCEL:-auto}
TIMEOUT=${BCL_VM_TIMEOUT:-600}
KVM_PROBE=${BCL_VM_KVM_PROBE:-30}
GUEST_BINS="bcl-vfio bcl-pingpong bcl-bw bcl-run bcl-alltoall bcld ${BCL_VM_EXTRA_BINS:-}"
MIXED=${BCL_VM_MIXED:-1}
HOST_METHOD=${BCL_VM_HOST_METHOD:-packet}
TESTS=${BCL_VM_TESTS:-$VM/guest-tests.sh}
[ -f "$TESTS" ] || { printf 'run.sh: ERROR: no test list %s\n' "$TESTS" >&2; exit 2; }
# Every line of the list that starts with `run ` is one test the guest must
# run and pass (guest-tests.sh says so to whoever adds one).
EXPECTED_TESTS=$(grep -c '^run ' "$TESTS" || true)
RUST_TARGET=x86_64-unknown-linux-gnu

# The two NICs, each behind its own PCIe root port (so they are PCI Express
# functions with FLR, which VFIO's reset needs), on the same QEMU hub.
NIC_A=0000:01:00.0
NIC_B=0000:02:00.0
MAC_A=52:54:00:bc:10:0a
MAC_B=52:54:00:bc:10:0b
# Two more NICs behind one PCIe-to-PCI bridge: they share an IOMMU group,
# for the group-viability test.
NIC_C=0000:03:01.0
NIC_D=0000:03:02.0
# The fifth NIC, behind a third root port, on a tap into the network
# namespace $NS, where BCL runs on AF_PACKET over the tap ($HOST_MAC).
NIC_E=0000:04:00.0
MAC_E=52:54:00:bc:10:0e
NS=bcl-vm-$$
TAP=bcltap0
HOST_MAC=02:bc:0f:00:00:01
HOST_BW_ETHERTYPE=0x88b6
# The other direction: a guest bcl-bw server on vfio prints
# "BCL-VM-HOST-CONNECT: DESCRIPTOR" and run.sh starts a host bcl-bw client
# on packet towards it (EtherType 0x88b7).
HOST_REV_ETHERTYPE=0x88b7
HOST_REV_ARGS="--sizes 64,1400,16K --iters 8 --warmup 2 --window 32 --verify --timeout-ms 60000"
HOST_CL_PID=""

VFIO_MODULES="irqbypass vfio vfio_iommu_type1 vfio_virqfd vfio-pci-core vfio-pci"
# Those the kernel must have, as modules or built in (vfio_virqfd is part
# of vfio itself from Linux 6.2 on; irqbypass may be built in).
VFIO_REQUIRED="vfio vfio_iommu_type1 vfio-pci-core vfio-pci"
# Kernel virtio-net driver, so that bind/unbind move the NICs between a
# real kernel driver and vfio-pci. Modules that are built in are skipped.
NIC_MODULES="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover net_failover virtio_net"

T_START=$(date +%s.%N)
log() { printf 'run.sh: %s\n' "$*" >&2; }
die() { printf 'run.sh: ERROR: %s\n' "$*" >&2; exit 2; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bcl-vm.XXXXXX")
QPID=""
HOST_PIDS=""
NS_MADE=0
cleanup() {
  [ -n "$QPID" ] && kill "$QPID" 2>/dev/null || true
  for p in $HOST_PIDS; do kill "$p" 2>/dev/null || true; done
  if [ "$NS_MADE" = 1 ]; then
    ip netns exec "$NS" ip link del "$TAP" 2>/dev/null || true
    ip netns del "$NS" 2>/dev/null || true
  fi
  if [ "${BCL_VM_KEEP:-0}" = 1 ]; then log "work directory kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

is_root() { [ "$(id -u)" = 0 ]; }
APT_UPDATED=0
apt_update() {
  [ "$APT_UPDATED" = 1 ] && return 0
  is_root || die "need root to run apt-get (missing: $*)"
  log "apt-get update"
  apt-get update -q >&2 || die "apt-get update failed"
  APT_UPDATED=1
}

# ---------------------------------------------------------------- 1. packages
t=$(date +%s.%N)
need=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
if ! dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'install ok installed'; then
  need+=(busybox-static)
fi
if [ ${#need[@]} -gt 0 ]; then
  apt_update "${need[*]}"
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >&2 \
    || die "apt-get install ${need[*]} failed"
fi
QEMU=$(command -v qemu-system-x86_64) || die "qemu-system-x86_64 not found"
BUSYBOX=/bin/busybox
[ -x "$BUSYBOX" ] || die "$BUSYBOX (busybox-static) not found"
log "packages ready ($(since "$t") s): $("$QEMU" --version | head -1)"

# ------------------------------------------------------------------ 2. kernel
t=$(date +%s.%N)
mkdir -p "$CACHE" || die "cannot create $CACHE (run as root or set BCL_VM_CACHE)"
KDIR=""
KERNEL_SUITE=${BCL_VM_KERNEL_SUITE:-}
# The kernel of the host's apt sources is cached as kernel-PACKAGE, one of
# another suite as kernel-SUITE-PACKAGE (so neither run picks the other's).
APT_OPTS=()
KPREFIX=kernel-
if [ -n "$KERNEL_SUITE" ]; then
  case "$KERNEL_SUITE" in
    *[!a-z0-9-]*) die "BCL_VM_KERNEL_SUITE must be a Debian suite name, not '$KERNEL_SUITE'" ;;
  esac
  KPREFIX=kernel-$KERNEL_SUITE-
  APTDIR=$CACHE/apt-$KERNEL_SUITE
  APT_OPTS=(-o "Dir::Etc::SourceList=$APTDIR/sources.list" -o "Dir::Etc::SourceParts=$APTDIR/parts"
    -o "Dir::State::Lists=$APTDIR/lists" -o "Dir::Cache=$APTDIR/cache")
fi
if [ "${BCL_VM_KERNEL_REFRESH:-0}" != 1 ]; then
  KDIR=$(ls -d "$CACHE"/"$KPREFIX"linux-image-* 2>/dev/null | sort -V | tail -1 || true)
  [ -n "$KDIR" ] && [ -f "$KDIR/complete" ] || KDIR=""
fi
if [ -z "$KDIR" ]; then
  if [ -n "$KERNEL_SUITE" ]; then
    is_root || die "need root to run apt-get (kernel from $KERNEL_SUITE)"
    mkdir -p "$APTDIR/parts" "$APTDIR/lists/partial" "$APTDIR/cache/archives/partial"
    echo "deb http://deb.debian.org/debian $KERNEL_SUITE main" > "$APTDIR/sources.list"
    log "apt-get update ($KERNEL_SUITE only, lists in $APTDIR)"
    apt-get "${APT_OPTS[@]}" update -q >&2 || die "apt-get update of $KERNEL_SUITE failed"
  else
    apt_update "kernel package"
  fi
  KPKG=$(apt-cache "${APT_OPTS[@]}" depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
  [ -n "$KPKG" ] || die "cannot find the kernel package linux-image-amd64 depends on${KERNEL_SUITE:+ in $KERNEL_SUITE}"
  KDIR=$CACHE/$KPREFIX$KPKG
  if [ ! -f "$KDIR/complete" ]; then
    log "downloading $KPKG${KERNEL_SUITE:+ from $KERNEL_SUITE}"
    rm -rf "$KDIR" "$CACHE/dl"
    mkdir -p "$CACHE/dl" "$KDIR/modules"
    chmod 777 "$CACHE/dl" 2>/dev/null || true   # apt's _apt sandbox user writes here
    # Newer Debian kernels split the image package: the kernel is in
    # linux-binary-VERSION and the modules in linux-modules-VERSION, which
    # it depends on.
    kparts=$(apt-cache "${APT_OPTS[@]}" depends "$KPKG" 2>/dev/null \
      | awk '/Depends: linux-(binary|modules)-[0-9]/ { print $2 }' | sort -u)
    # shellcheck disable=SC2086
    (cd "$CACHE/dl" && apt-get "${APT_OPTS[@]}" download -q "$KPKG" $kparts >&2) \
      || die "apt-get download $KPKG $kparts failed"
    for deb in "$CACHE"/dl/*.deb; do
      dpkg -x "$deb" "$WORK/kroot" || die "dpkg -x $deb failed"
    done
    # Merged /usr: the modules may be under usr/lib, and the kernel image
    # beside them instead of in /boot.
    kmods=$(ls -d "$WORK"/kroot/lib/modules/* "$WORK"/kroot/usr/lib/modules/* 2>/dev/null | head -1 || true)
    [ -n "$kmods" ] || die "no modules in $KPKG $kparts"
    kimage=$(ls "$WORK"/kroot/boot/vmlinuz-* "$kmods/vmlinuz" 2>/dev/null | head -1 || true)
    [ -n "$kimage" ] || die "no kernel image in $KPKG $kparts"
    cp "$kimage" "$KDIR/vmlinuz"
    cp "$kmods/modules.builtin" "$KDIR/" 2>/dev/null || : > "$KDIR/modules.builtin"
    basename "$kmods" > "$KDIR/release"
    for m in $VFIO_MODULES $NIC_MODULES; do
      f=$(find "$kmods" -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" | head -1)
      case "$f" in
        "") ;;
        *.xz) xz -dc "$f" > "$KDIR/modules/$m.ko" ;;
        *.zst) zstd -qdc "$f" > "$KDIR/modules/$m.ko" ;;
        *) cp "$f" "$KDIR/modules/$m.ko" ;;
      esac
    done
    rm -rf "$WORK/kroot" "$CACHE/dl"
    touch "$KDIR/complete"
  fi
fi
for m in $VFIO_REQUIRED; do
  [ -f "$KDIR/modules/$m.ko" ] || grep -q "/${m//-/[-_]}.ko" "$KDIR/modules.builtin" \
    || die "module $m neither in $KDIR/modules nor built in"
done
log "kernel $(cat "$KDIR/release") ready ($(since "$t") s)"

# ------------------------------------------------------------------- 3. build
t=$(date +%s.%N)
bin_args=()
for b in $GUEST_BINS; do bin_args+=(--bin "$b"); done
log "building static guest binaries: $GUEST_BINS"
(
  cd "$ROOT"
  unset CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_RUSTFLAGS
  RUSTFLAGS="-C target-feature=+crt-static" CARGO_TARGET_DIR=$TARGET \
    cargo build --release --target "$RUST_TARGET" --workspace "${bin_args[@]}" >&2
) || die "cargo build of the guest binaries failed"
# Debug information stripped (the initramfs shrinks from ~22 to ~6 MB);
# the host side of the mixed test runs these very files too.
GBIN=$WORK/bin
mkdir -p "$GBIN"
for b in $GUEST_BINS; do
  f=$TARGET/$RUST_TARGET/release/$b
  [ -f "$f" ] || die "binary $b was not built"
  if command -v strip >/dev/null 2>&1; then strip -o "$GBIN/$b" "$f"; else cp "$f" "$GBIN/$b"; fi
done
log "binaries built ($(since "$t") s)"

# ------------------------------------------------------ 4. host side (mixed)
# A tap in a network namespace of its own (so that nothing else on this
# machine sees or sends frames on it), and BCL servers on AF_PACKET on it:
# the same static binaries the guest runs. They start before the guest
# boots (a tap without its QEMU end is up but has no carrier, which
# AF_PACKET does not mind), so their descriptors can go into the initramfs.
HOST_PP_DESC=""
HOST_BW_DESC=""
HOST_PP_PID=""
HOST_BW_PID=""
host_server() { # host_server NAME ARGS... -> sets SERVER_PID and SERVER_DESC
  local name=$1 out=$WORK/host-$1.out i
  shift
  # Created here, not by the background job's redirection: the loop below
  # may read it before the job has run far enough to create it.
  : > "$out"
  ip netns exec "$NS" "$@" > "$out" 2>&1 &
  SERVER_PID=$!
  HOST_PIDS="$HOST_PIDS $SERVER_PID"
  SERVER_DESC=""
  for i in $(seq 1 100); do
    SERVER_DESC=$(sed -n 's/^listening: //p' "$out" | head -1)
    [ -n "$SERVER_DESC" ] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  sed 's/^/run.sh:   | /' "$out" >&2
  die "host-side $name server did not start (see above)"
}
if [ "$MIXED" = 1 ]; then
  t=$(date +%s.%N)
  is_root || die "the mixed test (guest VFIO NIC <-> host AF_PACKET over a tap) needs root; BCL_VM_MIXED=0 leaves it out"
  [ -c /dev/net/tun ] || die "/dev/net/tun is missing: no tap for the mixed test (BCL_VM_MIXED=0 leaves it out)"
  command -v ip >/dev/null 2>&1 || die "ip (iproute2) is needed for the mixed test"
  ip netns add "$NS" || die "cannot create network namespace $NS"
  NS_MADE=1
  ip netns exec "$NS" sysctl -qw net.ipv6.conf.default.disable_ipv6=1 net.ipv6.conf.all.disable_ipv6=1 >/dev/null 2>&1 || true
  ip netns exec "$NS" ip tuntap add dev "$TAP" mode tap || die "cannot create tap $TAP in $NS"
  ip netns exec "$NS" ip link set "$TAP" address "$HOST_MAC" || die "cannot set the MAC of $TAP"
  ip netns exec "$NS" ip link set "$TAP" up || die "cannot bring $TAP up"
  BIN=$GBIN
  wait_s=$((TIMEOUT + 30))
  host_server pingpong "$BIN/bcl-pingpong" --method "$HOST_METHOD" --ifname "$TAP" --serve \
    --wait-client-s "$wait_s" --timeout-ms 60000
  HOST_PP_PID=$SERVER_PID HOST_PP_DESC=$SERVER_DESC
  HOST_BW_CMD=("$BIN/bcl-bw" --method "$HOST_METHOD" --ifname "$TAP" --ethertype "$HOST_BW_ETHERTYPE"
    --serve --verify --wait-client-s "$wait_s" --timeout-ms 60000)
  if [ "$HOST_METHOD" = afxdp ]; then
    # One XDP program per interface: the bw server starts once the pingpong
    # server is gone (in the boot loop). Its descriptor is the same (same
    # interface); the guest's client retries first contact until it runs.
    HOST_BW_DESC=$HOST_PP_DESC
  else
    host_server bw "${HOST_BW_CMD[@]}"
    HOST_BW_PID=$SERVER_PID HOST_BW_DESC=$SERVER_DESC
  fi
  log "host side ready ($(since "$t") s): namespace $NS, $TAP $HOST_MAC; servers $HOST_PP_DESC, $HOST_BW_DESC"
fi

# --------------------------------------------------------------- 5. initramfs
t=$(date +%s.%N)
IR=$WORK/ir
mkdir -p "$IR"/bin "$IR"/lib/modules "$IR"/proc "$IR"/sys "$IR"/dev "$IR"/run "$IR"/tmp
cp "$BUSYBOX" "$IR/bin/busybox"
cp "$KDIR"/modules/*.ko "$IR/lib/modules/" 2>/dev/null || true
for b in $GUEST_BINS; do cp "$GBIN/$b" "$IR/bin/$b"; done
cp "$VM/init" "$IR/init"
chmod +x "$IR/init"
cp "$TESTS" "$IR/guest-tests.sh"
present_nic_modules=""
for m in $NIC_MODULES; do [ -f "$KDIR/modules/$m.ko" ] && present_nic_modules="$present_nic_modules $m"; done
cat > "$IR/guest-env.sh" <<EOF
NIC_A=$NIC_A
NIC_B=$NIC_B
MAC_A=$MAC_A
MAC_B=$MAC_B
NIC_C=$NIC_C
NIC_D=$NIC_D
NIC_E=$NIC_E
MAC_E=$MAC_E
MIXED=$MIXED
HOST_PP_DESC=$HOST_PP_DESC
HOST_BW_DESC=$HOST_BW_DESC
HOST_BW_ETHERTYPE=$HOST_BW_ETHERTYPE
HOST_REV_ETHERTYPE=$HOST_REV_ETHERTYPE
KERNEL_NIC_MODULES="$present_nic_modules"
export NIC_A NIC_B MAC_A MAC_B NIC_C NIC_D NIC_E MAC_E MIXED HOST_PP_DESC HOST_BW_DESC HOST_BW_ETHERTYPE HOST_REV_ETHERTYPE
EOF
(cd "$IR" && find . | "$BUSYBOX" cpio -o -H newc 2>/dev/null | gzip -1) > "$WORK/initrd.gz"
log "initramfs $(du -h "$WORK/initrd.gz" | cut -f1) ready ($(since "$t") s)"

# -------------------------------------------------------------------- 6. boot
kvm_plausible() {
  [ -r /dev/kvm ] && [ -w /dev/kvm ] || return 1
  grep -qwE 'vmx|svm' /proc/cpuinfo || return 1
  # A PVM host (software nested virtualisation) only runs PVM guest kernels.
  [ ! -d /sys/module/kvm_pvm ] || return 1
}

LOG=""
boot() { # boot ACCEL -> 0 finished, 3 KVM did not reach init, 124 timeout
  local accel=$1 args
  if [ "$accel" = kvm ]; then
    args=(-accel kvm -cpu host -machine q35,kernel-irqchip=split)
  else
    args=(-accel tcg -cpu max -machine q35)
  fi
  LOG=$WORK/console-$accel.log
  : > "$LOG"
  log "booting ($accel); guest console follows"
  local nic_e netns=()
  if [ "$MIXED" = 1 ]; then
    nic_e=(-netdev "tap,id=t0,ifname=$TAP,script=no,downscript=no")
    netns=(ip netns exec "$NS")
  else
    nic_e=(-netdev hubport,id=t0,hubid=2)
  fi
  "${netns[@]}" "$QEMU" "${args[@]}" -m 512 -smp 1 \
    -nodefaults -no-user-config -display none -monitor none -serial stdio -no-reboot \
    -device intel-iommu,intremap=on,caching-mode=on \
    -device pcie-root-port,id=rp1,bus=pcie.0,chassis=1,addr=0x3 \
    -device pcie-root-port,id=rp2,bus=pcie.0,chassis=2,addr=0x4 \
    -netdev hubport,id=hp0,hubid=0 \
    -device virtio-net-pci,bus=rp1,netdev=hp0,disable-legacy=on,iommu_platform=on,romfile=,mac=$MAC_A \
    -netdev hubport,id=hp1,hubid=0 \
    -device virtio-net-pci,bus=rp2,netdev=hp1,disable-legacy=on,iommu_platform=on,romfile=,mac=$MAC_B \
    -device pcie-pci-bridge,id=br1,bus=pcie.0,addr=0x5 \
    -netdev hubport,id=hp2,hubid=1 \
    -device virtio-net-pci,bus=br1,addr=0x1,netdev=hp2,disable-legacy=on,iommu_platform=on,romfile= \
    -netdev hubport,id=hp3,hubid=1 \
    -device virtio-net-pci,bus=br1,addr=0x2,netdev=hp3,disable-legacy=on,iommu_platform=on,romfile= \
    -device pcie-root-port,id=rp3,bus=pcie.0,chassis=3,addr=0x6 \
    "${nic_e[@]}" \
    -device virtio-net-pci,bus=rp3,netdev=t0,disable-legacy=on,iommu_platform=on,romfile=,mac=$MAC_E \
    -kernel "$KDIR/vmlinuz" -initrd "$WORK/initrd.gz" \
    -append "console=ttyS0 intel_iommu=on iommu=pt quiet loglevel=3 panic=-1" \
    ${BCL_VM_QEMU_EXTRA:-} < /dev/null > "$LOG" 2>&1 &
  QPID=$!
  tail -n +1 -f --pid="$QPID" "$LOG" | sed -u 's/^/  | /' >&2 &
  local tpid=$! t0 now
  t0=$(date +%s)
  while kill -0 "$QPID" 2>/dev/null; do
    now=$(date +%s)
    if [ "$MIXED" = 1 ] && [ -z "$HOST_BW_PID" ] && ! kill -0 "$HOST_PP_PID" 2>/dev/null; then
      ip netns exec "$NS" "${HOST_BW_CMD[@]}" > "$WORK/host-bw.out" 2>&1 &
      HOST_BW_PID=$!
      HOST_PIDS="$HOST_PIDS $HOST_BW_PID"
    fi
    if [ "$MIXED" = 1 ] && [ -z "$HOST_CL_PID" ] && ! kill -0 "$HOST_BW_PID" 2>/dev/null; then
      local d
      d=$(grep -a -m1 '^BCL-VM-HOST-CONNECT: ' "$LOG" | tr -d '\r' | cut -d' ' -f2 || true)
      if [ -n "$d" ]; then
        # shellcheck disable=SC2086
        ip netns exec "$NS" "$GBIN/bcl-bw" --method "$HOST_METHOD" --ifname "$TAP" \
          --ethertype "$HOST_REV_ETHERTYPE" --connect "$d" $HOST_REV_ARGS \
          > "$WORK/host-bw-client.out" 2>&1 &
        HOST_CL_PID=$!
        HOST_PIDS="$HOST_PIDS $HOST_CL_PID"
      fi
    fi
    if [ "$accel" = kvm ] && [ $((now - t0)) -ge "$KVM_PROBE" ] && ! grep -qa 'BCL-VM: init reached' "$LOG"; then
      log "KVM guest did not reach init within ${KVM_PROBE}s; falling back to TCG"
      kill "$QPID" 2>/dev/null; wait "$QPID" 2>/dev/null || true; QPID=""
      wait "$tpid" 2>/dev/null || true
      return 3
    fi
    if [ $((now - t0)) -ge "$TIMEOUT" ]; then
      log "TIMEOUT: no result after ${TIMEOUT}s"
      kill "$QPID" 2>/dev/null; wait "$QPID" 2>/dev/null || true; QPID=""
      wait "$tpid" 2>/dev/null || true
      return 124
    fi
    sleep 0.3
  done
  wait "$QPID" 2>/dev/null || true
  QPID=""
  wait "$tpid" 2>/dev/null || true
  return 0
}

t=$(date +%s.%N)
rc=0
case "$ACCEL" in
  kvm) boot kvm || rc=$? ;;
  tcg) boot tcg || rc=$? ;;
  auto)
    if kvm_plausible; then
      boot kvm || rc=$?
      if [ "$rc" = 3 ] || ! grep -qa 'BCL-VM: init reached' "$LOG"; then rc=0; boot tcg || rc=$?; fi
    else
      log "KVM not usable here (no VMX/SVM, no /dev/kvm access, or a PVM host); using TCG"
      boot tcg || rc=$?
    fi ;;
  *) die "BCL_VM_ACCEL must be auto, kvm or tcg" ;;
esac
BOOT_S=$(since "$t")

result=$(grep -a 'BCL-VM-RESULT:' "$LOG" | tail -1 | tr -d '\r' || true)
log "boot + guest tests took ${BOOT_S} s; whole run $(since "$T_START") s"
grep -a 'BCL-VM-TEST \(PASS\|FAIL\)' "$LOG" | tr -d '\r' | sed 's/^/run.sh:   /' >&2 || true

# The host side of the mixed test: each server exits once its client is
# done (bcl-bw's status says whether --verify found anything wrong).
HOST_OK=1
host_result() { # host_result NAME PID GUEST-TEST
  local name=$1 pid=$2 test=$3 i st=0
  if ! grep -qa "BCL-VM-TEST START $test:" "$LOG"; then
    # A test list without this guest test (BCL_VM_TESTS): nothing to judge.
    [ -n "$pid" ] && { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; }
    log "host $name: not used (the guest ran no $test test)"
    return 0
  fi
  if [ -z "$pid" ]; then log "host $name: FAIL (never started)"; HOST_OK=0; return 0; fi
  for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    log "host $name: FAIL (still waiting for its guest peer; stopped)"
    HOST_OK=0
  else
    wait "$pid" || st=$?
    if [ "$st" = 0 ]; then log "host $name: PASS"; else log "host $name: FAIL (exit $st)"; HOST_OK=0; fi
  fi
  if [ -f "$WORK/host-$name.out" ]; then sed "s/^/run.sh:   host $name | /" "$WORK/host-$name.out" >&2; fi
}
if [ "$MIXED" = 1 ]; then
  host_result pingpong "$HOST_PP_PID" mixed-pingpong
  host_result bw "$HOST_BW_PID" mixed-bw
  host_result bw-client "$HOST_CL_PID" mixed-bw-rev
  HOST_PIDS=""
fi
if [ "$rc" = 124 ]; then
  log "FAIL: timeout"
  exit 1
fi
if [ "$HOST_OK" = 0 ]; then
  log "FAIL: a host-side server of the mixed test failed (guest: ${result:-no result})"
  exit 1
fi
case "$result" in
  *"RESULT: PASS"*) ;;
  *"RESULT: FAIL"*) log "FAIL: $result"; exit 1 ;;
  *) log "FAIL: the guest printed no result (kernel panic or crash?); last console lines:"
     tail -n 20 "$LOG" | sed 's/^/run.sh:   /' >&2
     exit 1 ;;
esac
# How many tests the guest ran and passed, against the list's count: a list
# cut short, a test that never ran or ran twice fails the run even when
# every test that did run passed.
counts=$(grep -a '^guest-tests: ran ' "$LOG" | tail -1 | tr -d '\r' || true)
if [ -z "$counts" ]; then
  log "FAIL: the guest did not say how many tests it ran (expected $EXPECTED_TESTS); result: ${result:-none}"
  exit 1
fi
if [ "$counts" != "guest-tests: ran $EXPECTED_TESTS passed $EXPECTED_TESTS" ]; then
  log "FAIL: the guest reported '$counts', but $(basename "$TESTS") has $EXPECTED_TESTS tests that must all run and pass"
  exit 1
fi
log "PASS: $result; all $EXPECTED_TESTS tests of $(basename "$TESTS") ran and passed"
exit 0

