#!/usr/bin/env bash
# Builds the guest of `roamkv bench powercut`: the shared base (crates/testbed/vm/guest-base.sh:
# Debian's stock kernel and a busybox initramfs) plus the modules for virtio disks and ext4, and
# the roamkv binary with the shared libraries it links (RocksDB is static; LevelDB, libstdc++,
# libgcc and libc are not).
# Usage: powercut-guest.sh CACHE_DIR ROAMKV_BINARY     (root; ROAMKV_GUEST_BASE names the base script)
set -euo pipefail
cache=${1:?cache dir}
roamkv=${2:?roamkv binary}
source "${ROAMKV_GUEST_BASE:?the path of crates/testbed/vm/guest-base.sh}"

guest_unpack "$cache" powercut-guest
mkdir -p "$root/data"
guest_modules fs/ext4 fs/jbd2 fs/mbcache.ko lib crypto arch/x86/crypto drivers/virtio \
  drivers/block/virtio_blk.ko
guest_copy_with_libs "$roamkv" sbin/roamkv

cat > "$root/init" <<'INIT'
#!/bin/sh
# Guest init of `roamkv bench powercut`. Every line the host acts on starts with "POWERCUT".
# Kernel command line: roamkv.mode=load|verify roamkv.from=N roamkv.rate=RECORDS_PER_S
# 1. mount the data disk (the guest kernel replays the ext4 journal after the last power cut),
# 2. `roamkv check` on what the power cut left, 3. the survey: open (cuts a torn tail) and list
# every record of the stream that is there, 4. mode=load: stream records into `roamkv load --ack`
# (its "acked N" lines go to the console) until the host kills qemu; mode=verify: unmount and power off.
export PATH=/sbin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in virtio_pci virtio_blk crc32c_generic ext4; do
  modprobe $m 2>/dev/null || echo "POWERCUT note modprobe $m failed"
done
i=0; while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
MODE=verify; FROM=0; RATE=2000
for word in $(cat /proc/cmdline); do
  case $word in
    roamkv.mode=*) MODE=${word#roamkv.mode=} ;;
    roamkv.from=*) FROM=${word#roamkv.from=} ;;
    roamkv.rate=*) RATE=${word#roamkv.rate=} ;;
  esac
done
if ! mount -t ext4 /dev/vda /data; then
  echo "POWERCUT fatal mounting the data disk failed"; poweroff -f
fi
echo "POWERCUT mounted"
if [ -d /data/db ]; then
  /sbin/roamkv check --data /data/db 2>&1 | sed 's/^/POWERCUT check /'
else
  echo "POWERCUT check ok"   # cut before the loader made its directory: nothing to check
fi
# (A missing directory surveys as empty: nothing can have been acknowledged.)
/sbin/roamkv bench powercut-guest survey --data /data/db 2>&1 | sed 's/^/POWERCUT survey /'
if [ "$MODE" = load ]; then
  echo "POWERCUT load-start"
  /sbin/roamkv bench powercut-guest feed --from "$FROM" --records-per-second "$RATE" \
    | /sbin/roamkv load --data /data/db --ack --segment-mib 1 --management-time-ms 300 --batch 64
  echo "POWERCUT fatal the loader stopped before the power cut"
fi
umount /data || echo "POWERCUT note umount failed"
echo "POWERCUT done"
poweroff -f
INIT
guest_pack "$cache"
