//! A private PostgreSQL server for measurements and tests: `initdb` into a directory of the
//! caller's (its pg_wal optionally on another file system), started with `pg_ctl`, reachable only
//! through a Unix socket in a private directory (no TCP address at all). Drop stops it
//! (`pg_ctl stop -m immediate`, then SIGQUIT to the postmaster if that fails) and removes its
//! directories: on success, on error and on Ctrl-C (the rig's interrupt handler makes the main
//! thread unwind through here). Debian's postgresql package (15 or newer) provides the programs.
use crate::command::run_command;
use crate::error::Error;
use crate::fixture::cleanup;
use crate::prerequisite::require_tool;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Where Debian's postgresql packages put pg_ctl and initdb (they are not on PATH).
const PG_BIN_DIRS: [&str; 3] = [
    "/usr/lib/postgresql/15/bin",
    "/usr/lib/postgresql/16/bin",
    "/usr/lib/postgresql/17/bin",
];
/// The Unix user the server runs as (PostgreSQL refuses to run as root).
pub const PG_USER: &str = "postgres";
/// How long to wait for the server to start or stop.
const PG_CTL_TIMEOUT_SECONDS: &str = "60";
/// After a SIGQUIT, how long the postmaster gets to exit before the directories are removed.
const SIGQUIT_GRACE: Duration = Duration::from_millis(500);

/// A program of the PostgreSQL installation: pg_ctl, initdb (in PG_BIN_DIRS) or one on PATH.
pub fn pg_bin(program: &str) -> Result<PathBuf, Error> {
    PG_BIN_DIRS
        .iter()
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
        .map_or_else(|| require_tool(program, "postgresql"), Ok)
}

/// uid and gid of the `postgres` user.
fn pg_user_ids() -> Result<(u32, u32), Error> {
    let name =
        std::ffi::CString::new(PG_USER).map_err(|_| Error::Unsupported("bad user name".into()))?;
    // SAFETY: getpwnam takes a valid C string; the result is read before any other getpw* call.
    let entry = unsafe { libc::getpwnam(name.as_ptr()) };
    if entry.is_null() {
        return Err(Error::Unsupported(format!(
            "no `{PG_USER}` user; install the Debian package postgresql (apt-get install postgresql)"
        )));
    }
    // SAFETY: entry is non-null and points to getpwnam's static passwd record.
    let (uid, gid) = unsafe { ((*entry).pw_uid, (*entry).pw_gid) };
    Ok((uid, gid))
}

fn chown(path: &Path, uid: u32, gid: u32) -> Result<(), Error> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(|e| Error::io(path, e))
}

/// Makes every ancestor of `path` traversable by the postgres user (temp dirs are 0700).
fn open_ancestors(path: &Path) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    for dir in path.ancestors().skip(1) {
        if dir.as_os_str().is_empty() || dir == Path::new("/") {
            break;
        }
        let meta = std::fs::metadata(dir).map_err(|e| Error::io(dir, e))?;
        let mode = meta.permissions().mode();
        if mode & 0o001 == 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o711))
                .map_err(|e| Error::io(dir, e))?;
        }
    }
    Ok(())
}

/// Counts, per row, the insert attempts of committed transactions (the trigger's own writes are
/// rolled back with an aborted transaction), in a table `sends`: how often the cloud sink sent
/// each row (`crates/cli/tests/cloud_sink.rs`, `roamkv bench handoff`). Made once the sink made its
/// table `roamkv_readings`.
pub const COUNT_SENDS_SQL: &str = "
CREATE TABLE sends (device text, sensor text, ts_ns bigint, n int NOT NULL,
                    PRIMARY KEY (device, sensor, ts_ns));
CREATE FUNCTION count_send() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO sends VALUES (NEW.device, NEW.sensor, NEW.ts_ns, 1)
    ON CONFLICT (device, sensor, ts_ns) DO UPDATE SET n = sends.n + 1;
  RETURN NEW;
END $$;
CREATE TRIGGER count_sends BEFORE INSERT ON roamkv_readings
  FOR EACH ROW EXECUTE FUNCTION count_send();";

/// A running private cluster. Drop stops it and removes its directories.
pub struct Cluster {
    data_dir: PathBuf,
    wal_dir: PathBuf,
    socket_dir: PathBuf,
    port: u16,
    uid: u32,
    gid: u32,
    running: bool,
    placement: Placement,
    /// Its entry in the interrupt registry: a Ctrl-C that finds the main thread still busy stops
    /// the server before it unmounts the file system under it.
    undo_owner: u64,
}

/// Where a cluster listens beyond its private socket, and in which network namespace it runs.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    /// Also listen on this TCP address (port: the cluster's), trusting every client that can
    /// reach it: for a private network namespace of a benchmark, never a shared network.
    pub listen: Option<std::net::IpAddr>,
    /// Run the server inside this network namespace (`ip netns add NAME`; /run/netns/NAME).
    pub netns: Option<String>,
    /// Serve TLS (`ssl = on`) with this certificate chain and key (PEM files, copied into the
    /// data directory for the server's user): clients on `listen` may then ask for it.
    pub tls: Option<(PathBuf, PathBuf)>,
}

