//! `roamkv serve` as a real process for tests: started on a loopback port (a free one, or the
//! same one across restarts so that peers keep its URL) or any address of any namespace, its
//! address read from its log, ready when /ready says so, its log kept and printed when the test
//! fails, signalled, killed and waited for, killed if the test ends first.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::print_tail;

/// Lines of its log a failed test prints.
const LOG_TAIL_LINES: usize = 80;
/// How long a raw HTTP call may take before it counts as unanswered.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

pub struct ServeProcess {
    pub child: Child,
    /// `host:port` it listens on.
    pub addr: String,
    /// `http` or `https`, as its log said.
    pub scheme: String,
    data: PathBuf,
    /// Every line of its log (stderr) so far.
    lines: Arc<Mutex<Vec<String>>>,
    /// Drains its log until it exits.
    drain: Option<JoinHandle<()>>,
}

impl ServeProcess {
    /// Starts `binary serve --listen 127.0.0.1:0 --data DATA`, with `adjust` adding flags or
    /// environment, and waits until it prints the address it listens on.
    pub fn start(binary: &Path, data: &Path, adjust: impl FnOnce(&mut Command)) -> ServeProcess {
        ServeProcess::start_on(binary, data, 0, adjust)
    }

    /// `start` on `port` (0: a free one).
    pub fn start_on(
        binary: &Path,
        data: &Path,
        port: u16,
        adjust: impl FnOnce(&mut Command),
    ) -> ServeProcess {
        ServeProcess::start_listening(binary, data, &format!("127.0.0.1:{port}"), adjust)
    }

    /// `start` with `--listen LISTEN` (`host:port`; port 0: a free one). A host that is not
    /// loopback needs `--insecure` or a token from `adjust`; a host in another network
    /// namespace, `adjust` calling `netns::enter_in_child`.
    pub fn start_listening(
        binary: &Path,
        data: &Path,
        listen: &str,
        adjust: impl FnOnce(&mut Command),
    ) -> ServeProcess {
        let mut command = Command::new(binary);
        // The tests write readings at synthetic times (1970, 2023) that the default retention
        // (a week) would delete at its first pass; a test of retention gives its own flag.
        command.env("ROAMKV_RETENTION_DEFAULT_H", "0");
        command
            .args(["serve", "--listen", listen, "--data"])
            .arg(data);
        adjust(&mut command);
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start roamkv serve");
        let stderr = child.stderr.take().expect("stderr");
        let mut reader = BufReader::new(stderr).lines();
        let mut seen = Vec::new();
        let (scheme, addr) = loop {
            let Some(Ok(line)) = reader.next() else {
                let _ = child.kill();
                let _ = child.wait();
                panic!("roamkv serve exited before listening:\n{}", seen.join("\n"));
            };
            // "listening on http://127.0.0.1:PORT", plain or inside a JSON log line.
            if let Some((_, rest)) = line.split_once("listening on ")
                && let Some((scheme, rest)) = rest.trim().split_once("://")
            {
                let addr: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || ".:[]-".contains(*c))
                    .collect();
                seen.push(line.clone());
                break (scheme.to_string(), addr);
            }
            seen.push(line);
        };
        // Keep draining stderr (so the server never blocks on a full pipe), and keep the log.
        let lines = Arc::new(Mutex::new(seen));
        let sink = Arc::clone(&lines);
        let drain = std::thread::spawn(move || {
            for line in reader.map_while(Result::ok) {
                sink.lock().expect("log lock").push(line);
            }
        });
        ServeProcess {
            child,
            addr,
            scheme,
            data: data.to_path_buf(),
            lines,
            drain: Some(drain),
        }
    }

    /// `scheme://host:port`.
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse().ok())
            .expect("host:port")
    }

    /// Its data directory.
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// Waits until GET /ready answers 200 (plain HTTP only); panics after `within`.
    pub fn wait_ready(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while self.call("GET", "/ready", "").0 != 200 {
            assert!(
                Instant::now() < deadline,
                "{} not ready within {within:?}",
                self.url()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One HTTP/1.1 request over a new plain connection: (status, body); status 0 when no
    /// answer came (refused, reset, timed out: the writer cannot know what happened).
    pub fn call(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        http_call(&self.addr, method, path, body)
    }

    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on the pid of a child this process started and has not reaped.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(rc, 0, "kill({signal})");
    }

    /// SIGKILL, and waits for it to be gone.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether it has exited (a crash point ended it, or a signal).
    pub fn has_exited(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_some()
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
        if let Some(drain) = self.drain.take() {
            drain.join().expect("log thread");
        }
        self.log_so_far()
    }

    /// Its log up to now.
    pub fn log_so_far(&self) -> String {
        self.lines.lock().expect("log lock").join("\n")
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            print_tail(
                &format!("roamkv serve {} ({})", self.addr, self.data.display()),
                &self.log_so_far(),
                LOG_TAIL_LINES,
            );
        }
    }
}

/// One HTTP/1.1 request to `addr` (`host:port`, plain HTTP) over a new connection:
/// (status, body); status 0 when no answer came.
pub fn http_call(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let attempt = || -> std::io::Result<(u16, String)> {
        let mut stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(CALL_TIMEOUT))?;
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        let status = answer
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = answer
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((status, body))
    };
    attempt().unwrap_or((0, String::new()))
}
