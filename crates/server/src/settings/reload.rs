//! SIGHUP: the settings resolved again — the flags and environment the server started with, the
//! config file as it is now — and what can change while the server runs put in force: the TLS
//! certificate and key (read again from their files), the bearer tokens (from theirs), the
//! handoff sender's peer token and CA (from theirs), the log filter and the access log. What cannot (the address, the data directory, the engine's
//! sizes, MQTT, the sink, the log's format, ...) is named as waiting for a restart, and keeps
//! its value. Settings that no longer resolve (a file that does not parse, a token file gone)
//! change nothing: the error is logged, the server runs on as it was. A reload never stops the
//! server (docs/SERVER.md, "Signals").

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, RwLock};

use super::tls::Tls;
use super::{Config, PeerSettings, Tokens};

/// Puts a new log filter in force (the process's subscriber: observability/logs.rs).
pub type SetLogFilter = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;
/// Puts new peer settings in force (the handoff sender's link: handoff/peer.rs).
pub type SetPeer = Box<dyn Fn(&PeerSettings) -> Result<(), String> + Send + Sync>;

/// What other rooms put in force on a reload (settings imports none of them: they hand these in).
#[derive(Default)]
pub struct Hooks {
    /// None when the server did not set up the process's log (a test's server, a library user).
    pub set_log_filter: Option<SetLogFilter>,
    pub set_peer: Option<SetPeer>,
}

/// What a running server may change on SIGHUP, shared with those who read it.
pub struct Live {
    /// The settings in force (the reloadable ones as last applied).
    current: Mutex<Config>,
    pub tls: Option<Arc<Tls>>,
    pub tokens: Arc<RwLock<Tokens>>,
    pub access_log: Arc<AtomicBool>,
    hooks: Hooks,
}

/// What a reload did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reloaded {
    /// What was put in force (`tls`, `tokens`, `log level`, `access log`).
    pub applied: Vec<String>,
    /// Settings that changed in the file or environment but take effect only at a restart.
    pub restart_needed: Vec<String>,
}

/// The keys of `Config::to_json` that a reload applies (the rest wait for a restart).
const RELOADABLE_KEYS: [&str; 5] = [
    "authEnabled",
    "readOnlyToken",
    "logLevel",
    "accessLog",
    "peer",
];

impl Live {
    pub fn new(config: &Config, tls: Option<Arc<Tls>>, hooks: Hooks) -> Live {
        Live {
            current: Mutex::new(config.clone()),
            tls,
            tokens: Arc::new(RwLock::new(config.tokens())),
            access_log: Arc::new(AtomicBool::new(config.logs.access_log)),
            hooks,
        }
    }

    /// Resolves the settings again and applies what can be applied; an error (nothing changed)
    /// when they no longer resolve or the TLS pair no longer loads.
    pub fn reload(&self) -> Result<Reloaded, String> {
        let source = self.current.lock().source.clone();
        let fresh = Config::resolve(&source)?;
        self.apply(fresh)
    }

    /// Applies `fresh`, resolved from the same flags: see `reload`.
    pub fn apply(&self, mut fresh: Config) -> Result<Reloaded, String> {
        let mut current = self.current.lock();
        if !fresh.retention_default_given {
            // The data directory's recorded default, as `start` settled it.
            fresh.retention_default_ms = current.retention_default_ms;
        }
        let mut done = Reloaded {
            restart_needed: restart_needed(&current, &fresh),
            ..Reloaded::default()
        };
        // TLS first: a pair that does not load leaves everything as it was.
        if let Some(tls) = &self.tls
            && fresh.tls.as_ref() == Some(tls.files())
        {
            tls.reload()?;
            done.applied.push("tls".into());
        }
        // The peer token and CA are read again whether or not their paths changed (a rotated
        // token, a renewed CA in the same file), as the TLS pair is.
        if let Some(set_peer) = &self.hooks.set_peer {
            set_peer(&fresh.peer)?;
            done.applied.push("peer token and CA".into());
        }
        let tokens = fresh.tokens();
        if tokens != *self.tokens.read() {
            *self.tokens.write() = tokens;
            done.applied.push("tokens".into());
        }
        if fresh.logs.level != current.logs.level {
            match &self.hooks.set_log_filter {
                Some(set) if std::env::var_os("RUST_LOG").is_none() => {
                    set(&fresh.logs.level)?;
                    done.applied.push("log level".into());
                }
                // $RUST_LOG wins over the setting, at start as on reload.
                _ => done
                    .restart_needed
                    .push("logLevel (RUST_LOG is set)".into()),
            }
        }
        if fresh.logs.access_log != self.access_log.load(Ordering::Relaxed) {
            self.access_log
                .store(fresh.logs.access_log, Ordering::Relaxed);
            done.applied.push("access log".into());
        }
        // What is in force now: the fresh values of what was applied, the old ones of the rest.
        let mut kept = current.clone();
        kept.auth_token = fresh.auth_token.clone();
        kept.read_only_token = fresh.read_only_token.clone();
        kept.logs.access_log = fresh.logs.access_log;
        if self.hooks.set_peer.is_some() {
            kept.peer = fresh.peer.clone();
        }
        if done.applied.iter().any(|a| a == "log level") {
            kept.logs.level = fresh.logs.level.clone();
        }
        *current = kept;
        Ok(done)
    }
}

/// The settings that differ between `running` and `fresh` and cannot change while running.
fn restart_needed(running: &Config, fresh: &Config) -> Vec<String> {
    let (old, new) = (running.to_json(), fresh.to_json());
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
        return Vec::new();
    };
    let mut keys: Vec<String> = old
        .iter()
        .filter(|(key, value)| {
            !RELOADABLE_KEYS.contains(&key.as_str()) && new.get(key.as_str()) != Some(value)
        })
        .map(|(key, _)| key.clone())
        .collect();
    // "tls" shows the files' paths: a pair at new paths (or TLS turned on or off) waits too.
    keys.sort();
    keys
}
