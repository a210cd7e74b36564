//! Where a workload runs (`Target`): a lab `Fixture`, or a file system mounted by someone else
//! (`MountedDevice`, the guest's side of --vm); and the summed block-device counters of one.
use crate::LabError;
use roamkv_testbed::devstat::DevStat;
use roamkv_testbed::fixture::{Fixture, interrupted};
use std::path::{Path, PathBuf};

/// Where a workload runs: a lab `Fixture`, or a file system mounted by someone else (the guest
/// of the --vm route). Only fixtures can be traced.
pub trait Target {
    fn fs_name(&self) -> String;
    fn mount_dir(&self) -> &Path;
    /// Block devices whose counters are summed (data device, external journal device).
    fn device_names(&self) -> Vec<String>;
    fn quiesce(&self) -> Result<(), LabError>;
    fn as_fixture(&self) -> Option<&Fixture> {
        None
    }
}

impl Target for Fixture {
    fn fs_name(&self) -> String {
        self.spec().name().to_string()
    }
    fn mount_dir(&self) -> &Path {
        Fixture::mount_dir(self)
    }
    fn device_names(&self) -> Vec<String> {
        let mut names = vec![self.device_name().to_string()];
        names.extend(self.journal_device_name());
        names
    }
    fn quiesce(&self) -> Result<(), LabError> {
        Fixture::quiesce(self)
    }
    fn as_fixture(&self) -> Option<&Fixture> {
        Some(self)
    }
}

/// A file system already mounted at `mount_dir` on `device_name` (e.g. "vdb" inside the guest).
pub struct MountedDevice {
    pub fs_name: String,
    pub mount_dir: PathBuf,
    pub device_name: String,
}

impl Target for MountedDevice {
    fn fs_name(&self) -> String {
        self.fs_name.clone()
    }
    fn mount_dir(&self) -> &Path {
        &self.mount_dir
    }
    fn device_names(&self) -> Vec<String> {
        vec![self.device_name.clone()]
    }
    fn quiesce(&self) -> Result<(), LabError> {
        // SAFETY: sync has no preconditions.
        unsafe { libc::sync() };
        std::thread::sleep(std::time::Duration::from_millis(150));
        if interrupted() {
            Err(LabError::Interrupted)
        } else {
            Ok(())
        }
    }
}

pub(super) fn device_counters(target: &dyn Target) -> Result<DevStat, LabError> {
    let mut total = DevStat::default();
    for name in target.device_names() {
        total = total.plus(&DevStat::read(&name)?);
    }
    Ok(total)
}
