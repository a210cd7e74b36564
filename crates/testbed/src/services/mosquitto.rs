//! A real mosquitto broker on a loopback port for tests: its configuration written to a private
//! directory, its log kept there and printed when the test fails, killed on drop.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, print_tail};

/// How long a broker gets to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Lines of its log a failed test prints.
const LOG_TAIL_LINES: usize = 60;

pub struct Mosquitto {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Mosquitto {
    /// Plain MQTT, anyone may connect.
    pub fn start() -> Mosquitto {
        Mosquitto::start_with(|_| "allow_anonymous true\n".into())
    }

    /// A broker whose listener takes the settings `settings` returns; it is given the broker's
    /// directory for the files they name.
    pub fn start_with(settings: impl FnOnce(&Path) -> String) -> Mosquitto {
        Mosquitto::start_on(free_port(), settings)
    }

    /// `start_with`, on a port chosen by the caller (a server may be pointed at it first). Runs
    /// as the user who starts it (`user root`: as root mosquitto would otherwise drop to the
    /// `mosquitto` user, who cannot read the test's files), without persistence, logging
    /// everything to `mosquitto.log` in its directory.
    pub fn start_on(port: u16, settings: impl FnOnce(&Path) -> String) -> Mosquitto {
        Mosquitto::launch(port, "log_type all\n", settings)
    }

    /// A broker for a load (`roamkv bench serve`'s bus rows): logging as a deployed mosquitto
    /// does (errors, warnings, notices, connections), plus each subscription, by which a
    /// subscriber is known to be ready (`wait_subscribed`). `log_type all` would write lines
    /// for every message, which costs the broker more than the messages do.
    pub fn start_for_load(settings: impl FnOnce(&Path) -> String) -> Mosquitto {
        Mosquitto::launch(
            free_port(),
            "log_type error\nlog_type warning\nlog_type notice\nlog_type information\n\
             log_type subscribe\n",
            settings,
        )
    }

    fn launch(port: u16, log_types: &str, settings: impl FnOnce(&Path) -> String) -> Mosquitto {
        let dir = tempfile::tempdir().expect("tempdir");
        let conf = dir.path().join("mosquitto.conf");
        let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
        let log = dir.path().join("mosquitto.log");
        std::fs::write(
            &conf,
            format!(
                "user {user}\npersistence false\nlistener {port} 127.0.0.1\n\
                 log_dest file {}\n{log_types}log_timestamp_format %H:%M:%S\n{}",
                log.display(),
                settings(dir.path())
            ),
        )
        .expect("write mosquitto.conf");
        let child = Command::new(binary())
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mosquitto");
        let broker = Mosquitto { child, port, dir };
        let deadline = Instant::now() + START_TIMEOUT;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "mosquitto did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        broker
    }

    /// Where its log is.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("mosquitto.log")
    }

    /// Whether client `client_id` has subscribed to `filter` (a broker logging subscriptions:
    /// `start_for_load`, or `log_type all`), waiting at most `within`. The broker logs a
    /// subscription as "TIME: CLIENT QOS FILTER".
    pub fn wait_subscribed(&self, client_id: &str, filter: &str, within: Duration) -> bool {
        let (client, filter) = (format!(" {client_id} "), format!(" {filter}"));
        let deadline = Instant::now() + within;
        loop {
            let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
            if log
                .lines()
                .any(|l| l.contains(&client) && l.ends_with(&filter))
            {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The broker's process id (its CPU time is read from /proc).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// Debian installs the broker in /usr/sbin, which a user's PATH may lack.
fn binary() -> &'static str {
    if Path::new("/usr/sbin/mosquitto").exists() {
        "/usr/sbin/mosquitto"
    } else {
        "mosquitto"
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
            print_tail(&format!("mosquitto :{}", self.port), &text, LOG_TAIL_LINES);
        }
    }
}
