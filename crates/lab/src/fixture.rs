//! File systems on loop devices as test fixtures: make an image file, attach a loop device, mkfs,
//! mount; and undo all of it when the `Fixture` drops, when a step fails half-way, or on Ctrl-C.
//!
//! Loop devices are attached with `--direct-io=on` so the loop driver does not keep a second page
//! cache of the image file: reads after `drop_caches` then really reach the disk, and a flush on the
//! loop device becomes an fsync of the image file.
use crate::LabError;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The file-system configurations the lab knows. Each is one mkfs + mount recipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum FsSpec {
    Ext2,
    Ext4,
    Ext4Writeback,
    Ext4Journal,
    Ext4NoJournal,
    Ext4FastCommit,
    Ext4ExternalJournal,
    Xfs,
    XfsExternalLog,
    Btrfs,
}

const ALL_SPECS: [FsSpec; 10] = [
    FsSpec::Ext2,
    FsSpec::Ext4,
    FsSpec::Ext4Writeback,
    FsSpec::Ext4Journal,
    FsSpec::Ext4NoJournal,
    FsSpec::Ext4FastCommit,
    FsSpec::Ext4ExternalJournal,
    FsSpec::Xfs,
    FsSpec::XfsExternalLog,
    FsSpec::Btrfs,
];

/// Size of the second loop device that holds an external ext4 journal or XFS log.
const JOURNAL_DEVICE_BYTES: u64 = 64 << 20;

impl FsSpec {
    pub fn name(self) -> &'static str {
        match self {
            FsSpec::Ext2 => "ext2",
            FsSpec::Ext4 => "ext4",
            FsSpec::Ext4Writeback => "ext4-writeback",
            FsSpec::Ext4Journal => "ext4-journal",
            FsSpec::Ext4NoJournal => "ext4-nojournal",
            FsSpec::Ext4FastCommit => "ext4-fc",
            FsSpec::Ext4ExternalJournal => "ext4-extjournal",
            FsSpec::Xfs => "xfs",
            FsSpec::XfsExternalLog => "xfs-extlog",
            FsSpec::Btrfs => "btrfs",
        }
    }

    pub fn all() -> &'static [FsSpec] {
        &ALL_SPECS
    }

    /// The kernel file-system type passed to mount.
    pub fn kernel_type(self) -> &'static str {
        match self {
            FsSpec::Ext2 => "ext2",
            FsSpec::Xfs | FsSpec::XfsExternalLog => "xfs",
            FsSpec::Btrfs => "btrfs",
            _ => "ext4",
        }
    }

    pub fn is_ext(self) -> bool {
        matches!(self.kernel_type(), "ext2" | "ext4")
    }

    pub fn needs_second_device(self) -> bool {
        matches!(self, FsSpec::Ext4ExternalJournal | FsSpec::XfsExternalLog)
    }

    /// The mkfs program and the Debian package that ships it.
    pub fn mkfs_tool(self) -> (&'static str, &'static str) {
        match self.kernel_type() {
            "xfs" => ("mkfs.xfs", "xfsprogs"),
            "btrfs" => ("mkfs.btrfs", "btrfs-progs"),
            _ => ("mke2fs", "e2fsprogs"),
        }
    }

    fn valid_names() -> String {
        ALL_SPECS
            .iter()
            .map(|s| s.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for FsSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FsSpec {
    type Err = LabError;
    fn from_str(s: &str) -> Result<FsSpec, LabError> {
        let wanted = s.trim().to_ascii_lowercase();
        ALL_SPECS
            .iter()
            .copied()
            .find(|spec| spec.name() == wanted)
            .ok_or_else(|| LabError::UnknownFs {
                given: s.to_string(),
                valid: FsSpec::valid_names(),
            })
    }
}

/// "ext4,xfs" -> [Ext4, Xfs]; "all" -> every spec. Duplicates are kept once, in first-seen order.
pub fn parse_fs_list(s: &str) -> Result<Vec<FsSpec>, LabError> {
    if s.trim().eq_ignore_ascii_case("all") {
        return Ok(ALL_SPECS.to_vec());
    }
    let mut specs = Vec::new();
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let spec: FsSpec = part.parse()?;
        if !specs.contains(&spec) {
            specs.push(spec);
        }
    }
    if specs.is_empty() {
        return Err(LabError::UnknownFs {
            given: s.to_string(),
            valid: FsSpec::valid_names(),
        });
    }
    Ok(specs)
}

pub fn require_root() -> Result<(), LabError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        Ok(())
    } else {
        Err(LabError::NotRoot)
    }
}