impl Cluster {
    /// initdb with the data directory `data_parent/pgdata` and pg_wal in `wal_parent/pg_wal`,
    /// `settings` (postgresql.conf lines) appended to the private connection settings, then
    /// start. Needs root (the server runs as the postgres user).
    pub fn create(data_parent: &Path, wal_parent: &Path, settings: &str) -> Result<Cluster, Error> {
        Cluster::create_placed(data_parent, wal_parent, settings, Placement::default())
    }

    /// `create`, listening and running as `placement` says.
    pub fn create_placed(
        data_parent: &Path,
        wal_parent: &Path,
        settings: &str,
        placement: Placement,
    ) -> Result<Cluster, Error> {
        let initdb = pg_bin("initdb")?;
        pg_bin("pg_ctl")?;
        require_tool("psql", "postgresql-client")?;
        let (uid, gid) = pg_user_ids()?;
        let mut cluster = Cluster {
            data_dir: data_parent.join("pgdata"),
            wal_dir: wal_parent.join("pg_wal"),
            socket_dir: data_parent.join("pgsocket"),
            port: free_port()?,
            uid,
            gid,
            running: false,
            placement,
            undo_owner: cleanup::new_owner_id(),
        };
        cleanup::register_undo(
            cluster.undo_owner,
            cleanup::Undo::StopPostmaster(cluster.data_dir.clone()),
        );
        // From here on, an error drops `cluster`, which removes what was made.
        for dir in [&cluster.data_dir, &cluster.wal_dir, &cluster.socket_dir] {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
            chown(dir, uid, gid)?;
            open_ancestors(dir)?;
        }
        cluster.run_as_postgres(
            &initdb,
            &[
                "-D",
                &cluster.data_dir.to_string_lossy(),
                "-X",
                &cluster.wal_dir.to_string_lossy(),
                "-U",
                PG_USER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
            ],
        )?;
        let tls = cluster.install_tls()?;
        let conf = format!("{}{tls}{settings}", cluster.connection_config());
        let conf_path = cluster.data_dir.join("postgresql.auto.conf");
        std::fs::write(&conf_path, conf).map_err(|e| Error::io(&conf_path, e))?;
        chown(&conf_path, uid, gid)?;
        if cluster.placement.listen.is_some() {
            let hba = cluster.data_dir.join("pg_hba.conf");
            let mut text = std::fs::read_to_string(&hba).map_err(|e| Error::io(&hba, e))?;
            text.push_str("host all all 0.0.0.0/0 trust\nhost all all ::/0 trust\n");
            std::fs::write(&hba, text).map_err(|e| Error::io(&hba, e))?;
        }
        cluster.start()?;
        Ok(cluster)
    }

