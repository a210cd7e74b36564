//! The portable syscall trace (docs/LAB.md, "Syscall record and replay"): JSON Lines, one header
//! object, then one object per file call in the order the calls started.
//!
//! ```text
//! {"format":"roamkv-syscall-trace","version":1,"command":"sqlite3 t.db ...","root":"/tmp/x",
//!  "recorded_at":"2026-11-23T09:00:00Z","kernel":"6.18.44","calls":1234,
//!  "final_files":{"t.db":8192,"t.db-journal":0}}
//! {"t_us":0,"dur_us":31,"pid":4242,"op":"open","path":"t.db","fd":3,"flags":["rdwr","create"]}
//! {"t_us":52,"dur_us":9,"pid":4242,"op":"pwrite","path":"t.db","fd":3,"bytes":4096,"offset":0}
//! {"t_us":70,"dur_us":2150,"pid":4242,"op":"fdatasync","path":"t.db","fd":3}
//! ```
//!
//! Paths are relative to `root` (the directory the command ran in); calls on files outside it
//! (libraries, /etc, /proc, terminals) are not recorded, nor are failed calls. `t_us` counts from
//! the first recorded call; `dur_us` is the time the call took (strace -T). `bytes` is what the
//! call really transferred (its return value), so a short read replays short. Data is not
//! recorded: a replay writes a fixed pattern of the same size at the same place.
use crate::LabError;
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;

pub const FORMAT_NAME: &str = "roamkv-syscall-trace";
pub const FORMAT_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Header {
    pub format: String,
    pub version: u32,
    pub command: String,
    pub root: String,
    pub recorded_at: String,
    pub kernel: String,
    pub calls: u64,
    /// Size of every regular file under root when the command ended (relative path -> bytes).
    pub final_files: BTreeMap<String, u64>,
}

