//! The qemu guest: for what this host's kernel cannot do (FAT, F2FS, NILFS2 and exFAT; a real
//! power cut). A guest image is Debian's stock kernel and a busybox initramfs built by a shell
//! script that sources `vm/guest-base.sh` (the shared part) and adds its own modules, programs
//! and /init. The image is cached and rebuilt when the script, the base or the binary it carries
//! changes.
//!
//! Emulation (TCG: the /dev/kvm of this kind of machine cannot run a stock kernel) makes a guest
//! several times slower than the host, so guest numbers compare only with other guest numbers.
use crate::error::Error;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A bootable guest: the kernel and the initramfs.
#[derive(Clone, Debug)]
pub struct GuestImage {
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
}

/// The shared part of every guest script, passed to it as `$ROAMKV_GUEST_BASE`. The scripts are
/// carried in the binary and written out beside the image they build: a binary copied away from
/// its source tree, or installed from a package, has no `vm/` directory to read them from.
const BASE_SCRIPT: &str = include_str!("../vm/guest-base.sh");

/// A guest's build script: its file name and its text (`include_str!` of the crate's `vm/` file).
#[derive(Clone, Copy, Debug)]
pub struct GuestScript {
    pub name: &'static str,
    pub text: &'static str,
}

/// Writes `text` to `dir/name` unless it is there already; returns the path.
fn write_script(dir: &Path, name: &str, text: &str) -> Result<PathBuf, Error> {
    let path = dir.join(name);
    if std::fs::read_to_string(&path).is_ok_and(|t| t == text) {
        return Ok(path);
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
    Ok(path)
}

/// Builds the image in `cache` with `bash script CACHE PAYLOAD` unless the cached one was built
/// from the same script, base and payload binary.
pub fn ensure_image(
    cache: &Path,
    script: GuestScript,
    payload: &Path,
) -> Result<GuestImage, Error> {
    let image = GuestImage {
        kernel: cache.join("vmlinuz"),
        initramfs: cache.join("initramfs.img"),
    };
    let stamp = cache.join("image.stamp");
    let scripts = cache.join("scripts");
    let base = write_script(&scripts, "guest-base.sh", BASE_SCRIPT)?;
    let script = write_script(&scripts, script.name, script.text)?;
    let script = script.as_path();
    let identity = files_identity(&[payload, script, &base]);
    let fresh = image.kernel.is_file()
        && image.initramfs.is_file()
        && std::fs::read_to_string(&stamp).is_ok_and(|s| s == identity);
    if fresh {
        return Ok(image);
    }
    std::fs::create_dir_all(cache).map_err(|e| Error::io(cache, e))?;
    eprintln!(
        "roamkv: building the guest image in {} (first use; Debian packages via apt-get download)",
        cache.display()
    );
    let status = Command::new("bash")
        .arg(script)
        .arg(cache)
        .arg(payload)
        .env("ROAMKV_GUEST_BASE", &base)
        .status()
        .map_err(|e| Error::io(script, e))?;
    if !status.success() {
        return Err(Error::CommandFailed {
            command: format!(
                "bash {} {} {}",
                script.display(),
                cache.display(),
                payload.display()
            ),
            status: status.code().map_or("signal".into(), |c| c.to_string()),
            stderr: "see the lines above".into(),
        });
    }
    std::fs::write(&stamp, identity).map_err(|e| Error::io(&stamp, e))?;
    Ok(image)
}

/// One boot of a guest: its memory, kernel command line and virtio disks (vda, vdb, ...).
pub struct Machine<'a> {
    pub image: &'a GuestImage,
    pub memory_mib: u32,
    pub append: &'a str,
    pub disks: &'a [PathBuf],
}

impl Machine<'_> {
    /// The qemu command, stdin closed; the caller decides what becomes of stdout and stderr and
    /// whether it waits or kills. One emulated CPU: the measurements are of one writer's
    /// latency, and a second vCPU under TCG only adds host threads that compete with it.
    pub fn command(&self) -> Command {
        let mut command = Command::new("qemu-system-x86_64");
        command
            .args([
                "-machine", "q35", "-accel", "tcg", "-cpu", "max", "-smp", "1",
            ])
            .args(["-m", &self.memory_mib.to_string()])
            .args(["-nographic", "-no-reboot", "-kernel"])
            .arg(&self.image.kernel)
            .arg("-initrd")
            .arg(&self.image.initramfs)
            .args(["-append", self.append]);
        for disk in self.disks {
            // cache=none: the guest's flushes reach the host disk, as a real device's would.
            command.args([
                "-drive",
                &format!("file={},format=raw,if=virtio,cache=none", disk.display()),
            ]);
        }
        command.stdin(Stdio::null());
        command
    }

    /// The command line, for the log.
    pub fn describe(&self) -> String {
        let command = self.command();
        std::iter::once(command.get_program())
            .chain(command.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A sparse file of `bytes` (a guest's disk).
pub fn sparse_file(path: &Path, bytes: u64) -> Result<(), Error> {
    let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    file.set_len(bytes).map_err(|e| Error::io(path, e))
}

/// What a guest wrote to a raw results disk after `magic`, up to the first NUL; None when it
/// wrote nothing (it never got there).
pub fn read_results_disk(path: &Path, magic: &str) -> Result<Option<String>, Error> {
    let raw = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let text = String::from_utf8_lossy(&raw);
    Ok(text
        .strip_prefix(magic)
        .map(|rest| rest.split('\0').next().unwrap_or("").to_string()))
}

/// A stamp of files (path, size, modification time): a cached guest image is rebuilt when the
/// stamp it was built from changes.
pub fn files_identity(paths: &[&Path]) -> String {
    paths
        .iter()
        .map(|p| {
            std::fs::metadata(p)
                .map(|m| format!("{} {} {:?}", p.display(), m.len(), m.modified().ok()))
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Checks that qemu is installed before anything is built for it.
pub fn require_qemu() -> Result<PathBuf, Error> {
    crate::prerequisite::require_tool("qemu-system-x86_64", "qemu-system-x86")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_results_disk_is_read_up_to_its_first_nul() {
        let dir = tempfile::tempdir().expect("temp dir");
        let disk = dir.path().join("r.img");
        sparse_file(&disk, 4096).expect("disk");
        assert_eq!(read_results_disk(&disk, "MAGIC\n").ok(), Some(None));
        let mut bytes = b"MAGIC\n{\"a\":1}".to_vec();
        bytes.resize(4096, 0);
        std::fs::write(&disk, bytes).expect("write");
        assert_eq!(
            read_results_disk(&disk, "MAGIC\n")
                .ok()
                .flatten()
                .as_deref(),
            Some("{\"a\":1}")
        );
    }

    #[test]
    fn the_identity_changes_with_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let f = dir.path().join("f");
        std::fs::write(&f, b"one").expect("write");
        let before = files_identity(&[&f]);
        std::fs::write(&f, b"three").expect("write");
        assert_ne!(before, files_identity(&[&f]));
    }

    #[test]
    fn the_machine_has_one_drive_per_disk() {
        let image = GuestImage {
            kernel: "/k".into(),
            initramfs: "/i".into(),
        };
        let disks = [PathBuf::from("/a.img"), PathBuf::from("/b.img")];
        let machine = Machine {
            image: &image,
            memory_mib: 512,
            append: "console=ttyS0",
            disks: &disks,
        };
        let line = machine.describe();
        assert!(
            line.contains("file=/a.img,format=raw,if=virtio,cache=none"),
            "{line}"
        );
        assert!(
            line.contains("file=/b.img") && line.contains("-m 512"),
            "{line}"
        );
    }
}
