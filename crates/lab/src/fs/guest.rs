//! `roamkv lab fs --vm`, the guest's half and the host's reading of it: inside the qemu guest,
//! `lab guest-fs` runs the plan of `lab fs` on a file system /init has mounted and writes the
//! measurements as JSON; on the host, `measurements` turns the guest's results back into the
//! rows `fs/report.rs` prints. As `sqlite/guest.rs` and `queries/guest.rs` are for theirs; the
//! guest machine itself (image, /init's words, the results disk) stays in `vm.rs`.
use super::workload::{IoMode, Measurement, MountedDevice, Plan, measure_on};
use crate::LabError;
use crate::vm::{GuestResults, InitWords};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct GuestFsArgs {
    /// File-system name for the report.
    #[arg(long)]
    pub fs_name: String,
    /// Where it is mounted.
    #[arg(long)]
    pub mount: PathBuf,
    /// Block device name for /sys/block/<name>/stat.
    #[arg(long)]
    pub device: String,
    #[arg(long)]
    pub quick: bool,
    #[arg(long)]
    pub repetitions: Option<usize>,
    #[arg(long)]
    pub only: Option<String>,
    #[arg(long, value_parser = ["buffered", "direct"])]
    pub io: Option<String>,
    /// Write the measurements (JSON array) here.
    #[arg(long)]
    pub json: PathBuf,
}

/// Inside the guest: run the plan on an already mounted file system.
pub fn run_guest_fs(args: &GuestFsArgs) -> Result<(), LabError> {
    let mut plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    plan.trace_sync = false;
    if let Some(r) = args.repetitions {
        plan.repetitions = r.max(1);
    }
    if let Some(io) = &args.io {
        plan.io_modes = vec![if io == "direct" {
            IoMode::Direct
        } else {
            IoMode::Buffered
        }];
    }
    let target = MountedDevice {
        fs_name: args.fs_name.clone(),
        mount_dir: args.mount.clone(),
        device_name: args.device.clone(),
    };
    let mut results = Vec::new();
    for workload in plan.workloads().iter().filter(|w| {
        args.only
            .as_ref()
            .is_none_or(|o| w.name().contains(o.as_str()))
    }) {
        eprintln!("guest: {} {}", args.fs_name, workload.name());
        results.push(measure_on(&target, workload, &plan)?);
    }
    let text = serde_json::to_string(&results).map_err(|e| LabError::Parse {
        what: "json".into(),
        detail: e.to_string(),
    })?;
    std::fs::write(&args.json, text).map_err(|e| LabError::io(&args.json, e))
}

/// Turns guest measurements back into typed rows for the report.
pub fn measurements(results: &GuestResults) -> Vec<Measurement> {
    results
        .file_systems
        .iter()
        .flat_map(|fs| {
            fs.measurements
                .iter()
                .filter_map(|m| measurement_from_json(m, &fs.fs))
        })
        .collect()
}

fn measurement_from_json(value: &serde_json::Value, fs: &str) -> Option<Measurement> {
    let f = |k: &str| {
        value
            .get(k)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(f64::NAN)
    };
    let spec = Plan::full()
        .workloads()
        .into_iter()
        .chain(Plan::quick().workloads())
        .find(|w| Some(w.name().as_str()) == value.get("workload").and_then(|v| v.as_str()))?;
    Some(Measurement {
        fs: format!("{fs} (guest)"),
        paper: value
            .get("paper")
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string(),
        workload: spec.name(),
        spec,
        repetitions: Vec::new(),
        ops_per_s_median: f("ops_per_s_median"),
        ops_per_s_min: f("ops_per_s_min"),
        ops_per_s_max: f("ops_per_s_max"),
        mb_per_s_median: f("mb_per_s_median"),
        device_writes_per_op: f("device_writes_per_op"),
        device_bytes_written_per_op: f("device_bytes_written_per_op"),
        device_flushes_per_op: f("device_flushes_per_op"),
        device_reads_per_op: f("device_reads_per_op"),
        latency_us: value
            .get("latency_us")
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_else(|| roamkv_testbed::stats::Percentiles::of(&[])),
        traced_per_op: None,
        error: value
            .get("error")
            .and_then(|v| v.as_str())
            .map(str::to_string),
    })
}

/// The file system the guest's /init mounted, as a workload target.
impl From<&InitWords> for MountedDevice {
    fn from(init: &InitWords) -> MountedDevice {
        MountedDevice {
            fs_name: init.fs_name.clone(),
            mount_dir: init.mount.clone(),
            device_name: init.device.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_init_words_name_the_mounted_target() {
        let words: Vec<String> = [
            "--fs-name",
            "vfat",
            "--mount",
            "/mnt",
            "--device",
            "vda",
            "--json",
            "/m.json",
        ]
        .map(String::from)
        .to_vec();
        let init = InitWords::parse(&words).expect("complete");
        let target = MountedDevice::from(&init);
        assert_eq!(target.device_name, "vda");
        assert_eq!(target.mount_dir, PathBuf::from("/mnt"));
        assert_eq!(target.fs_name, "vfat");
    }
}
