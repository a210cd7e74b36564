#!/usr/bin/env bash
# Builds the guest of `roamkv bench powercut`: Debian's stock kernel (from its .deb, never
# installed on the host) and a busybox initramfs holding the modules for virtio disks and ext4,
# and the roamkv binary with the shared libraries it links (RocksDB is static; LevelDB, libstdc++,
# libgcc and libc are not).
# Usage: powercut-guest.sh CACHE_DIR ROAMKV_BINARY     (root; needs apt-get, dpkg-deb, cpio, gzip)
set -euo pipefail
cache=${1:?cache dir}
roamkv=${2:?roamkv binary}
mkdir -p "$cache/debs"
cd "$cache/debs"

# Newest stock amd64 kernel image the apt sources offer (not -cloud/-rt: those lack some drivers).
if ! ls linux-image-*-amd64_*.deb >/dev/null 2>&1; then
  pkg=$(apt-cache search --names-only '^linux-image-[0-9.]+-[0-9]+-amd64$' | awk '{print $1}' | sort -V | tail -1)
  [[ -n $pkg ]] || { echo "powercut-guest: no linux-image-*-amd64 package in the apt sources" >&2; exit 1; }
  apt-get download "$pkg"
fi
ls busybox-static_*.deb >/dev/null 2>&1 || apt-get download busybox-static
for tool in cpio gzip dpkg-deb ldd; do
  command -v $tool >/dev/null || { echo "powercut-guest: $tool missing (apt-get install $tool)" >&2; exit 1; }
done

rm -rf "$cache/extract" "$cache/root"
mkdir -p "$cache/extract"
for deb in linux-image-*-amd64_*.deb busybox-static_*.deb; do dpkg-deb -x "$deb" "$cache/extract"; done
kver=$(ls "$cache/extract/lib/modules" | sort -V | tail -1)
root=$cache/root
mkdir -p "$root"/{bin,sbin,etc,proc,sys,dev,data,tmp,lib/modules/$kver/kernel}
cp "$cache/extract/bin/busybox" "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
  [[ -e $root/bin/$applet ]] || ln -s busybox "$root/bin/$applet"
done
ln -sf /proc/mounts "$root/etc/mtab"
ln -sf /bin/busybox "$root/sbin/modprobe"   # the kernel's request_module() runs /sbin/modprobe

# Modules: virtio and ext4 with what they depend on; busybox's depmod resolves the dependencies.
src=$cache/extract/lib/modules/$kver
for sub in fs/ext4 fs/jbd2 fs/mbcache.ko lib crypto arch/x86/crypto drivers/virtio drivers/block/virtio_blk.ko; do
  [[ -e $src/kernel/$sub ]] || continue
  mkdir -p "$(dirname "$root/lib/modules/$kver/kernel/$sub")"
  cp -a "$src/kernel/$sub" "$root/lib/modules/$kver/kernel/$sub"
done
cp "$src"/modules.builtin* "$src/modules.order" "$root/lib/modules/$kver/"
"$root/bin/busybox" depmod -b "$root" "$kver"

# roamkv with its shared libraries (paths kept, so the dynamic loader finds them).
cp -L "$roamkv" "$root/sbin/roamkv"
# Symbols are not needed in the guest; a smaller initramfs unpacks faster under emulation.
command -v strip >/dev/null && strip --strip-unneeded "$root/sbin/roamkv"
ldd "$roamkv" | grep -o '/[^ ]*' | while read -r lib; do
  mkdir -p "$root/$(dirname "$lib")"
  cp -L "$lib" "$root/$lib"
done

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
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$cache/initramfs.img"
cp "$cache/extract/boot/vmlinuz-$kver" "$cache/vmlinuz"
rm -rf "$cache/extract" "$cache/root"
echo "powercut-guest: kernel $kver, initramfs $(du -h "$cache/initramfs.img" | cut -f1) in $cache"