/// sync; echo 3 > /proc/sys/vm/drop_caches — so the next read comes from the device.
pub fn drop_caches() -> Result<(), LabError> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    let path = "/proc/sys/vm/drop_caches";
    fs::write(path, "3\n").map_err(|e| LabError::io(path, e))
}

/// Fails with the Debian package name when `tool` is not on PATH (or in /sbin, /usr/sbin).
pub fn require_tool(tool: &str, package: &str) -> Result<PathBuf, LabError> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .ok_or_else(|| LabError::MissingTool {
            tool: tool.to_string(),
            package: package.to_string(),
        })
}

/// Runs a command to completion; non-zero exit becomes `CommandFailed` with its stderr.
pub(crate) fn run_command(args: &[&str]) -> Result<String, LabError> {
    let (program, rest) = args
        .split_first()
        .ok_or_else(|| LabError::Unsupported("empty command".into()))?;
    let output = Command::new(program)
        .args(rest)
        .output()
        .map_err(|e| LabError::io(*program, e))?;
    if !output.status.success() {
        return Err(LabError::CommandFailed {
            command: args.join(" "),
            status: output
                .status
                .code()
                .map_or("signal".to_string(), |c| c.to_string()),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

// ---- cleanup registry: what to undo if the process is interrupted --------------------------

/// One undo step. Steps of a resource run in reverse registration order.
#[derive(Clone, Debug)]
pub(crate) enum Undo {
    Unmount(PathBuf),
    DetachLoop(PathBuf),
    RemoveDir(PathBuf),
}

static UNDO_REGISTRY: Mutex<Vec<(u64, Undo)>> = Mutex::new(Vec::new());
static NEXT_OWNER_ID: AtomicU64 = AtomicU64::new(1);
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static HANDLER_INSTALLED: AtomicBool = AtomicBool::new(false);
/// A child the lab is waiting for (the traced command); the Ctrl-C handler terminates it so it
/// releases the mount. 0 = none.
static CHILD_PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Tells the Ctrl-C handler which child to terminate (0 = none).
pub fn set_waited_child(pid: u32) {
    CHILD_PID.store(i32::try_from(pid).unwrap_or(0), Ordering::SeqCst);
}
/// Held while undo steps run, so the Ctrl-C handler and a Drop guard never run steps concurrently
/// (and the process cannot exit from main while the handler is half-way through).
static UNDO_RUN_LOCK: Mutex<()> = Mutex::new(());
/// How long the Ctrl-C handler lets the main thread's Drop guards clean up before doing it itself.
const HANDLER_GRACE: Duration = Duration::from_secs(3);

/// True once Ctrl-C (or SIGTERM) arrived; long loops check it to stop early.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Installs (once) a SIGINT/SIGTERM handler that undoes every registered mount, loop device and
/// tracefs instance, then exits with 130. If the embedding binary already set a handler, the lab
/// keeps working and relies on Drop guards alone.
pub(crate) fn install_interrupt_cleanup() {
    if HANDLER_INSTALLED.swap(true, Ordering::SeqCst) {
        return;
    }
    let result = ctrlc::set_handler(|| {
        INTERRUPTED.store(true, Ordering::SeqCst);
        eprintln!("\nroamkv lab: interrupted; unmounting and detaching loop devices...");
        // The main thread sees `interrupted()` and unwinds through its Drop guards; give it time,
        // then undo whatever is still registered (e.g. if it is blocked waiting for a child).
        let child = CHILD_PID.load(Ordering::SeqCst);
        if child > 0 {
            // SAFETY: kill has no memory-safety preconditions; the pid is our own child.
            unsafe { libc::kill(child, libc::SIGTERM) };
        }
        let started = std::time::Instant::now();
        while started.elapsed() < HANDLER_GRACE && !registry_is_empty() {
            std::thread::sleep(Duration::from_millis(50));
        }
        undo_all();
        std::process::exit(130);
    });
    if let Err(e) = result {
        eprintln!(
            "roamkv lab: warning: no Ctrl-C cleanup handler ({e}); Drop guards still clean up"
        );
    }
}

pub(crate) fn new_owner_id() -> u64 {
    NEXT_OWNER_ID.fetch_add(1, Ordering::SeqCst)
}

pub(crate) fn register_undo(owner: u64, undo: Undo) {
    let mut registry = UNDO_REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    registry.push((owner, undo));
}

fn registry_is_empty() -> bool {
    UNDO_REGISTRY
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .is_empty()
}

/// Runs and forgets the undo steps of one owner (newest first).
pub(crate) fn undo_owner(owner: u64) {
    let _running = UNDO_RUN_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let steps: Vec<Undo> = {
        let mut registry = UNDO_REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
        let (mine, rest): (Vec<_>, Vec<_>) = registry.drain(..).partition(|(o, _)| *o == owner);
        *registry = rest;
        mine.into_iter().map(|(_, u)| u).collect()
    };
    for step in steps.into_iter().rev() {
        run_undo(&step);
    }
}

fn undo_all() {
    let _running = UNDO_RUN_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let steps: Vec<Undo> = {
        let mut registry = UNDO_REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
        registry.drain(..).map(|(_, u)| u).collect()
    };
    for step in steps.into_iter().rev() {
        run_undo(&step);
    }
}

fn run_undo(step: &Undo) {
    match step {
        Undo::Unmount(dir) => unmount_with_retry(dir),
        Undo::DetachLoop(dev) => {
            if let Err(e) = run_command(&["losetup", "-d", &dev.to_string_lossy()]) {
                eprintln!(
                    "roamkv lab: warning: could not detach {}: {e}",
                    dev.display()
                );
            }
        }
        Undo::RemoveDir(dir) => {
            // tracefs instances are removed with rmdir (they are not ordinary directories).
            let _ = fs::remove_dir(dir);
        }
    }
}

fn is_mounted(dir: &Path) -> bool {
    let Ok(mounts) = fs::read_to_string("/proc/mounts") else {
        return false;
    };
    let dir = dir.to_string_lossy();
    mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(&*dir))
}

fn unmount_with_retry(dir: &Path) {
    let dir_str = dir.to_string_lossy().to_string();
    for _ in 0..10 {
        if !is_mounted(dir) || run_command(&["umount", &dir_str]).is_ok() {
            return;
        }
        // Busy: a traced child may still be exiting. Wait, then fall back to a lazy unmount.
        std::thread::sleep(Duration::from_millis(200));
    }
    if let Err(e) = run_command(&["umount", "-l", &dir_str]) {
        eprintln!("roamkv lab: warning: could not unmount {dir_str}: {e}");
    }
}

// ---- the fixture ------------------------------------------------------------------------------

/// A mounted file system on a loop device (or a confirmed real device). Drop undoes everything.
pub struct Fixture {
    spec: FsSpec,
    owner: u64,
    // Field order matters for Drop: undo runs in Drop::drop, then the temp dir is removed.
    work_dir: Option<tempfile::TempDir>,
    mount_dir: PathBuf,
    device: PathBuf,
    device_name: String,
    journal_device: Option<PathBuf>,
    mkfs_command: String,
    mount_options: String,
    image_bytes: u64,
}

impl Fixture {
    /// Make an image file of `size_bytes` (in a temp dir), attach a loop device, mkfs, mount.
    pub fn create(spec: FsSpec, size_bytes: u64) -> Result<Fixture, LabError> {
        Fixture::create_in(spec, size_bytes, None)
    }

    /// Like `create`, with the image files and mount point under `parent` (default: the temp dir).
    pub fn create_in(
        spec: FsSpec,
        size_bytes: u64,
        parent: Option<&Path>,
    ) -> Result<Fixture, LabError> {
        require_root()?;
        let (mkfs_tool, package) = spec.mkfs_tool();
        require_tool(mkfs_tool, package)?;
        require_tool("losetup", "mount")?;
        install_interrupt_cleanup();
        let work_dir = match parent {
            Some(p) => tempfile::Builder::new().prefix("roamkv-lab-").tempdir_in(p),
            None => tempfile::Builder::new().prefix("roamkv-lab-").tempdir(),
        }
        .map_err(|e| LabError::io("temp dir", e))?;
        let owner = new_owner_id();
        // From here on, any error drops `fixture`, whose Drop undoes what was registered so far.
        let mut fixture = Fixture {
            spec,
            owner,
            mount_dir: work_dir.path().join("mnt"),
            work_dir: Some(work_dir),
            device: PathBuf::new(),
            device_name: String::new(),
            journal_device: None,
            mkfs_command: String::new(),
            mount_options: String::new(),
            image_bytes: size_bytes,
        };
        let image = fixture.work_path("data.img");
        fixture.device = fixture.attach_loop(&image, size_bytes)?;
        if spec.needs_second_device() {
            let journal_image = fixture.work_path("journal.img");
            fixture.journal_device =
                Some(fixture.attach_loop(&journal_image, JOURNAL_DEVICE_BYTES)?);
        }
        fixture.finish_setup()?;
        Ok(fixture)
    }

    /// Use a real, unmounted block device instead of a loop device. Everything on it is destroyed,
    /// so `confirmed` (the CLI's --i-mean-it) must be true. Specs needing a second device are refused.
    pub fn create_on_device(
        spec: FsSpec,
        device: &Path,
        confirmed: bool,
    ) -> Result<Fixture, LabError> {
        require_root()?;
        if spec.needs_second_device() {
            return Err(LabError::Unsupported(format!(
                "{} needs a second device for its journal; use a loop device fixture",
                spec.name()
            )));
        }
        let (mkfs_tool, package) = spec.mkfs_tool();
        require_tool(mkfs_tool, package)?;
        let meta = fs::metadata(device).map_err(|e| LabError::io(device, e))?;
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_block_device() {
            return Err(LabError::Unsupported(format!(
                "{} is not a block device",
                device.display()
            )));
        }
        let mounts =
            fs::read_to_string("/proc/mounts").map_err(|e| LabError::io("/proc/mounts", e))?;
        let dev_str = device.to_string_lossy();
        if mounts.lines().any(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|d| d.starts_with(&*dev_str))
        }) {
            return Err(LabError::DeviceBusy(device.to_path_buf()));
        }
        if !confirmed {
            return Err(LabError::NotConfirmed(device.to_path_buf()));
        }
        install_interrupt_cleanup();
        let work_dir = tempfile::Builder::new()
            .prefix("roamkv-lab-")
            .tempdir()
            .map_err(|e| LabError::io("temp dir", e))?;
        let size = run_command(&["blockdev", "--getsize64", &dev_str])?
            .trim()
            .parse()
            .unwrap_or(0);
        let mut fixture = Fixture {
            spec,
            owner: new_owner_id(),
            mount_dir: work_dir.path().join("mnt"),
            work_dir: Some(work_dir),
            device: device.to_path_buf(),
            device_name: String::new(),
            journal_device: None,
            mkfs_command: String::new(),
            mount_options: String::new(),
            image_bytes: size,
        };
        fixture.finish_setup()?;
        Ok(fixture)
    }

    fn work_path(&self, name: &str) -> PathBuf {
        self.work_dir
            .as_ref()
            .map(|d| d.path().join(name))
            .unwrap_or_else(|| PathBuf::from(name))
    }

    fn attach_loop(&mut self, image: &Path, size_bytes: u64) -> Result<PathBuf, LabError> {
        let file = fs::File::create(image).map_err(|e| LabError::io(image, e))?;
        file.set_len(size_bytes)
            .map_err(|e| LabError::io(image, e))?;
        drop(file);
        let out = run_command(&[
            "losetup",
            "--find",
            "--show",
            "--direct-io=on",
            &image.to_string_lossy(),
        ])?;
        let device = PathBuf::from(out.trim());
        register_undo(self.owner, Undo::DetachLoop(device.clone()));
        Ok(device)
    }

    fn finish_setup(&mut self) -> Result<(), LabError> {
        self.device_name = self
            .device
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| {
                LabError::Unsupported(format!("no device name in {}", self.device.display()))
            })?;
        let dev = self.device.to_string_lossy().into_owned();
        let jdev = self
            .journal_device
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned());
        let (commands, mount_options) = mkfs_plan(self.spec, &dev, jdev.as_deref())?;
        for cmd in &commands {
            let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
            run_command(&args)?;
        }
        self.mkfs_command = commands
            .iter()
            .map(|c| c.join(" "))
            .collect::<Vec<_>>()
            .join(" && ");
        fs::create_dir_all(&self.mount_dir).map_err(|e| LabError::io(&self.mount_dir, e))?;
        let mount_dir = self.mount_dir.to_string_lossy().into_owned();
        let opts = if mount_options.is_empty() {
            "defaults".to_string()
        } else {
            mount_options.join(",")
        };
        run_command(&[
            "mount",
            "-t",
            self.spec.kernel_type(),
            "-o",
            &opts,
            &dev,
            &mount_dir,
        ])?;
        register_undo(self.owner, Undo::Unmount(self.mount_dir.clone()));
        // The kernel's view of the options (including defaults it added) is what we report.
        self.mount_options = current_mount_options(&self.mount_dir).unwrap_or(opts);
        if interrupted() {
            return Err(LabError::Interrupted);
        }
        Ok(())
    }

    pub fn spec(&self) -> FsSpec {
        self.spec
    }
    pub fn mount_dir(&self) -> &Path {
        &self.mount_dir
    }
    /// The data device, e.g. /dev/loop3.
    pub fn device(&self) -> &Path {
        &self.device
    }
    /// e.g. "loop3", for /sys/block/<name>.
    pub fn device_name(&self) -> &str {
        &self.device_name
    }
    /// The second device holding an external ext4 journal or XFS log, if any.
    pub fn journal_device(&self) -> Option<&Path> {
        self.journal_device.as_deref()
    }
    pub fn journal_device_name(&self) -> Option<String> {
        self.journal_device
            .as_ref()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
    }
    /// The exact mkfs command line(s) used, joined by " && ".
    pub fn mkfs_command(&self) -> &str {
        &self.mkfs_command
    }
    /// The mount options as the kernel reports them in /proc/mounts.
    pub fn mount_options(&self) -> &str {
        &self.mount_options
    }
    pub fn image_bytes(&self) -> u64 {
        self.image_bytes
    }

    /// sync + syncfs + short sleep, so earlier writeback does not leak into a measurement.
    pub fn quiesce(&self) -> Result<(), LabError> {
        // SAFETY: sync has no preconditions.
        unsafe { libc::sync() };
        let dir = fs::File::open(&self.mount_dir).map_err(|e| LabError::io(&self.mount_dir, e))?;
        use std::os::fd::AsRawFd;
        // SAFETY: the fd is open for the duration of the call.
        if unsafe { libc::syncfs(dir.as_raw_fd()) } != 0 {
            return Err(LabError::io(
                &self.mount_dir,
                std::io::Error::last_os_error(),
            ));
        }
        std::thread::sleep(Duration::from_millis(150));
        if interrupted() {
            return Err(LabError::Interrupted);
        }
        Ok(())
    }

    /// Removes every entry under the mount point (not the file system's own hidden entries such
    /// as lost+found), so workloads can reuse one fixture.
    pub fn clear(&self) -> Result<(), LabError> {
        let entries =
            fs::read_dir(&self.mount_dir).map_err(|e| LabError::io(&self.mount_dir, e))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_name() == "lost+found" {
                continue;
            }
            let result = if path.is_dir() {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            result.map_err(|e| LabError::io(&path, e))?;
        }
        Ok(())
    }
}

