//! The --vm route: file systems this host kernel lacks (FAT, F2FS, NILFS2, exFAT) measured inside
//! a qemu guest running Debian's stock kernel, with ext4 in the same guest as the control.
//!
//! `crates/lab/vm/build-guest.sh` (on the shared base of `roamkv_testbed::vm`) builds (once,
//! cached) a busybox initramfs holding the kernel's modules, the mkfs tools and this lab binary. The guest's /init formats one virtio disk per
//! file system in turn, mounts it, runs `lab guest-fs` (`fs/guest.rs`: the same workloads as `lab fs`) and writes
//! the JSON results to a second virtio disk that the host reads back.
//!
//! Emulation (TCG: no usable KVM here) makes the guest several times slower than the host, so
//! guest numbers are only comparable with other guest numbers (ext4-in-guest is the control).
use crate::LabError;
use roamkv_testbed::vm;
use std::path::{Path, PathBuf};

/// Guest file systems: name, mkfs command (the device is appended), mount type, and arguments
/// after the device. Absolute paths: the guest's busybox shell prefers its own applets (mke2fs,
/// mkfs.vfat) over PATH.
pub const GUEST_FS: [(&str, &str, &str, &str); 5] = [
    (
        "ext4",
        "/sbin/mke2fs -F -q -t ext4 -b 4096 -E lazy_itable_init=0,lazy_journal_init=0",
        "ext4",
        "",
    ),
    // Paper 001 used FAT16 with 16 KiB clusters (32 sectors of 512 bytes); FAT16 then holds at
    // most ~1 GiB, so the file system covers the first 1,000,000 KiB of the disk.
    ("vfat", "/sbin/mkfs.vfat -F 16 -s 32", "vfat", "1000000"),
    ("f2fs", "/sbin/mkfs.f2fs -q -f", "f2fs", ""),
    // No nilfs_cleanerd runs in the guest (its GC would add I/O to the measurement), so NILFS2
    // never reclaims space: the disk is sized for a --quick run (GUEST_DISK_BYTES).
    ("nilfs2", "/sbin/mkfs.nilfs2 -q -f", "nilfs2", ""),
    ("exfat", "/sbin/mkfs.exfat", "exfat", ""),
];

/// The guest's data disk (a sparse file on the host).
const GUEST_DISK_BYTES: u64 = 6 << 30;

/// The guest's results disk: JSON of every file system's measurements.
const RESULTS_DISK_BYTES: u64 = 16 << 20;

/// Marker the guest writes before its JSON on the results disk.
const RESULTS_MAGIC: &str = "ROAMKV-GUEST-RESULTS\n";

pub fn parse_guest_fs_list(s: &str) -> Result<Vec<&'static str>, LabError> {
    let valid = GUEST_FS.iter().map(|g| g.0).collect::<Vec<_>>().join(", ");
    if s.trim().eq_ignore_ascii_case("all") {
        return Ok(GUEST_FS.iter().map(|g| g.0).collect());
    }
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let name = GUEST_FS
            .iter()
            .find(|g| g.0 == part)
            .map(|g| g.0)
            .ok_or_else(|| LabError::UnknownFs {
                given: part.to_string(),
                valid: format!("{valid} (guest file systems)"),
            })?;
        if !out.contains(&name) {
            out.push(name);
        }
    }
    // ext4 is the control: always measured in the same guest.
    if !out.contains(&"ext4") {
        out.insert(0, "ext4");
    }
    Ok(out)
}

/// What the host gets back: one entry per guest file system.
#[derive(serde::Deserialize, serde::Serialize, Debug)]
pub struct GuestResults {
    pub kernel: String,
    pub file_systems: Vec<GuestFsResult>,
}

#[derive(serde::Deserialize, serde::Serialize, Debug)]
pub struct GuestFsResult {
    pub fs: String,
    pub mkfs: String,
    pub error: Option<String>,
    pub measurements: Vec<serde_json::Value>,
}

pub fn default_cache_dir() -> PathBuf {
    PathBuf::from("/var/cache/roamkv-lab/vm")
}

/// The guest's build script, carried in the binary (testbed's `GuestScript`).
const BUILD_SCRIPT: vm::GuestScript = vm::GuestScript {
    name: "build-guest.sh",
    text: include_str!("../vm/build-guest.sh"),
};

/// Builds the guest (kernel + initramfs with this binary) if not cached.
pub fn ensure_guest(cache: &Path) -> Result<vm::GuestImage, LabError> {
    let lab_binary = std::env::current_exe().map_err(|e| LabError::io("current_exe", e))?;
    vm::ensure_image(cache, BUILD_SCRIPT, &lab_binary)
}

/// Boots the guest once for all `fs_names`; returns what it measured.
pub struct GuestOptions<'a> {
    pub quick: bool,
    pub repetitions: Option<usize>,
    pub only: Option<&'a str>,
    pub io: Option<&'a str>,
    pub memory_mib: u32,
}

