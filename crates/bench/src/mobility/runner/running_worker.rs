//! The worker child process (`roamkv bench worker`) seen from the parent: spawned, placed in its
//! memory cgroup, then let go; its output read until it exits, its result or why it failed.
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::cgroup::MemoryCgroup;
use crate::error::{BenchError, Result};
use crate::mobility::worker::{WorkerResult, WorkerSpec};

/// A worker child process (`roamkv bench worker`) in its memory cgroup.
pub struct RunningWorker {
    child: std::process::Child,
    cgroup: Result<MemoryCgroup>,
    pub memory_capped: bool,
    engine_name: &'static str,
}

impl RunningWorker {
    /// Spawns the worker, places it in a fresh memory cgroup, then lets it start.
    pub fn start(spec: &WorkerSpec, memory_limit_bytes: u64) -> Result<RunningWorker> {
        let spec_json = serde_json::to_string(spec)?;
        let name = format!("roamkv-bench-{}", std::process::id());
        let cgroup = MemoryCgroup::create(&name, memory_limit_bytes);
        let exe =
            std::env::current_exe().map_err(|e| BenchError::os("finding the roamkv binary", e))?;
        let mut child = Command::new(exe)
            .args(["bench", "worker", "--spec"])
            .arg(&spec_json)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| BenchError::os("spawning the worker", e))?;
        // Ctrl-C terminates it before the file system under it is unmounted.
        roamkv_testbed::fixture::set_waited_child(child.id());
        let memory_capped = match &cgroup {
            Ok(c) => c.add(child.id()).is_ok(),
            Err(_) => false,
        };
        if !memory_capped {
            let why = match &cgroup {
                Ok(c) => format!("could not join the {} memory group", c.describe()),
                Err(e) => e.to_string(),
            };
            eprintln!(
                "\n*** WARNING: the {} worker runs WITHOUT a memory cap ({why}): its page cache is \
                 unbounded, so its figures measure the page cache, not the device. ***\n",
                spec.engine.kind.name()
            );
        }
        child
            .stdin
            .take()
            .map(|mut s| s.write_all(b"go\n"))
            .transpose()
            .map_err(|e| BenchError::os("starting the worker", e))?;
        Ok(RunningWorker {
            child,
            cgroup,
            memory_capped,
            engine_name: spec.engine.kind.name(),
        })
    }

    /// The file that holds the cgroup's current usage (heap + page cache), to read while
    /// `finish` owns the worker.
    pub fn cgroup_usage_path(&self) -> Option<PathBuf> {
        self.cgroup.as_ref().ok().map(MemoryCgroup::usage_path)
    }

    /// Reads the worker's output until it exits, handing every `TICK` line's JSON to `on_tick`,
    /// and returns its result (or why it failed: its exit status and stderr) with its cgroup.
    pub fn finish(
        mut self,
        mut on_tick: impl FnMut(&str),
    ) -> (Result<WorkerResult>, Result<MemoryCgroup>) {
        let result = (|| {
            let stderr = self.child.stderr.take();
            // Read stderr on its own thread so that a chatty worker cannot fill the pipe.
            let stderr_reader = std::thread::spawn(move || {
                let mut text = String::new();
                if let Some(mut e) = stderr {
                    let _ = e.read_to_string(&mut text);
                }
                text
            });
            let stdout = self
                .child
                .stdout
                .take()
                .ok_or_else(|| BenchError::Run("no worker stdout".into()))?;
            let mut last_line = None;
            for line in BufReader::new(stdout)
                .lines()
                .map_while(std::result::Result::ok)
            {
                match line.strip_prefix("TICK ") {
                    Some(tick) => on_tick(tick),
                    None => last_line = Some(line),
                }
            }
            let stderr_text = stderr_reader.join().unwrap_or_default();
            let status = self.child.wait().map_err(|e| {
                BenchError::os(format!("waiting for the {} worker", self.engine_name), e)
            })?;
            roamkv_testbed::fixture::set_waited_child(0);
            if !status.success() {
                use std::os::unix::process::ExitStatusExt;
                let killed = match status.signal() {
                    Some(libc::SIGKILL) if self.cgroup_oom_kills() > 0 => {
                        " (killed by the memory cgroup: out of memory)"
                    }
                    Some(_) => " (killed by a signal)",
                    None => "",
                };
                return Err(BenchError::Run(format!(
                    "{} worker failed ({status}){killed}: {}",
                    self.engine_name,
                    stderr_text.trim()
                )));
            }
            last_line
                .as_deref()
                .ok_or("the worker printed nothing")
                .and_then(|l| {
                    serde_json::from_str(l).map_err(|_| "the worker's last line is not a result")
                })
                .map_err(|e| BenchError::Run(format!("{e}: {}", stderr_text.trim())))
        })();
        (result, self.cgroup)
    }

    fn cgroup_oom_kills(&self) -> u64 {
        self.cgroup.as_ref().map_or(0, |c| c.oom_kills())
    }
}
