//! `roamkv serve` as a real process for tests: started on a free loopback port, its address read
//! from its log, its log kept, signalled and waited for, killed if the test fails first.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub struct ServeProcess {
    pub child: Child,
    /// `host:port` it listens on.
    pub addr: String,
    /// `http` or `https`, as its log said.
    pub scheme: String,
    /// Collects its log (stderr) until it exits.
    log: Option<JoinHandle<Vec<String>>>,
}

impl ServeProcess {
    /// Starts `binary serve --listen 127.0.0.1:0 --data DATA`, with `adjust` adding flags or
    /// environment, and waits until it prints the address it listens on.
    pub fn start(binary: &Path, data: &Path, adjust: impl FnOnce(&mut Command)) -> ServeProcess {
        let mut command = Command::new(binary);
        // The tests write readings at synthetic times (1970, 2023) that the default retention
        // (a week) would delete at its first pass; a test of retention gives its own flag.
        command.env("ROAMKV_RETENTION_DEFAULT_H", "0");
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(data);
        adjust(&mut command);
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start roamkv serve");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let mut seen = Vec::new();
        let (scheme, addr) = loop {
            let Some(Ok(line)) = lines.next() else {
                let _ = child.kill();
                let _ = child.wait();
                panic!("roamkv serve exited before listening:\n{}", seen.join("\n"));
            };
            if let Some((_, rest)) = line.split_once("listening on ")
                && let Some((scheme, addr)) = rest.trim().split_once("://")
            {
                break (scheme.to_string(), addr.trim_end_matches('/').to_string());
            }
            seen.push(line);
        };
        // Keep draining stderr (so the server never blocks on a full pipe), and keep the log.
        let log = std::thread::spawn(move || {
            seen.extend(lines.map_while(Result::ok));
            seen
        });
        ServeProcess {
            child,
            addr,
            scheme,
            log: Some(log),
        }
    }

    /// `scheme://host:port`.
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on the pid of a child this process started and has not reaped.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(rc, 0, "kill({signal})");
    }

    /// Waits for the exit; panics after `seconds`.
    pub fn wait_exit(&mut self, seconds: u64) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "no exit within {seconds} s of the signal"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its whole log, once it has exited (SIGTERM and `wait_exit` first).
    pub fn log(&mut self) -> String {
        self.log
            .take()
            .map(|handle| handle.join().expect("log thread").join("\n"))
            .unwrap_or_default()
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