/// The mkfs command(s) for a file system on `dev` (and its external journal/log device `jdev`),
/// and the mount options it needs beyond the defaults.
///
/// Long because: one match arm per file system, each a literal command line, reads best as one
/// table.
fn mkfs_plan(
    spec: FsSpec,
    dev: &str,
    jdev: Option<&str>,
) -> Result<(Vec<Vec<String>>, Vec<String>), LabError> {
    let mut commands: Vec<Vec<String>> = Vec::new();
    // Lazy init off: otherwise ext4lazyinit zeroes inode tables in the background while we measure.
    let ext_opts = "lazy_itable_init=0,lazy_journal_init=0";
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    let mut mount_options: Vec<String> = Vec::new();
    match spec {
        FsSpec::Ext2 => commands.push(s(&[
            "mke2fs",
            "-F",
            "-q",
            "-t",
            "ext2",
            "-b",
            "4096",
            "-E",
            "lazy_itable_init=0",
            dev,
        ])),
        FsSpec::Ext4 | FsSpec::Ext4Writeback | FsSpec::Ext4Journal => {
            commands.push(s(&[
                "mke2fs", "-F", "-q", "-t", "ext4", "-b", "4096", "-E", ext_opts, dev,
            ]));
            mount_options.push(
                match spec {
                    FsSpec::Ext4Writeback => "data=writeback",
                    FsSpec::Ext4Journal => "data=journal",
                    _ => "data=ordered",
                }
                .to_string(),
            );
        }
        FsSpec::Ext4NoJournal => commands.push(s(&[
            "mke2fs",
            "-F",
            "-q",
            "-t",
            "ext4",
            "-b",
            "4096",
            "-O",
            "^has_journal",
            "-E",
            "lazy_itable_init=0",
            dev,
        ])),
        FsSpec::Ext4FastCommit => commands.push(s(&[
            "mke2fs",
            "-F",
            "-q",
            "-t",
            "ext4",
            "-b",
            "4096",
            "-O",
            "fast_commit",
            "-E",
            ext_opts,
            dev,
        ])),
        FsSpec::Ext4ExternalJournal => {
            let j = jdev
                .map(str::to_string)
                .ok_or_else(|| LabError::Unsupported("external journal device missing".into()))?;
            commands.push(s(&[
                "mke2fs",
                "-F",
                "-q",
                "-O",
                "journal_dev",
                "-b",
                "4096",
                &j,
            ]));
            commands.push(s(&[
                "mke2fs",
                "-F",
                "-q",
                "-t",
                "ext4",
                "-b",
                "4096",
                "-J",
                &format!("device={j}"),
                "-E",
                "lazy_itable_init=0",
                dev,
            ]));
        }
        FsSpec::Xfs => commands.push(s(&["mkfs.xfs", "-f", "-q", dev])),
        FsSpec::XfsExternalLog => {
            let j = jdev
                .map(str::to_string)
                .ok_or_else(|| LabError::Unsupported("external log device missing".into()))?;
            commands.push(s(&[
                "mkfs.xfs",
                "-f",
                "-q",
                "-l",
                &format!("logdev={j}"),
                dev,
            ]));
            mount_options.push(format!("logdev={j}"));
        }
        FsSpec::Btrfs => commands.push(s(&["mkfs.btrfs", "-f", "-q", dev])),
    }
    Ok((commands, mount_options))
}

