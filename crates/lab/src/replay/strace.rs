//! Turns the output of `strace -f -ttt -T -y -s 0 -qq` (Debian's strace 6.x) into portable
//! trace calls. Line shapes handled:
//!
//! ```text
//! 4242 1795424478.230914 pwrite64(3</r/t.db>, ""..., 4096, 0) = 4096 <0.000092>
//! 4242 1795424478.230458 openat(AT_FDCWD</r>, "t.db", O_RDWR|O_CREAT, 0644) = 3</r/t.db> <0.000226>
//! 4243 1795424478.240000 fdatasync(3</r/t.db> <unfinished ...>
//! 4243 1795424478.242000 <... fdatasync resumed>) = 0 <0.002000>
//! 4242 1795424478.250000 unlink("t.db-journal") = -1 ENOENT (No such file or directory) <0.000010>
//! ```
//!
//! `-y` prints the path behind every descriptor (`3</r/t.db>`), so each call names its file
//! without tracking descriptor tables; `-s 0` leaves data buffers out (paths are printed in full
//! whatever -s says). Failed calls, calls on files outside the root, and lines that are not
//! calls (signals, exits) are left out.
use super::format::{Call, Op, OpenFlag, Whence};
use std::collections::HashMap;

/// The system calls `lab record` asks strace for.
pub const TRACED_SYSCALLS: &str = "open,openat,creat,close,read,pread64,readv,preadv,write,pwrite64,writev,pwritev,lseek,fsync,fdatasync,ftruncate,truncate,fallocate,rename,renameat,renameat2,unlink,unlinkat,mkdir,mkdirat,rmdir";

/// One complete strace line, before it is mapped to a call.
#[derive(Debug, PartialEq)]
pub struct RawCall {
    pub pid: u32,
    pub time_s: f64,
    pub name: String,
    pub args: Vec<String>,
    /// The return value's text (e.g. "4096", "3</r/t.db>", "-1 ENOENT (...)").
    pub ret: String,
    pub dur_s: f64,
}

/// Parses strace output; `root` is the absolute directory the command ran in.
pub struct Parser {
    root: String,
    /// pid -> (time, text so far) of a call whose line said `<unfinished ...>`.
    unfinished: HashMap<u32, (f64, String)>,
    pub lines_skipped: u64,
}

impl Parser {
    pub fn new(root: &str) -> Parser {
        Parser {
            root: root.trim_end_matches('/').to_string(),
            unfinished: HashMap::new(),
            lines_skipped: 0,
        }
    }

    /// Feeds one line; returns a complete call when the line finishes one.
    pub fn line(&mut self, line: &str) -> Option<RawCall> {
        // strace pads the pid ("8961  1795425861.548594 ..."): split on runs of spaces.
        let (pid, rest) = line.trim().split_once(' ')?;
        let pid: u32 = pid.parse().ok()?;
        let (time_s, rest) = rest.trim_start().split_once(' ')?;
        let time_s: f64 = time_s.parse().ok()?;
        let rest = rest.trim_start();
        if let Some(head) = rest.strip_suffix("<unfinished ...>") {
            self.unfinished
                .insert(pid, (time_s, head.trim_end().to_string()));
            return None;
        }
        let (start_s, text) = if let Some(resumed) = rest.strip_prefix("<... ") {
            let (_, tail) = resumed.split_once("resumed>")?;
            let (start, head) = self.unfinished.remove(&pid)?;
            // "fdatasync(3</r/t.db>" + ") = 0 <0.002>"; a head ending in "(" or ", " joins as is.
            let joiner = if head.ends_with('(') || tail.starts_with(')') || tail.starts_with(',') {
                ""
            } else {
                ", "
            };
            (start, format!("{head}{joiner}{}", tail.trim_start()))
        } else {
            (time_s, rest.to_string())
        };
        parse_call_text(pid, start_s, &text)
    }