/// One file call. `op` names it; the other fields are present where the call has them.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Call {
    pub t_us: u64,
    pub dur_us: u64,
    pub pid: u32,
    pub op: Op,
    /// The file (open/read/write/sync/truncate...) or the first path (rename, unlink, mkdir).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// rename's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fd: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<OpenFlag>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// lseek's whence: set, cur, end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub whence: Option<Whence>,
}

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Open,
    Close,
    Read,
    Pread,
    Write,
    Pwrite,
    Lseek,
    Fsync,
    Fdatasync,
    Ftruncate,
    Truncate,
    Fallocate,
    Rename,
    Unlink,
    Mkdir,
    Rmdir,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Open => "open",
            Op::Close => "close",
            Op::Read => "read",
            Op::Pread => "pread",
            Op::Write => "write",
            Op::Pwrite => "pwrite",
            Op::Lseek => "lseek",
            Op::Fsync => "fsync",
            Op::Fdatasync => "fdatasync",
            Op::Ftruncate => "ftruncate",
            Op::Truncate => "truncate",
            Op::Fallocate => "fallocate",
            Op::Rename => "rename",
            Op::Unlink => "unlink",
            Op::Mkdir => "mkdir",
            Op::Rmdir => "rmdir",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpenFlag {
    Rdonly,
    Wronly,
    Rdwr,
    Create,
    Excl,
    Trunc,
    Append,
    Directory,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Whence {
    Set,
    Cur,
    End,
}

impl Call {
    /// A call with only the common fields set.
    pub fn new(t_us: u64, dur_us: u64, pid: u32, op: Op) -> Call {
        Call {
            t_us,
            dur_us,
            pid,
            op,
            path: None,
            to: None,
            fd: None,
            flags: Vec::new(),
            bytes: None,
            offset: None,
            whence: None,
        }
    }

    /// The fields this op needs are present, and paths stay inside the root.
    pub fn validate(&self) -> Result<(), String> {
        let need = |present: bool, field: &str| {
            if present {
                Ok(())
            } else {
                Err(format!("{} without {field}", self.op.name()))
            }
        };
        need(self.path.is_some(), "path")?;
        for p in [&self.path, &self.to].into_iter().flatten() {
            if p.starts_with('/') || p.split('/').any(|c| c == "..") {
                return Err(format!("path {p:?} leaves the replay root"));
            }
        }
        match self.op {
            Op::Open => need(self.fd.is_some(), "fd"),
            Op::Read | Op::Write => need(self.fd.is_some() && self.bytes.is_some(), "fd and bytes"),
            Op::Pread | Op::Pwrite | Op::Fallocate => need(
                self.fd.is_some() && self.bytes.is_some() && self.offset.is_some(),
                "fd, bytes and offset",
            ),
            Op::Lseek => need(
                self.fd.is_some() && self.offset.is_some() && self.whence.is_some(),
                "fd, offset and whence",
            ),
            Op::Ftruncate => need(self.fd.is_some() && self.bytes.is_some(), "fd and bytes"),
            Op::Truncate => need(self.bytes.is_some(), "bytes"),
            Op::Rename => need(self.to.is_some(), "to"),
            Op::Close | Op::Fsync | Op::Fdatasync => need(self.fd.is_some(), "fd"),
            Op::Unlink | Op::Mkdir | Op::Rmdir => Ok(()),
        }
    }
}

/// A whole trace in memory.
#[derive(Clone, Debug, PartialEq)]
pub struct SyscallTrace {
    pub header: Header,
    pub calls: Vec<Call>,
}

impl SyscallTrace {
    pub fn write_to(&self, path: &Path) -> Result<(), LabError> {
        let file = std::fs::File::create(path).map_err(|e| LabError::io(path, e))?;
        let mut out = std::io::BufWriter::new(file);
        let json_err = |e: serde_json::Error| LabError::Parse {
            what: "trace".into(),
            detail: e.to_string(),
        };
        serde_json::to_writer(&mut out, &self.header).map_err(json_err)?;
        out.write_all(b"\n").map_err(|e| LabError::io(path, e))?;
        for call in &self.calls {
            serde_json::to_writer(&mut out, call).map_err(json_err)?;
            out.write_all(b"\n").map_err(|e| LabError::io(path, e))?;
        }
        out.flush().map_err(|e| LabError::io(path, e))
    }

    /// Reads and checks a trace; errors name the line.
    pub fn read_from(path: &Path) -> Result<SyscallTrace, LabError> {
        let file = std::fs::File::open(path).map_err(|e| LabError::io(path, e))?;
        SyscallTrace::parse(std::io::BufReader::new(file), &path.display().to_string())
    }

    pub fn parse(reader: impl BufRead, name: &str) -> Result<SyscallTrace, LabError> {
        let bad = |line: usize, detail: String| LabError::Parse {
            what: format!("{name} line {line}"),
            detail,
        };
        let mut lines = reader.lines().enumerate();
        let header_line = match lines.next() {
            Some((_, Ok(l))) => l,
            Some((_, Err(e))) => return Err(bad(1, e.to_string())),
            None => return Err(bad(1, "empty file".into())),
        };
        let header: Header =
            serde_json::from_str(&header_line).map_err(|e| bad(1, e.to_string()))?;
        if header.format != FORMAT_NAME || header.version != FORMAT_VERSION {
            return Err(bad(
                1,
                format!(
                    "not a {FORMAT_NAME} version {FORMAT_VERSION} header (format {:?}, version {})",
                    header.format, header.version
                ),
            ));
        }
        let mut calls = Vec::new();
        for (i, line) in lines {
            let line = line.map_err(|e| bad(i + 1, e.to_string()))?;
            if line.trim().is_empty() {
                continue;
            }
            let call: Call = serde_json::from_str(&line).map_err(|e| bad(i + 1, e.to_string()))?;
            call.validate().map_err(|e| bad(i + 1, e))?;
            calls.push(call);
        }
        if calls.len() as u64 != header.calls {
            return Err(bad(
                1,
                format!(
                    "header says {} calls, the file has {}",
                    header.calls,
                    calls.len()
                ),
            ));
        }
        Ok(SyscallTrace { header, calls })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SyscallTrace {
        let mut open = Call::new(0, 31, 7, Op::Open);
        open.path = Some("t.db".into());
        open.fd = Some(3);
        open.flags = vec![OpenFlag::Rdwr, OpenFlag::Create];
        let mut write = Call::new(52, 9, 7, Op::Pwrite);
        write.path = Some("t.db".into());
        write.fd = Some(3);
        write.bytes = Some(4096);
        write.offset = Some(0);
        let calls = vec![open, write];
        SyscallTrace {
            header: Header {
                format: FORMAT_NAME.into(),
                version: FORMAT_VERSION,
                command: "x".into(),
                root: "/tmp/r".into(),
                recorded_at: "2026-11-23T09:00:00Z".into(),
                kernel: "6".into(),
                calls: calls.len() as u64,
                final_files: BTreeMap::from([("t.db".to_string(), 4096)]),
            },
            calls,
        }
    }

    #[test]
    fn round_trips_through_a_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("t.jsonl");
        let trace = sample();
        trace.write_to(&path).expect("write");
        let back = SyscallTrace::read_from(&path).expect("read");
        assert_eq!(back, trace);
        let text = std::fs::read_to_string(&path).expect("text");
        assert!(
            text.lines()
                .nth(2)
                .is_some_and(|l| l.contains("\"op\":\"pwrite\""))
        );
    }

    #[test]
    fn rejects_bad_traces_with_the_line() {
        let ok = {
            let mut buf = Vec::new();
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join("t.jsonl");
            sample().write_to(&path).expect("write");
            buf.extend(std::fs::read(&path).expect("read"));
            String::from_utf8(buf).expect("utf8")
        };
        let parse = |text: &str| {
            SyscallTrace::parse(text.as_bytes(), "t")
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(parse("").contains("empty"));
        assert!(parse(&ok.replace("roamkv-syscall-trace", "other")).contains("line 1"));
        assert!(parse(&ok.replace("\"offset\":0", "")).contains("line 3"));
        assert!(
            parse(&ok.replace("\"t.db\",\"fd\":3,\"bytes\"", "\"../x\",\"fd\":3,\"bytes\""))
                .contains("leaves")
        );
        assert!(parse(&ok.replace("\"calls\":2", "\"calls\":3")).contains("header says 3"));
        assert!(parse(&format!("{ok}{{\"op\":\"explode\"}}\n")).contains("line 4"));
    }
}
