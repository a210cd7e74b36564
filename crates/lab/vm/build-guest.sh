#!/usr/bin/env bash
# Builds the --vm guest of `roamkv lab fs|queries|sqlite|stack --vm`: the shared base
# (crates/testbed/vm/guest-base.sh: Debian's stock kernel and a busybox initramfs) plus the kernel
# modules for virtio, ext4, FAT, F2FS, NILFS2 and exFAT, the mkfs tools with their libraries, and
# the lab binary itself.
# Usage: build-guest.sh CACHE_DIR LAB_BINARY     (root; ROAMKV_GUEST_BASE names the base script)
set -euo pipefail
cache=${1:?cache dir}
lab=${2:?lab binary}
source "${ROAMKV_GUEST_BASE:?the path of crates/testbed/vm/guest-base.sh}"

guest_unpack "$cache" build-guest
mkdir -p "$root/mnt"
# mke2fs -t ext4 needs the type definitions of mke2fs.conf.
[[ -f /etc/mke2fs.conf ]] && cp /etc/mke2fs.conf "$root/etc/mke2fs.conf"
guest_modules fs/fat fs/f2fs fs/nilfs2 fs/exfat fs/ext4 fs/jbd2 fs/nls fs/mbcache.ko lib crypto \
  arch/x86/crypto drivers/virtio drivers/block/virtio_blk.ko
for tool in mke2fs mkfs.vfat mkfs.f2fs mkfs.nilfs2 mkfs.exfat; do
  path=$(command -v $tool || true)
  [[ -n $path ]] || guest_fail "$tool missing on the host (e2fsprogs dosfstools f2fs-tools nilfs-tools exfatprogs)"
  guest_copy_with_libs "$path" "sbin/$tool"
done
guest_copy_with_libs "$lab" sbin/lab

cat > "$root/init" <<'INIT'
#!/bin/sh
# Guest init: measure each file system named on the kernel command line, write the results to
# the second disk, power off. roamkv.fs=NAME:TYPE:MKFS~WITH~TILDES:ARGS-AFTER-DEVICE;...  roamkv.args=LAB~ARGS
# ('~' stands for a space: the kernel command line splits words on spaces.)
export PATH=/sbin:/bin   # the real mkfs tools in /sbin before busybox's applets
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in virtio_pci virtio_blk crc32_generic crc32c_generic ext4 vfat nls_cp437 nls_ascii nls_utf8 nls_iso8859-1 f2fs nilfs2 exfat; do
  modprobe $m 2>/dev/null || echo "guest: modprobe $m failed"
done
i=0; while [ ! -b /dev/vdb ] && [ $i -lt 50 ]; do sleep 0.2; i=$((i+1)); done
FS=; ARGS=; CMD=
for word in $(cat /proc/cmdline); do
  case $word in
    roamkv.fs=*) FS=${word#roamkv.fs=} ;;
    roamkv.args=*) ARGS=$(echo "${word#roamkv.args=}" | tr '~' ' ') ;;
    roamkv.cmd=*) CMD=$(echo "${word#roamkv.cmd=}" | tr '~' ' ') ;;
  esac
done
OUT=/tmp/results.json
printf '{"kernel":"%s","file_systems":[' "$(uname -r)" > $OUT
first=1
for item in $(echo "$FS" | tr ';' ' '); do
  name=${item%%:*}; rest=${item#*:}; type=${rest%%:*}; rest=${rest#*:}
  mkfs=$(echo "${rest%%:*}" | tr '~' ' '); tail=${rest#*:}
  echo "guest: $name: $mkfs /dev/vda $tail"
  err=null
  echo '[]' > /tmp/m.json
  if $mkfs /dev/vda $tail > /tmp/mkfs.log 2>&1 && mount -t $type /dev/vda /mnt; then
    /sbin/lab $CMD guest-fs --fs-name $name --mount /mnt --device vda $ARGS --json /tmp/m.json || err='"lab guest-fs failed"'
    umount /mnt || echo "guest: umount failed"
  else
    cat /tmp/mkfs.log
    reason=$(tail -1 /tmp/mkfs.log | tr -cd 'A-Za-z0-9 ._:/=,()-')
    err="\"mkfs or mount failed: $reason\""
  fi
  [ $first = 1 ] || printf ',' >> $OUT
  first=0
  printf '{"fs":"%s","mkfs":"%s /dev/vda %s","error":%s,"measurements":' "$name" "$mkfs" "$tail" "$err" >> $OUT
  cat /tmp/m.json >> $OUT
  printf '}' >> $OUT
done
printf ']}' >> $OUT
{ printf 'ROAMKV-GUEST-RESULTS\n'; cat $OUT; } > /dev/vdb
sync
echo "guest: done"
poweroff -f
INIT
guest_pack "$cache"
