//! `roamkv lab ...`: the command line of the I/O lab and its dispatch. Each command lives in its
//! own module or folder (`fs`, `trace::command`, `sqlite`, `queries`, `commit`, `replay`,
//! `stack`), with its arguments, its run and its report.
use crate::fs::FsArgs;
use crate::trace::command::TraceArgs;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct LabArgs {
    #[command(subcommand)]
    pub command: LabCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum LabCommand {
    /// File workloads of papers 001 and 004 on file systems made on loop devices.
    Fs(FsArgs),
    /// Run a command on a fresh file system and name every block request it causes.
    Trace(TraceArgs),
    /// SQLite transactions per journal mode and sync call on the lab's file systems, every block
    /// write traced and named (paper 004).
    Sqlite(crate::sqlite::SqliteArgs),
    /// SQLite search queries per file system, warm and cold cache (paper 000), and the same
    /// questions on sensor data asked of roamkv and SQLite; `--vm` runs them in the guest
    /// (FAT, exFAT, F2FS).
    Queries(crate::queries::guest::QueriesCommand),
    /// Paper 003's redo-log experiment: concurrent insert+commit sessions on PostgreSQL, SQLite
    /// and roamkv, log on a fast and on a slow (HDD-like) device.
    Commit(crate::commit::CommitArgs),
    /// Run a command under strace and write a portable trace of its file calls.
    Record(crate::replay::RecordArgs),
    /// Replay a recorded trace on lab file systems, block tracer on.
    Replay(crate::replay::ReplayArgs),
    /// Paper 004's I/O stack table: SQLite inserts/s from the stock stack through each fix.
    Stack(crate::stack::StackArgs),
    /// Internal: runs the SQLite lab inside the --vm guest.
    #[command(hide = true)]
    GuestSqlite(crate::sqlite::guest::GuestSqliteArgs),
    /// Internal: runs paper 004's stack steps inside the --vm guest.
    #[command(hide = true)]
    GuestStack(crate::stack::GuestStackArgs),
    /// Internal: runs the queries lab inside the --vm guest.
    #[command(hide = true)]
    GuestQueries(crate::queries::guest::GuestQueriesArgs),
    /// Internal: runs inside the --vm guest.
    #[command(hide = true)]
    GuestFs(crate::fs::guest::GuestFsArgs),
}

pub fn run(args: &LabArgs) -> ExitCode {
    let result = match &args.command {
        LabCommand::Fs(a) => crate::fs::run_fs(a),
        LabCommand::Trace(a) => crate::trace::command::run_trace(a),
        LabCommand::Sqlite(a) => return crate::sqlite::guest::run_sqlite(a),
        LabCommand::Queries(a) => return crate::queries::guest::run_queries(a),
        LabCommand::Commit(a) => return crate::commit::run(a),
        LabCommand::Record(a) => return crate::replay::run_record(a),
        LabCommand::Replay(a) => return crate::replay::run_replay(a),
        LabCommand::Stack(a) => return crate::stack::run(a),
        LabCommand::GuestSqlite(a) => return crate::sqlite::guest::run_guest_sqlite(a),
        LabCommand::GuestStack(a) => return crate::stack::run_guest_stack(a),
        LabCommand::GuestQueries(a) => return crate::queries::guest::run_guest_queries(a),
        LabCommand::GuestFs(a) => crate::fs::guest::run_guest_fs(a).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("roamkv lab: error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::path::PathBuf;

    #[derive(clap::Parser, Debug)]
    struct Wrapper {
        #[command(flatten)]
        lab: LabArgs,
    }

    #[test]
    fn parses_trace_with_trailing_command() {
        let w = Wrapper::try_parse_from([
            "x",
            "trace",
            "--fs",
            "xfs",
            "--setup",
            "touch a",
            "--",
            "dd",
            "if=/dev/zero",
            "of=a",
            "--weird",
        ]);
        let w = w.expect("valid command line");
        match w.lab.command {
            LabCommand::Trace(t) => {
                assert_eq!(t.fs, "xfs");
                assert_eq!(t.setup.as_deref(), Some("touch a"));
                assert_eq!(t.command, vec!["dd", "if=/dev/zero", "of=a", "--weird"]);
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn trace_needs_a_command() {
        assert!(Wrapper::try_parse_from(["x", "trace", "--fs", "ext4"]).is_err());
    }

    #[test]
    fn parses_fs_options() {
        let w =
            Wrapper::try_parse_from(["x", "fs", "--quick", "--fs", "ext4,xfs", "--out", "/tmp/o"])
                .expect("valid");
        match w.lab.command {
            LabCommand::Fs(f) => {
                assert!(f.quick);
                assert_eq!(f.fs.as_deref(), Some("ext4,xfs"));
                assert_eq!(f.out, PathBuf::from("/tmp/o"));
            }
            other => panic!("parsed as {other:?}"),
        }
        assert!(Wrapper::try_parse_from(["x", "fs", "--io", "mmap"]).is_err());
    }

    #[test]
    fn unknown_fs_in_fs_command_is_an_error_listing_names() {
        let args = FsArgs {
            quick: true,
            fs: Some("ext4,reiserfs".into()),
            out: PathBuf::from("/nonexistent"),
            repetitions: None,
            only: None,
            io: None,
            device: None,
            no_trace: true,
            vm: false,
            vm_memory_mib: 1024,
            i_mean_it: false,
        };
        let err = crate::fs::run_fs(&args)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("reiserfs") && err.contains("ext4-writeback"),
            "{err}"
        );
    }
}
