//! `roamkv backup` and `roamkv restore` (docs/SERVER.md, "Backup and restore"): a
//! consistent copy of a data directory into a backup set, from a running server (`--server`,
//! the tar stream of `POST /api/roamkv/v1/backup`) or from a directory no server runs on
//! (`--data`); the check of a set (`--verify`); a backup back into a new data directory.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use roamkv_engine::background::Pace;
use roamkv_engine::backup::{self, BackupSet, Linked, Manifest};
use serde_json::json;

use crate::reads::{Access, open_existing};
use crate::remote::{Remote, RemoteArgs};

#[derive(Args, Debug)]
pub struct BackupArgs {
    /// The data directory to back up when no server runs on it (while `roamkv serve` runs on
    /// it, give --server instead: the copy is taken while ingest goes on).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["server", "verify"])]
    pub data: Option<PathBuf>,
    #[command(flatten)]
    pub remote: RemoteArgs,
    /// The backup set to add the backup to: made if it does not exist or is empty; a later
    /// backup of the same data directory copies only what the set does not hold yet.
    #[arg(long, value_name = "DIR", conflicts_with = "verify")]
    pub to: Option<PathBuf>,
    /// Check every backup of this set against its manifest instead (exit 1 if any is partial
    /// or damaged).
    #[arg(long, value_name = "DIR")]
    pub verify: Option<PathBuf>,
    /// With --data: read the directory at most this many MiB/s (0: no limit). With --server
    /// the server's --backup-rate-mib applies.
    #[arg(long, value_name = "MIB", default_value_t = 0, requires = "data")]
    pub rate_mib: u64,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// The backup set.
    #[arg(long, value_name = "DIR")]
    pub from: PathBuf,
    /// The backup to restore (default: the newest complete one).
    #[arg(long, value_name = "N")]
    pub backup: Option<u64>,
    /// The data directory to make: it must not exist or be empty (a restore never overwrites).
    #[arg(long, value_name = "DIR")]
    pub to: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What a backup copies: a running server's directory, or one opened here.
enum Source {
    Server(Remote),
    Directory(roamkv_engine::Engine),
}

pub fn run(args: &BackupArgs) -> Result<ExitCode, String> {
    if let Some(set) = &args.verify {
        return verify(set, args.json);
    }
    let to = args
        .to
        .as_deref()
        .ok_or("give --to DIR (the backup set), or --verify DIR")?;
    let started = Instant::now();
    // A backup is background work: this process (and the engine threads it starts) yields the
    // CPU and the disk to a server's ingest on the same machine.
    if let Err(e) = roamkv_engine::background::lower_this_thread() {
        eprintln!("backup: at normal priority ({e})");
    }
    // The source is checked before the set is touched: bad input changes nothing.
    let source = match (Remote::from_args(&args.remote)?, args.data.as_deref()) {
        (Some(remote), _) => Source::Server(remote),
        (None, Some(data)) => Source::Directory(open_existing(data, Access::Write)?),
        (None, None) => {
            return Err("give --data DIR or --server URL (the directory to back up)".into());
        }
    };
    let made_here = !to.join(backup::SET_IDENTITY_FILE).exists();
    let was_missing = !to.exists();
    let set = BackupSet::open_or_create(to).map_err(|e| e.to_string())?;
    let outcome = match source {
        Source::Server(remote) => from_server(&remote, &set),
        Source::Directory(engine) => from_directory(engine, &set, args.rate_mib),
    };
    let (manifest, linked) = match outcome {
        Ok(stored) => stored,
        Err(e) => {
            if made_here {
                // Nothing was backed up into a set made for it: it goes, as it was.
                let _ = std::fs::remove_dir_all(to);
                if !was_missing {
                    let _ = std::fs::create_dir_all(to);
                }
            }
            return Err(e);
        }
    };
    report(
        &set,
        &manifest,
        linked,
        started.elapsed().as_secs_f64(),
        args.json,
    );
    Ok(ExitCode::SUCCESS)
}

/// A backup streamed from a running server. A refusal before the stream began leaves no
/// trace of the backup; a stream cut short leaves it partial (removed by the next backup).
/// Across the network every file sent is copied: nothing is linked.
fn from_server(remote: &Remote, set: &BackupSet) -> Result<(Manifest, Linked), String> {
    let writer = set.begin().map_err(|e| e.to_string())?;
    let have = serde_json::to_value(writer.have()).map_err(|e| e.to_string())?;
    let mut answer = match remote.post_streaming("/backup", &have) {
        Ok(answer) => answer,
        Err(e) => {
            let _ = writer.abandon();
            return Err(e);
        }
    };
    backup::read_tar(&mut answer, writer)
        .map(|manifest| (manifest, Linked::default()))
        .map_err(|e| format!("{} (from {}): {e}", set.path.display(), remote.base))
}

/// A backup of a directory no server runs on, through the engine opened on it: its table
/// files hard-linked when the set is on the same file system.
fn from_directory(
    engine: roamkv_engine::Engine,
    set: &BackupSet,
    rate_mib: u64,
) -> Result<(Manifest, Linked), String> {
    let mut snapshot = engine.snapshot(&["server"]).map_err(|e| e.to_string())?;
    let rate = rate_mib
        .checked_mul(1 << 20)
        .ok_or("--rate-mib is too large")?;
    snapshot.set_pace(std::sync::Arc::new(Pace::new(rate)));
    let stored = backup::to_set(&snapshot, set).map_err(|e| e.to_string())?;
    drop(snapshot);
    engine.close().map_err(|e| e.to_string())?;
    Ok((stored.manifest, stored.linked))
}

/// `bytes_copied` is what this backup stored (copied, or hard-linked: `linked`).
fn report(set: &BackupSet, manifest: &Manifest, linked: Linked, seconds: f64, as_json: bool) {
    let mib = |b: u64| b as f64 / 1_048_576.0;
    if as_json {
        println!(
            "{}",
            json!({
                "set": set.path, "backup": manifest.backup, "position": manifest.position,
                "files": manifest.files.len(), "bytes": manifest.bytes,
                "bytes_copied": manifest.bytes_copied, "bytes_linked": linked.bytes,
                "files_linked": linked.files, "seconds": seconds,
            })
        );
        return;
    }
    println!(
        "backup {} in {}: {} files, {:.1} MiB ({:.1} MiB stored, of them {:.1} MiB in {} table \
         files hard-linked; the rest already in the set)",
        manifest.backup,
        set.path.display(),
        manifest.files.len(),
        mib(manifest.bytes),
        mib(manifest.bytes_copied),
        mib(linked.bytes),
        linked.files,
    );
    println!(
        "position {} (every write acknowledged before the backup began is in it)",
        manifest.position
    );
    println!(
        "{seconds:.2} s, {:.0} MiB/s stored",
        mib(manifest.bytes_copied) / seconds.max(1e-9)
    );
}

fn verify(path: &std::path::Path, as_json: bool) -> Result<ExitCode, String> {
    let set = BackupSet::open(path).map_err(|e| e.to_string())?;
    let verified = backup::verify(&set).map_err(|e| e.to_string())?;
    let mut bad = 0;
    let mut rows = Vec::new();
    for v in &verified {
        match &v.outcome {
            Ok(m) => {
                rows.push(json!({"backup": v.backup, "ok": true, "files": m.files.len(), "bytes": m.bytes, "position": m.position}));
                if !as_json {
                    println!(
                        "backup {}: ok ({} files, {} bytes, position {})",
                        v.backup,
                        m.files.len(),
                        m.bytes,
                        m.position
                    );
                }
            }
            Err(e) => {
                bad += 1;
                rows.push(json!({"backup": v.backup, "ok": false, "error": e.to_string()}));
                if !as_json {
                    println!("backup {}: BAD: {e}", v.backup);
                }
            }
        }
    }
    if as_json {
        println!("{}", json!({"set": set.path, "backups": rows}));
    } else if verified.is_empty() {
        println!("{} holds no backup", set.path.display());
    }
    Ok(if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub fn restore(args: &RestoreArgs) -> Result<(), String> {
    let set = BackupSet::open(&args.from).map_err(|e| e.to_string())?;
    let restored = backup::restore(&set, args.backup, &args.to).map_err(|e| e.to_string())?;
    if args.json {
        println!(
            "{}",
            json!({
                "backup": restored.backup, "to": args.to, "position": restored.position,
                "files": restored.files, "bytes": restored.bytes, "ms": restored.elapsed_ms,
            })
        );
    } else {
        println!(
            "restored backup {} of {} into {}: {} files, {} bytes, {} ms",
            restored.backup,
            set.path.display(),
            args.to.display(),
            restored.files,
            restored.bytes,
            restored.elapsed_ms
        );
        println!(
            "position {}; the directory is a new history of the log (the change feed and the \
             cloud sink start a new generation)",
            restored.position
        );
    }
    Ok(())
}
