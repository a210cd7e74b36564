//! Integration test on real loop devices: ext4 and XFS, a tiny workload, and a traced
//! 4 KiB write + fsync whose journal writes must be found. Needs root, losetup, mkfs and tracefs:
//! without them it fails, or skips with ROAMKV_ALLOW_SKIP=1 (`roamkv_testbed::prerequisite`).
use roamkv_lab::LabError;
use roamkv_lab::fs::workload::{IoMode, Pattern, Plan, SyncCall, SyncTarget, Workload, measure};
use roamkv_lab::trace::{Kind, Tracer, tracefs_available};
use roamkv_testbed::fixture::{Fixture, FsSpec};
use roamkv_testbed::prerequisite::{require_root, require_tool};
use std::io::Write;

fn missing_prerequisite() -> Option<String> {
    if let Err(e) = require_root() {
        return Some(e.to_string());
    }
    for (tool, package) in [
        ("losetup", "mount"),
        ("mke2fs", "e2fsprogs"),
        ("mkfs.xfs", "xfsprogs"),
        ("debugfs", "e2fsprogs"),
        ("xfs_db", "xfsprogs"),
    ] {
        if let Err(e) = require_tool(tool, package) {
            return Some(e.to_string());
        }
    }
    if !std::path::Path::new("/dev/loop-control").exists() {
        return Some("no /dev/loop-control (loop devices unavailable)".into());
    }
    if !tracefs_available() {
        return Some("tracefs with block events unavailable".into());
    }
    None
}

#[test]
fn ext4_and_xfs_tiny_workload_and_traced_fsync_finds_journal_writes() {
    if let Some(reason) = missing_prerequisite() {
        roamkv_testbed::prerequisite::unmet(
            "ext4_and_xfs_tiny_workload_and_traced_fsync_finds_journal_writes",
            &reason,
        );
        return;
    }
    let plan = Plan {
        repetitions: 1,
        ops_max: 64,
        sync_ops: 8,
        ..Plan::quick()
    };
    for spec in [FsSpec::Ext4, FsSpec::Xfs] {
        let fixture = Fixture::create(spec, 300 << 20).expect("make fixture");
        assert!(
            fixture
                .mkfs_command()
                .contains(fixture.device().to_str().expect("utf-8 path"))
        );
        // A mounted device is refused even with confirmation (and nothing is formatted).
        match Fixture::create_on_device(spec, fixture.device(), true) {
            Err(LabError::DeviceBusy(dev)) => assert_eq!(dev, fixture.device()),
            Err(other) => panic!("{spec}: expected DeviceBusy, got {other}"),
            Ok(_) => panic!("{spec}: formatted a mounted device"),
        }
        let seq = Workload::Transfer {
            pattern: Pattern::SeqWrite,
            block_bytes: 65536,
            file_bytes: 1 << 20,
            io: IoMode::Direct,
        };
        let m = measure(&fixture, &seq, &plan).expect("measure seq write");
        assert!(m.error.is_none(), "{spec}: {:?}", m.error);
        assert!(m.device_bytes_written_per_op >= 65536.0, "{spec}: {m:?}");
        let sync = Workload::SyncWrite {
            call: SyncCall::Fsync,
            random: false,
            target: SyncTarget::Overwrite,
            io: IoMode::Buffered,
            ops: 8,
        };
        let m = measure(&fixture, &sync, &plan).expect("measure fsync");
        assert!(m.error.is_none(), "{spec}: {:?}", m.error);
        assert!(
            m.device_writes_per_op >= 1.0 && m.device_flushes_per_op >= 1.0,
            "{spec}: {m:?}"
        );

        // Traced: create a file, then one 4 KiB write + fsync.
        fixture.quiesce().expect("quiesce");
        let tracer = Tracer::start(&fixture).expect("start tracer");
        let path = fixture.mount_dir().join("traced");
        let mut file = std::fs::File::create(&path).expect("create");
        file.write_all(&[7u8; 4096]).expect("write");
        file.sync_all().expect("fsync");
        drop(file);
        let trace = tracer.stop(&fixture).expect("stop tracer");
        assert!(
            trace.summary.by_kind.fs_journal.writes >= 1,
            "{spec}: no journal write in {:?}",
            trace.summary
        );
        assert_eq!(
            trace.summary.by_file.get("traced").map(|c| c.bytes),
            Some(4096),
            "{spec}: {:?}",
            trace.summary
        );
        assert!(trace.summary.flushes >= 1, "{spec}");
        assert!(trace.requests.iter().any(|r| r.kind == Kind::Data));
        let work_dir = fixture
            .mount_dir()
            .parent()
            .expect("mount dir is inside the work dir")
            .to_path_buf();
        drop(fixture);
        let attached = std::process::Command::new("losetup")
            .arg("-a")
            .output()
            .expect("losetup -a");
        let listing = String::from_utf8_lossy(&attached.stdout);
        // Other processes may reuse the loop device number; look for our image path instead.
        assert!(
            !listing.contains(work_dir.to_str().expect("utf-8 path")),
            "{spec}: image still attached: {listing}"
        );
        assert!(!work_dir.exists(), "{spec}: work dir not removed");
    }
}
