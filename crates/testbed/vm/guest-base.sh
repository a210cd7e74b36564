# The shared part of every qemu guest image of the project (`roamkv lab ... --vm`,
# `roamkv bench powercut`): Debian's stock kernel (from its .deb, never installed on the host) and
# a busybox initramfs. Sourced by a guest script, which adds its modules, programs and /init:
#
#   source "$ROAMKV_GUEST_BASE"            # set by roamkv_testbed::vm::ensure_image
#   guest_unpack "$cache" my-guest          # kernel + busybox unpacked; sets $kver, $root, $src
#   guest_modules fs/ext4 fs/jbd2 ...       # module trees under kernel/, resolved by depmod
#   guest_copy_with_libs /usr/bin/x sbin/x  # a program and the shared libraries it links
#   cat > "$root/init" <<'INIT' ... INIT
#   guest_pack "$cache"                     # $cache/vmlinuz and $cache/initramfs.img
#
# Needs root, apt-get, dpkg-deb, cpio, gzip and ldd.

guest_fail() { echo "$guest_name: $*" >&2; exit 1; }

# Downloads (once) the newest stock amd64 kernel the apt sources offer and busybox-static,
# unpacks both, and lays out the initramfs root with busybox's applets.
guest_unpack() {
  local cache=$1
  guest_name=$2
  mkdir -p "$cache/debs"
  local tool
  for tool in apt-get apt-cache cpio gzip dpkg-deb ldd; do
    command -v $tool >/dev/null || guest_fail "$tool missing (apt-get install it)"
  done
  (
    cd "$cache/debs"
    # Not -cloud/-rt: those kernels lack some of the drivers the guests need.
    if ! ls linux-image-*-amd64_*.deb >/dev/null 2>&1; then
      local pkg
      pkg=$(apt-cache search --names-only '^linux-image-[0-9.]+-[0-9]+-amd64$' | awk '{print $1}' | sort -V | tail -1)
      [[ -n $pkg ]] || guest_fail "no linux-image-*-amd64 package in the apt sources"
      apt-get download "$pkg"
    fi
    ls busybox-static_*.deb >/dev/null 2>&1 || apt-get download busybox-static
  )
  rm -rf "$cache/extract" "$cache/root"
  mkdir -p "$cache/extract"
  local deb
  for deb in "$cache"/debs/linux-image-*-amd64_*.deb "$cache"/debs/busybox-static_*.deb; do
    dpkg-deb -x "$deb" "$cache/extract"
  done
  kver=$(ls "$cache/extract/lib/modules" | sort -V | tail -1)
  root=$cache/root
  src=$cache/extract/lib/modules/$kver
  mkdir -p "$root"/{bin,sbin,etc,proc,sys,dev,tmp,lib/modules/$kver/kernel}
  cp "$cache/extract/bin/busybox" "$root/bin/busybox"
  local applet
  for applet in $("$root/bin/busybox" --list); do
    [[ -e $root/bin/$applet ]] || ln -s busybox "$root/bin/$applet"
  done
  ln -sf /proc/mounts "$root/etc/mtab"        # mkfs.nilfs2 and mount read /etc/mtab
  ln -sf /bin/busybox "$root/sbin/modprobe"   # the kernel's request_module() runs /sbin/modprobe
}

# Copies the named trees under the kernel's modules directory (those that exist), then lets
# busybox's depmod (the host may have no kmod) resolve their dependencies.
guest_modules() {
  local sub
  for sub in "$@"; do
    [[ -e $src/kernel/$sub ]] || continue
    mkdir -p "$(dirname "$root/lib/modules/$kver/kernel/$sub")"
    cp -a "$src/kernel/$sub" "$root/lib/modules/$kver/kernel/$sub"
  done
  cp "$src"/modules.builtin* "$src/modules.order" "$root/lib/modules/$kver/"
  "$root/bin/busybox" depmod -b "$root" "$kver"
}

# A program with its shared libraries (paths kept, so the dynamic loader finds them). Symbols
# are stripped: a smaller initramfs unpacks faster under emulation.
guest_copy_with_libs() {
  local bin=$1 dest=$2 lib
  cp -L "$bin" "$root/$dest"
  if command -v strip >/dev/null; then strip --strip-unneeded "$root/$dest" 2>/dev/null || true; fi
  ldd "$bin" 2>/dev/null | grep -o '/[^ ]*' | while read -r lib; do
    mkdir -p "$root/$(dirname "$lib")"
    cp -L "$lib" "$root/$lib"
  done
}

# Packs the root into $cache/initramfs.img, puts the kernel beside it, removes the unpacked trees.
guest_pack() {
  local cache=$1
  chmod +x "$root/init"
  (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$cache/initramfs.img"
  cp "$cache/extract/boot/vmlinuz-$kver" "$cache/vmlinuz"
  rm -rf "$cache/extract" "$cache/root"
  echo "$guest_name: kernel $kver, initramfs $(du -h "$cache/initramfs.img" | cut -f1) in $cache"
}