    /// Maps a raw call to a portable one (None: failed, outside the root, or not a file call).
    pub fn to_call(&self, raw: &RawCall, start_s: f64) -> Option<Call> {
        if raw.ret.starts_with('-') || raw.ret == "?" {
            return None; // failed (or never returned)
        }
        let t_us = ((raw.time_s - start_s).max(0.0) * 1e6).round() as u64;
        let dur_us = (raw.dur_s * 1e6).round() as u64;
        let mut call = Call::new(t_us, dur_us, raw.pid, Op::Open);
        match raw.name.as_str() {
            "open" | "openat" | "creat" => self.open_call(raw, &mut call)?,
            "truncate" | "rename" | "renameat" | "renameat2" | "unlink" | "rmdir" | "unlinkat"
            | "mkdir" | "mkdirat" => self.path_call(raw, &mut call)?,
            _ => self.descriptor_call(raw, &mut call)?,
        }
        call.validate().ok()?;
        Some(call)
    }

    /// open, openat, creat: the new descriptor and its path are in the return value.
    fn open_call(&self, raw: &RawCall, call: &mut Call) -> Option<()> {
        let (fd, path) = decorated(&raw.ret)?;
        call.fd = Some(fd);
        call.path = Some(self.relative(&path)?);
        call.flags = match raw.name.as_str() {
            "creat" => vec![OpenFlag::Wronly, OpenFlag::Create, OpenFlag::Trunc],
            "open" => open_flags(raw.args.get(1)?),
            _ => open_flags(raw.args.get(2)?),
        };
        Some(())
    }

    /// Calls on an open descriptor, its first argument (None: not a call the trace keeps).
    fn descriptor_call(&self, raw: &RawCall, call: &mut Call) -> Option<()> {
        let ret_number = || leading_number(&raw.ret);
        let arg_number = |i: usize| leading_number(raw.args.get(i)?);
        match raw.name.as_str() {
            "close" => call.op = Op::Close,
            "read" | "readv" | "write" | "writev" => {
                call.op = if raw.name.starts_with("read") {
                    Op::Read
                } else {
                    Op::Write
                };
                call.bytes = Some(ret_number()?);
            }
            "pread64" | "preadv" | "pwrite64" | "pwritev" => {
                call.op = if raw.name.starts_with("pread") {
                    Op::Pread
                } else {
                    Op::Pwrite
                };
                call.bytes = Some(ret_number()?);
                call.offset = Some(arg_number(3)?);
            }
            "lseek" => {
                // Stored as the absolute position it moved to (the return value).
                call.op = Op::Lseek;
                call.offset = Some(ret_number()?);
                call.whence = Some(Whence::Set);
            }
            "fsync" => call.op = Op::Fsync,
            "fdatasync" => call.op = Op::Fdatasync,
            "ftruncate" => {
                call.op = Op::Ftruncate;
                call.bytes = Some(arg_number(1)?);
            }
            "fallocate" => {
                call.op = Op::Fallocate;
                call.offset = Some(arg_number(2)?);
                call.bytes = Some(arg_number(3)?);
            }
            _ => return None,
        }
        let (fd, path) = decorated(raw.args.first()?)?;
        call.fd = Some(fd);
        call.path = Some(self.relative(&path)?);
        Some(())
    }

    /// Calls that name paths, resolved against their directory descriptors (`...at`) or the
    /// working directory.
    fn path_call(&self, raw: &RawCall, call: &mut Call) -> Option<()> {
        let arg = |i: usize| raw.args.get(i);
        match raw.name.as_str() {
            "truncate" => {
                call.op = Op::Truncate;
                call.path = Some(self.resolve(None, arg(0)?)?);
                call.bytes = Some(leading_number(arg(1)?)?);
            }
            "rename" => {
                call.op = Op::Rename;
                call.path = Some(self.resolve(None, arg(0)?)?);
                call.to = Some(self.resolve(None, arg(1)?)?);
            }
            "renameat" | "renameat2" => {
                call.op = Op::Rename;
                call.path = Some(self.resolve(arg(0), arg(1)?)?);
                call.to = Some(self.resolve(arg(2), arg(3)?)?);
            }
            "unlink" => {
                call.op = Op::Unlink;
                call.path = Some(self.resolve(None, arg(0)?)?);
            }
            "rmdir" => {
                call.op = Op::Rmdir;
                call.path = Some(self.resolve(None, arg(0)?)?);
            }
            "unlinkat" => {
                call.op = if arg(2).is_some_and(|f| f.contains("AT_REMOVEDIR")) {
                    Op::Rmdir
                } else {
                    Op::Unlink
                };
                call.path = Some(self.resolve(arg(0), arg(1)?)?);
            }
            "mkdir" => {
                call.op = Op::Mkdir;
                call.path = Some(self.resolve(None, arg(0)?)?);
            }
            "mkdirat" => {
                call.op = Op::Mkdir;
                call.path = Some(self.resolve(arg(0), arg(1)?)?);
            }
            _ => return None,
        }
        Some(())
    }