impl Drop for Fixture {
    fn drop(&mut self) {
        undo_owner(self.owner);
        if let Some(dir) = self.work_dir.take()
            && let Err(e) = dir.close()
        {
            eprintln!("roamkv lab: warning: could not remove temp dir: {e}");
        }
    }
}

fn current_mount_options(dir: &Path) -> Option<String> {
    let mounts = fs::read_to_string("/proc/mounts").ok()?;
    let dir = dir.to_string_lossy();
    mounts.lines().rev().find_map(|l| {
        let fields: Vec<&str> = l.split_whitespace().collect();
        (fields.get(1) == Some(&&*dir))
            .then(|| fields.get(3).map(|s| s.to_string()))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_to_its_spec() {
        for spec in FsSpec::all() {
            assert_eq!(spec.name().parse::<FsSpec>().ok(), Some(*spec));
        }
    }

    #[test]
    fn unknown_fs_lists_valid_names() {
        let err = "ntfs"
            .parse::<FsSpec>()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("ntfs"), "{err}");
        assert!(
            err.contains("ext4-fc") && err.contains("xfs-extlog") && err.contains("btrfs"),
            "{err}"
        );
    }

    #[test]
    fn fs_list_parsing() {
        assert_eq!(
            parse_fs_list("ext4,xfs").ok(),
            Some(vec![FsSpec::Ext4, FsSpec::Xfs])
        );
        assert_eq!(
            parse_fs_list(" xfs , ext4,xfs").ok(),
            Some(vec![FsSpec::Xfs, FsSpec::Ext4])
        );
        assert_eq!(
            parse_fs_list("all").ok().map(|v| v.len()),
            Some(FsSpec::all().len())
        );
        assert!(parse_fs_list("ext4,zfs").is_err());
        assert!(parse_fs_list("").is_err());
    }

    #[test]
    fn missing_tool_names_the_debian_package() {
        let err = require_tool("mkfs.definitely-not-here", "f2fs-tools")
            .err()
            .map(|e| e.to_string());
        let msg = err.unwrap_or_default();
        assert!(msg.contains("apt-get install f2fs-tools"), "{msg}");
    }
}