pub fn run_guest(
    cmd_prefix: &[String],
    fs_names: &[&str],
    options: &GuestOptions,
) -> Result<GuestResults, LabError> {
    vm::require_qemu()?;
    let cache = default_cache_dir();
    let image = ensure_guest(&cache)?;
    let work = tempfile::Builder::new()
        .prefix("roamkv-lab-vm-")
        .tempdir()
        .map_err(|e| LabError::io("temp dir", e))?;
    let disk = work.path().join("disk.img");
    let results = work.path().join("results.img");
    vm::sparse_file(&disk, GUEST_DISK_BYTES)?;
    vm::sparse_file(&results, RESULTS_DISK_BYTES)?;
    let append = kernel_command_line(cmd_prefix, fs_names, options)?;
    let disks = [disk, results.clone()];
    let machine = vm::Machine {
        image: &image,
        memory_mib: options.memory_mib,
        append: &append,
        disks: &disks,
    };
    eprintln!(
        "roamkv lab: booting the guest (software emulation; this takes minutes): {}",
        machine.describe()
    );
    let status = machine
        .command()
        .status()
        .map_err(|e| LabError::io("qemu-system-x86_64", e))?;
    let Some(json) = vm::read_results_disk(&results, RESULTS_MAGIC)? else {
        return Err(LabError::Unsupported(format!(
            "the guest wrote no results (qemu {status}); see its console output above"
        )));
    };
    serde_json::from_str(&json).map_err(|e| LabError::Parse {
        what: "guest results".into(),
        detail: e.to_string(),
    })
}

/// The guest kernel's command line: which file systems to make (mkfs command, mount type) and
/// the `lab fs` arguments to run on each, with spaces encoded as '~'.
fn kernel_command_line(
    cmd_prefix: &[String],
    fs_names: &[&str],
    options: &GuestOptions,
) -> Result<String, LabError> {
    let GuestOptions {
        quick,
        repetitions,
        only,
        io,
        ..
    } = *options;
    let mut guest_args = String::new();
    if quick {
        guest_args.push_str(" --quick");
    }
    if let Some(r) = repetitions {
        guest_args.push_str(&format!(" --repetitions {r}"));
    }
    if let Some(io) = io {
        guest_args.push_str(&format!(" --io {io}"));
    }
    if let Some(o) = only {
        if o.contains(|c: char| c.is_whitespace() || c == '~' || c == ';') {
            return Err(LabError::Unsupported(
                "--only with --vm must not contain spaces, '~' or ';'".into(),
            ));
        }
        guest_args.push_str(&format!(" --only {o}"));
    }
    let mkfs_list: Vec<String> = fs_names
        .iter()
        .filter_map(|n| GUEST_FS.iter().find(|g| g.0 == *n))
        .map(|(name, mkfs, mount_type, tail)| {
            format!("{name}:{mount_type}:{}:{tail}", mkfs.replace(' ', "~"))
        })
        .collect();
    let mut append = format!(
        "console=ttyS0 panic=-1 quiet roamkv.fs={} roamkv.args={}",
        mkfs_list.join(";"),
        guest_args.trim().replace(' ', "~")
    );
    if !cmd_prefix.is_empty() {
        append.push_str(&format!(" roamkv.cmd={}", cmd_prefix.join("~")));
    }
    Ok(append)
}

/// The words between the program name and `word` in this process's command line ("lab" for
/// `roamkv lab fs`), so the guest can call the same binary the same way.
pub fn command_prefix(word: &str) -> Vec<String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let end = args.iter().position(|a| a == word).unwrap_or(0);
    args[..end].to_vec()
}

/// What the guest's /init appends to a command's words for each file system: `guest-fs
/// --fs-name NAME --mount DIR --device DEV [lab fs options] --json FILE`. A guest command other
/// than `guest-fs` (queries, sqlite, stack) takes these words after its own `--`.
#[derive(Debug, Clone, PartialEq)]
pub struct InitWords {
    pub fs_name: String,
    pub mount: PathBuf,
    pub device: String,
    pub json: PathBuf,
}

impl InitWords {
    pub fn parse(words: &[String]) -> Result<InitWords, LabError> {
        let after = |flag: &str| {
            words
                .iter()
                .position(|w| w == flag)
                .and_then(|i| words.get(i + 1))
                .cloned()
                .ok_or_else(|| LabError::Unsupported(format!("the guest's /init passed no {flag}")))
        };
        Ok(InitWords {
            fs_name: after("--fs-name")?,
            mount: PathBuf::from(after("--mount")?),
            device: after("--device")?,
            json: PathBuf::from(after("--json")?),
        })
    }

    /// Writes the guest's results where /init collects them.
    pub fn write_results(&self, results: &impl serde::Serialize) -> Result<(), LabError> {
        let text = serde_json::to_string(results).map_err(|e| LabError::Parse {
            what: "json".into(),
            detail: e.to_string(),
        })?;
        std::fs::write(&self.json, text).map_err(|e| LabError::io(&self.json, e))
    }
}

/// A guest for a command that needs only the init words (no `lab fs` options).
pub fn plain_options(memory_mib: u32) -> GuestOptions<'static> {
    GuestOptions {
        quick: false,
        repetitions: None,
        only: None,
        io: None,
        memory_mib,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_words_name_the_file_system_and_the_results() {
        let words: Vec<String> = [
            "guest-fs",
            "--fs-name",
            "vfat",
            "--mount",
            "/mnt",
            "--device",
            "vda",
            "--json",
            "/tmp/m.json",
        ]
        .map(String::from)
        .to_vec();
        let parsed = InitWords::parse(&words).expect("complete");
        assert_eq!(parsed.fs_name, "vfat");
        assert_eq!(parsed.json, PathBuf::from("/tmp/m.json"));
        assert_eq!(parsed.device, "vda");
        assert!(InitWords::parse(&words[..6]).is_err());
    }

    #[test]
    fn guest_list_always_has_the_ext4_control() {
        assert_eq!(
            parse_guest_fs_list("vfat,f2fs").ok(),
            Some(vec!["ext4", "vfat", "f2fs"])
        );
        assert_eq!(
            parse_guest_fs_list("all").ok().map(|v| v.len()),
            Some(GUEST_FS.len())
        );
        let err = parse_guest_fs_list("vfat,zfs")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("zfs") && err.contains("nilfs2"), "{err}");
    }
}
