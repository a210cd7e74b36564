#!/usr/bin/env bash
# Builds the --vm guest of `roamkv lab fs --vm`: Debian's stock kernel (from its .deb, never
# installed on the host) and a busybox initramfs holding the kernel modules for virtio, ext4, FAT,
# F2FS, NILFS2 and exFAT, the mkfs tools with their libraries, and the lab binary itself.
# Usage: build-guest.sh CACHE_DIR LAB_BINARY     (root; needs apt-get, dpkg-deb, cpio, gzip)
set -euo pipefail
cache=${1:?cache dir}
lab=${2:?lab binary}
mkdir -p "$cache/debs"
cd "$cache/debs"

# Newest stock amd64 kernel image the apt sources offer (not -cloud/-rt: those lack some drivers).
if ! ls linux-image-*-amd64_*.deb >/dev/null 2>&1; then
  pkg=$(apt-cache search --names-only '^linux-image-[0-9.]+-[0-9]+-amd64$' | awk '{print $1}' | sort -V | tail -1)
  [[ -n $pkg ]] || { echo "build-guest: no linux-image-*-amd64 package in the apt sources" >&2; exit 1; }
  apt-get download "$pkg"
fi
ls busybox-static_*.deb >/dev/null 2>&1 || apt-get download busybox-static
for tool in cpio gzip dpkg-deb; do
  command -v $tool >/dev/null || { echo "build-guest: $tool missing (apt-get install $tool)" >&2; exit 1; }
done

rm -rf "$cache/extract" "$cache/root"
mkdir -p "$cache/extract"
for deb in linux-image-*-amd64_*.deb busybox-static_*.deb; do dpkg-deb -x "$deb" "$cache/extract"; done
kver=$(ls "$cache/extract/lib/modules" | sort -V | tail -1)
root=$cache/root
mkdir -p "$root"/{bin,sbin,etc,proc,sys,dev,mnt,tmp,lib/modules/$kver/kernel}
cp "$cache/extract/bin/busybox" "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
  [[ -e $root/bin/$applet ]] || ln -s busybox "$root/bin/$applet"
done
ln -sf /proc/mounts "$root/etc/mtab"   # mkfs.nilfs2 reads /etc/mtab
ln -sf /bin/busybox "$root/sbin/modprobe"   # the kernel's request_module() runs /sbin/modprobe
# mke2fs -t ext4 needs the type definitions of mke2fs.conf.
[[ -f /etc/mke2fs.conf ]] && cp /etc/mke2fs.conf "$root/etc/mke2fs.conf"

# Modules: only the trees the guest needs; depmod (busybox's, the host may lack kmod) resolves deps.
src=$cache/extract/lib/modules/$kver
for sub in fs/fat fs/f2fs fs/nilfs2 fs/exfat fs/ext4 fs/jbd2 fs/nls fs/mbcache.ko lib crypto arch/x86/crypto drivers/virtio drivers/block/virtio_blk.ko; do
  [[ -e $src/kernel/$sub ]] || continue
  mkdir -p "$(dirname "$root/lib/modules/$kver/kernel/$sub")"
  cp -a "$src/kernel/$sub" "$root/lib/modules/$kver/kernel/$sub"
done
cp "$src"/modules.builtin* "$src/modules.order" "$root/lib/modules/$kver/"
"$root/bin/busybox" depmod -b "$root" "$kver"

# Programs with their shared libraries (paths kept, so the dynamic loader finds them).
copy_with_libs() {
  local bin=$1 dest=$2
  cp -L "$bin" "$root/$dest"
  ldd "$bin" 2>/dev/null | grep -o '/[^ ]*' | while read -r lib; do
    mkdir -p "$root/$(dirname "$lib")"
    cp -L "$lib" "$root/$lib"
  done
}
for tool in mke2fs mkfs.vfat mkfs.f2fs mkfs.nilfs2 mkfs.exfat; do
  path=$(command -v $tool || true)
  [[ -n $path ]] || { echo "build-guest: $tool missing on the host (e2fsprogs dosfstools f2fs-tools nilfs-tools exfatprogs)" >&2; exit 1; }
  copy_with_libs "$path" "sbin/$tool"
done
copy_with_libs "$lab" sbin/lab

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
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$cache/initramfs.img"
cp "$cache/extract/boot/vmlinuz-$kver" "$cache/vmlinuz"
echo "build-guest: kernel $kver, initramfs $(du -h "$cache/initramfs.img" | cut -f1) in $cache"