    /// An absolute path under the root, made relative to it ("." for the root itself: SQLite
    /// fsyncs the directory after it creates a journal).
    fn relative(&self, absolute: &str) -> Option<String> {
        let absolute = absolute.strip_suffix(" (deleted)").unwrap_or(absolute);
        let rest = absolute.strip_prefix(&self.root)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None; // "/r2/x" is not under "/r"
        }
        let normal = normalize(rest)?;
        Some(if normal.is_empty() {
            ".".to_string()
        } else {
            normal
        })
    }

    /// A path argument, relative to a decorated directory fd (`AT_FDCWD</r>`, `5</r/d>`) or, with
    /// no directory, to the root (the recorder runs the command there).
    fn resolve(&self, dir_arg: Option<&String>, path_arg: &str) -> Option<String> {
        let path = unquote(path_arg)?;
        if path.starts_with('/') {
            return self.relative(&path);
        }
        let dir = match dir_arg {
            Some(d) => decorated_dir(d)?,
            None => self.root.clone(),
        };
        self.relative(&format!("{dir}/{path}"))
    }
}

/// "a/./b//c" -> "a/b/c"; None if it climbs out with "..".
fn normalize(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            other => parts.push(other),
        }
    }
    Some(parts.join("/"))
}

/// "name(args) = ret <dur>" -> RawCall.
fn parse_call_text(pid: u32, time_s: f64, text: &str) -> Option<RawCall> {
    let text = text.trim_end();
    let (body, dur) = text.rsplit_once(" <")?;
    let dur_s: f64 = dur.strip_suffix('>')?.parse().ok()?;
    let (call, ret) = body.rsplit_once(") = ")?;
    let (name, args) = call.split_once('(')?;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    Some(RawCall {
        pid,
        time_s,
        name: name.to_string(),
        args: split_args(args),
        ret: ret.trim().to_string(),
        dur_s,
    })
}

/// Splits at top-level commas: not inside quotes, brackets, braces or `<...>` fd paths.
pub fn split_args(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut depth = 0i32;
    let mut in_string = false;
    let mut in_fd_path = false;
    let mut escaped = false;
    let mut previous = ' ';
    for c in text.chars() {
        if in_string {
            current.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if in_fd_path {
            current.push(c);
            if c == '>' {
                in_fd_path = false;
            }
        } else {
            match c {
                '"' => in_string = true,
                '<' if previous.is_ascii_alphanumeric() => in_fd_path = true,
                '[' | '{' | '(' => depth += 1,
                ']' | '}' | ')' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(current.trim().to_string());
                    current.clear();
                    previous = c;
                    continue;
                }
                _ => {}
            }
            current.push(c);
        }
        previous = c;
    }
    if !current.trim().is_empty() {
        out.push(current.trim().to_string());
    }
    out
}

/// `3</r/t.db>` -> (3, "/r/t.db").
fn decorated(text: &str) -> Option<(i32, String)> {
    let (fd, rest) = text.split_once('<')?;
    let fd: i32 = fd.trim().parse().ok()?;
    let path = rest.strip_suffix('>')?;
    path.starts_with('/').then(|| (fd, path.to_string()))
}

/// `AT_FDCWD</r>` or `5</r/d>` -> "/r/d".
fn decorated_dir(text: &str) -> Option<String> {
    let (_, rest) = text.split_once('<')?;
    let path = rest.strip_suffix('>')?;
    path.starts_with('/').then(|| path.to_string())
}

