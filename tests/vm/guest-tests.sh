# Tests run inside the VFIO test guest, in order, by tests/vm/init.
#
# One test per line:   run NAME COMMAND [ARGS...]
# A test passes when COMMAND exits 0. Available in the guest:
#   $NIC_A, $NIC_B   PCI addresses of the two virtio-net NICs (one QEMU hub);
#                    at boot they belong to the kernel's virtio-pci driver
#   $MAC_A, $MAC_B   their MAC addresses
#   $NIC_C, $NIC_D   two more virtio-net NICs in ONE IOMMU group (behind a
#                    PCIe-to-PCI bridge), for the group-viability test
#   busybox applets, and every binary built by run.sh (bcl-vfio, plus
#   those named in BCL_VM_EXTRA_BINS, e.g. bcl-pingpong, bcl-bw)
# To add a test, add a line here (and, for a new binary, name it in
# BCL_VM_EXTRA_BINS, e.g. in the environment of run.sh or in vm.rs).

run setup          bcl-vfio setup --hugepages 32 --modules-dir /lib/modules
run list-kernel    bcl-vfio list
run refuse-in-use  sh -c 'i=$(ls /sys/bus/pci/devices/$NIC_A/virtio*/net); ip link set $i up; out=$(bcl-vfio bind $NIC_A 2>&1); rc=$?; ip link set $i down; echo "$out"; [ $rc != 0 ] && echo "$out" | grep -q "in use"'
run bind           bcl-vfio bind "$NIC_A" "$NIC_B"
run list-vfio      sh -c 'bcl-vfio list && test "$(bcl-vfio list --json | grep -c "\"usable\": true")" = 2'
run check-a        bcl-vfio check --require-reset "$NIC_A"
run check-b        bcl-vfio check --require-reset "$NIC_B"
run dma-4k-fallback sh -c 'h=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages; n=$(cat $h); echo 0 > $h; out=$(bcl-vfio check $NIC_B); rc=$?; echo $n > $h; echo "$out"; [ $rc = 0 ] && echo "$out" | grep -q "(4 KiB pages"'
run exchange       bcl-vfio exchange "$NIC_A" "$NIC_B" --frames 1000
run exchange-poll  bcl-vfio exchange "$NIC_A" "$NIC_B" --frames 500 --no-interrupts --queue-size 8
run group-viable   sh -c 'bcl-vfio bind $NIC_C; out=$(bcl-vfio check $NIC_C); rc=$?; bcl-vfio unbind $NIC_C; echo "$out"; [ $rc != 0 ] && echo "$out" | grep -q "device $NIC_D in the same group is bound to virtio-pci"'
run unbind-busy    sh -c 'g=$(basename $(readlink /sys/bus/pci/devices/$NIC_A/iommu_group)); exec 3<>/dev/vfio/$g; out=$(bcl-vfio unbind $NIC_A 2>&1); rc=$?; exec 3>&-; echo "$out"; [ $rc != 0 ] && echo "$out" | grep -q "in use"'
run unbind         bcl-vfio unbind "$NIC_A" "$NIC_B"
run list-restored  sh -c 'bcl-vfio list --json | grep -c "\"driver\": \"virtio-pci\"" | grep -qx 4'
