//! Running a helper program (mkfs, mount, losetup, ...) to completion.
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