fn leading_number(text: &str) -> Option<u64> {
    let digits: String = text
        .trim()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// A C-escaped strace string `"a\"b"` -> `a"b` (None if not a complete string: a truncated path).
fn unquote(text: &str) -> Option<String> {
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = Vec::new();
    let mut chars = inner.bytes();
    while let Some(b) = chars.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        match chars.next()? {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'x' => {
                let hi = chars.next()?;
                let lo = chars.next()?;
                let hex = [hi, lo];
                let s = std::str::from_utf8(&hex).ok()?;
                out.push(u8::from_str_radix(s, 16).ok()?);
            }
            other => out.push(other),
        }
    }
    String::from_utf8(out).ok()
}

fn open_flags(text: &str) -> Vec<OpenFlag> {
    let mut flags = Vec::new();
    for f in text.split('|') {
        let flag = match f.trim() {
            "O_RDONLY" => OpenFlag::Rdonly,
            "O_WRONLY" => OpenFlag::Wronly,
            "O_RDWR" => OpenFlag::Rdwr,
            "O_CREAT" => OpenFlag::Create,
            "O_EXCL" => OpenFlag::Excl,
            "O_TRUNC" => OpenFlag::Trunc,
            "O_APPEND" => OpenFlag::Append,
            "O_DIRECTORY" => OpenFlag::Directory,
            _ => continue,
        };
        flags.push(flag);
    }
    flags
}

