//! Running a helper program (mkfs, mount, losetup, ...) to completion, and what a process cost.
use crate::error::Error;
use std::process::Command;

/// Runs a command to completion; non-zero exit becomes `CommandFailed` with its stderr.
pub fn run_command(args: &[&str]) -> Result<String, Error> {
    let (program, rest) = args
        .split_first()
        .ok_or_else(|| Error::Unsupported("empty command".into()))?;
    let output = Command::new(program)
        .args(rest)
        .output()
        .map_err(|e| Error::io(*program, e))?;
    if !output.status.success() {
        return Err(Error::CommandFailed {
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

/// utime + stime of a process, from /proc/PID/stat (0 if it cannot be read).
pub fn process_cpu_seconds(stat_path: &str) -> f64 {
    let Ok(text) = std::fs::read_to_string(stat_path) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces, inside parentheses).
    let Some(rest) = text.rsplit_once(')').map(|(_, rest)| rest) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the line; `rest` starts at field 3.
    // SAFETY: sysconf only reads a system constant.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(11) + ticks(12)) as f64 / per_second
}