    /// Copies the placement's certificate and key into the data directory (owned by the server's
    /// user, the key readable by it alone, as PostgreSQL demands); the settings that use them.
    fn install_tls(&self) -> Result<String, Error> {
        use std::os::unix::fs::PermissionsExt;
        let Some((cert, key)) = &self.placement.tls else {
            return Ok(String::new());
        };
        let mut settings = String::from("ssl = on\n");
        for (from, name, mode) in [(cert, "server.crt", 0o644), (key, "server.key", 0o600)] {
            let to = self.data_dir.join(name);
            std::fs::copy(from, &to).map_err(|e| Error::io(from, e))?;
            chown(&to, self.uid, self.gid)?;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode))
                .map_err(|e| Error::io(&to, e))?;
            let setting = if name == "server.crt" {
                "ssl_cert_file"
            } else {
                "ssl_key_file"
            };
            settings.push_str(&format!("{setting} = '{}'\n", to.display()));
        }
        Ok(settings)
    }

    /// Reachable only through the private socket directory, on a port no one else uses.
    fn connection_config(&self) -> String {
        format!(
            "# written by roamkv (a private cluster; removed when it stops)\n\
             listen_addresses = '{listen}'\n\
             port = {port}\n\
             unix_socket_directories = '{socket}'\n",
            listen = self
                .placement
                .listen
                .map_or(String::new(), |ip| ip.to_string()),
            port = self.port,
            socket = self.socket_dir.display(),
        )
    }

    fn run_as_postgres(&self, program: &Path, args: &[&str]) -> Result<String, Error> {
        use std::os::unix::process::CommandExt;
        let mut command = Command::new(program);
        match &self.placement.netns {
            Some(netns) => {
                super::netns::enter_in_child_as(&mut command, netns, self.uid, self.gid)?
            }
            None => {
                command.uid(self.uid).gid(self.gid);
            }
        }
        let output = command
            .args(args)
            .env("LC_ALL", "C")
            .current_dir("/")
            // Its own process group: Ctrl-C reaches the caller, which stops the server in order.
            .process_group(0)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::io(program, e))?;
        if !output.status.success() {
            return Err(Error::CommandFailed {
                command: format!("{} {}", program.display(), args.join(" ")),
                status: output
                    .status
                    .code()
                    .map_or("signal".into(), |c| c.to_string()),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    fn start(&mut self) -> Result<(), Error> {
        let pg_ctl = pg_bin("pg_ctl")?;
        let log = self.data_dir.join("server.log");
        let result = self.run_as_postgres(
            &pg_ctl,
            &[
                "-D",
                &self.data_dir.to_string_lossy(),
                "-l",
                &log.to_string_lossy(),
                "-w",
                "-t",
                PG_CTL_TIMEOUT_SECONDS,
                "start",
            ],
        );
        // Even a failed start may have left a postmaster behind: Drop must try to stop it.
        self.running = true;
        result.map(|_| ()).map_err(|e| {
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(5).collect();
            Error::Unsupported(format!(
                "PostgreSQL did not start: {e}; server log: {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ))
        })
    }

    /// `-h SOCKET_DIR -p PORT -U postgres`: what psql, pgbench or a client needs to connect.
    pub fn connection_args(&self) -> Vec<String> {
        vec![
            "-h".into(),
            self.socket_dir.to_string_lossy().into_owned(),
            "-p".into(),
            self.port.to_string(),
            "-U".into(),
            PG_USER.into(),
        ]
    }

    /// Runs psql -At with these arguments against the database `postgres`; returns its output.
    pub fn psql(&self, args: &[&str]) -> Result<String, Error> {
        let mut all: Vec<String> = self.connection_args();
        all.extend(["-At", "-v", "ON_ERROR_STOP=1", "-d", "postgres"].map(String::from));
        all.extend(args.iter().map(|a| a.to_string()));
        let mut command = vec!["psql"];
        command.extend(all.iter().map(String::as_str));
        run_command(&command)
    }

    fn stop(&mut self) {
        if !self.running {
            return;
        }
        self.running = false;
        let stopped = pg_bin("pg_ctl").and_then(|pg_ctl| {
            self.run_as_postgres(
                &pg_ctl,
                &[
                    "-D",
                    &self.data_dir.to_string_lossy(),
                    "-m",
                    "immediate",
                    "-w",
                    "-t",
                    PG_CTL_TIMEOUT_SECONDS,
                    "stop",
                ],
            )
        });
        if stopped.is_err() {
            // pg_ctl could not do it: SIGQUIT to the postmaster named in postmaster.pid.
            let pid_file = self.data_dir.join("postmaster.pid");
            if let Some(pid) = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|t| t.lines().next().and_then(|l| l.trim().parse::<i32>().ok()))
                .filter(|pid| *pid > 1)
            {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGQUIT) };
                std::thread::sleep(SIGQUIT_GRACE);
            }
        }
    }

    /// A libpq connection string for the private socket (tokio-postgres reads it too).
    pub fn socket_url(&self) -> String {
        format!(
            "host={} port={} user={PG_USER} dbname=postgres",
            self.socket_dir.display(),
            self.port
        )
    }

    /// The postmaster's pid (from postmaster.pid), if it is running.
    pub fn postmaster_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.data_dir.join("postmaster.pid"))
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse::<i32>().ok()))
            .filter(|pid| *pid > 1)
    }

    /// Kills the postmaster with SIGKILL (a crash: its backends notice and exit; WAL replay on
    /// the next start), and waits until it is gone.
    pub fn kill_postmaster(&mut self) -> Result<(), Error> {
        let pid = self
            .postmaster_pid()
            .ok_or_else(|| Error::Unsupported("the cluster has no postmaster to kill".into()))?;
        // SAFETY: kill has no memory-safety preconditions; the pid is the cluster's postmaster.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        // SAFETY: signal 0 only checks that the process exists.
        while unsafe { libc::kill(pid, 0) } == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Starts the cluster again after `kill_postmaster` (or a stop), retrying while the killed
    /// server's backends still hold its shared memory.
    pub fn restart(&mut self) -> Result<(), Error> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match self.start() {
                Ok(()) => return Ok(()),
                Err(e) if std::time::Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }
    pub fn wal_dir(&self) -> &Path {
        &self.wal_dir
    }
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }
    pub fn port(&self) -> u16 {
        self.port
    }
    pub fn is_running(&self) -> bool {
        self.running
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
        // The server is stopped: its registry entry finds no pid and goes.
        cleanup::undo_owner(self.undo_owner);
        for dir in [&self.data_dir, &self.wal_dir, &self.socket_dir] {
            if dir.exists()
                && let Err(e) = std::fs::remove_dir_all(dir)
            {
                eprintln!("roamkv: warning: could not remove {}: {e}", dir.display());
            }
        }
    }
}

/// A TCP port nobody listens on now. The server listens on no TCP address at all
/// (listen_addresses = ''); the port only names its socket file, but a distinct one keeps a
/// second cluster from colliding in its socket directory's lock file.
fn free_port() -> Result<u16, Error> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| Error::io("127.0.0.1:0", e))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::io("127.0.0.1:0", e))
}