/// Parses a whole strace output file into calls ordered by start time.
pub fn calls_from_strace(text: &str, root: &str) -> (Vec<Call>, u64) {
    let mut parser = Parser::new(root);
    let mut raws = Vec::new();
    for line in text.lines() {
        match parser.line(line) {
            Some(raw) => raws.push(raw),
            None => parser.lines_skipped += 1,
        }
    }
    raws.sort_by(|a, b| a.time_s.total_cmp(&b.time_s));
    let mut calls = Vec::new();
    let mut start_s = None;
    for raw in &raws {
        // Time zero is the first call that is kept, so a trace starts at t_us 0.
        let probe = parser.to_call(raw, start_s.unwrap_or(raw.time_s));
        if let Some(call) = probe {
            start_s.get_or_insert(raw.time_s);
            calls.push(call);
        }
    }
    (calls, parser.lines_skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"13078 1795424478.230458 openat(AT_FDCWD</r>, "t.db", O_RDWR|O_CREAT|O_CLOEXEC, 0644) = 3</r/t.db> <0.000226>
13078 1795424478.230914 pwrite64(3</r/t.db>, ""..., 5000, 100) = 5000 <0.000092>
13078 1795424478.231109 write(3</r/t.db>, ""..., 5) = 5 <0.000051>
13079 1795424478.231200 fdatasync(3</r/t.db> <unfinished ...>
13078 1795424478.231256 read(4</usr/lib/x.so>, ""..., 832) = 832 <0.000010>
13079 1795424478.233300 <... fdatasync resumed>) = 0 <0.002100>
13078 1795424478.237728 ftruncate(3</r/t.db>, 10) = 0 <0.003871>
13078 1795424478.241741 lseek(3</r/t.db>, -2, SEEK_END) = 8 <0.000045>
13078 1795424478.241905 pread64(3</r/t.db>, ""..., 3, 4) = 3 <0.000047>
13078 1795424478.242000 unlink("t.db-journal") = -1 ENOENT (No such file or directory) <0.000010>
13078 1795424478.242058 close(3</r/t.db>) = 0 <0.000048>
13078 1795424478.242203 rename("t.db", "sub/b, c") = 0 <0.000084>
13078 1795424478.242300 renameat2(AT_FDCWD</r>, "sub/b, c", 5</r/sub>, "../d", RENAME_NOREPLACE) = 0 <0.000050>
13078 1795424478.242380 unlinkat(AT_FDCWD</r>, "d", 0) = 0 <0.003242>
13078 1795424478.242400 mkdir("/r/dir", 0755) = 0 <0.000020>
13078 1795424478.242500 unlinkat(5</r/sub>, "x", AT_REMOVEDIR) = 0 <0.000020>
13078 1795424478.242600 write(1<pipe:[77]>, ""..., 5) = 5 <0.000020>
13078 1795424478.242700 --- SIGCHLD {si_signo=SIGCHLD} ---
13078 1795424478.242800 fallocate(3</r/t.db>, 0, 0, 65536) = 0 <0.000400>
8961  1795424478.242900 openat(AT_FDCWD</r>, "/r", O_RDONLY|O_CLOEXEC) = 5</r> <0.000017>
8961  1795424478.243000 fsync(5</r>) = 0 <0.000300>
8961  1795424478.243100 write(6</r2/x>, ""..., 5) = 5 <0.000020>
"#;

    #[test]
    fn parses_every_line_shape() {
        let (calls, skipped) = calls_from_strace(SAMPLE, "/r");
        let ops: Vec<&str> = calls.iter().map(|c| c.op.name()).collect();
        assert_eq!(
            ops,
            [
                "open",
                "pwrite",
                "write",
                "fdatasync",
                "ftruncate",
                "lseek",
                "pread",
                "close",
                "rename",
                "rename",
                "unlink",
                "mkdir",
                "rmdir",
                "fallocate",
                "open",
                "fsync"
            ]
        );
        assert_eq!(calls[0].t_us, 0);
        assert_eq!(calls[0].path.as_deref(), Some("t.db"));
        assert_eq!(calls[0].flags, vec![OpenFlag::Rdwr, OpenFlag::Create]);
        assert_eq!((calls[1].bytes, calls[1].offset), (Some(5000), Some(100)));
        // The resumed fdatasync keeps its start time and its own duration.
        assert_eq!(calls[3].pid, 13079);
        assert_eq!(calls[3].t_us, 742);
        assert_eq!(calls[3].dur_us, 2100);
        assert_eq!(
            (calls[5].offset, calls[5].whence),
            (Some(8), Some(Whence::Set))
        );
        assert_eq!(calls[8].to.as_deref(), Some("sub/b, c"));
        assert_eq!(calls[9].path.as_deref(), Some("sub/b, c"));
        assert_eq!(calls[9].to.as_deref(), Some("d"));
        assert_eq!(calls[11].path.as_deref(), Some("dir"));
        assert_eq!(calls[12].path.as_deref(), Some("sub/x"));
        assert_eq!((calls[13].offset, calls[13].bytes), (Some(0), Some(65536)));
        // A padded pid; the root directory itself is ".", a sibling directory is outside.
        assert_eq!(calls[14].pid, 8961);
        assert_eq!(calls[15].path.as_deref(), Some("."));
        // The unfinished line and the signal line are not calls by themselves.
        assert_eq!(skipped, 2);
    }

    #[test]
    fn splits_arguments_at_top_level_commas_only() {
        assert_eq!(
            split_args(r#"3</a,b>, "x, \"y\"", [{iov_base=""..., iov_len=5}, {iov_len=2}], 2"#),
            vec![
                "3</a,b>",
                r#""x, \"y\"""#,
                r#"[{iov_base=""..., iov_len=5}, {iov_len=2}]"#,
                "2"
            ]
        );
    }

    #[test]
    fn garbage_lines_are_skipped_not_fatal() {
        let (calls, skipped) = calls_from_strace(
            "hello\n12 x y\n12 1.0 write(\n12 1.0 <... write resumed>) = 1 <0.1>\n",
            "/r",
        );
        assert!(calls.is_empty());
        assert_eq!(skipped, 4);
    }

    #[test]
    fn unquotes_escapes_and_refuses_truncated_paths() {
        assert_eq!(unquote(r#""a\"b\x41\n""#).as_deref(), Some("a\"bA\n"));
        assert_eq!(unquote(r#""abc"..."#), None);
        assert_eq!(normalize("a/./b//c/../d"), Some("a/b/d".into()));
        assert_eq!(normalize("../x"), None);
    }
}
