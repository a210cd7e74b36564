//! The process's log: tracing's subscriber on stderr, as text or one JSON object a line, behind
//! a filter that SIGHUP may replace (settings/reload.rs) without a restart. Set up once, by
//! `roamkv serve` (a server started as a library leaves the process's log to its user).

use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Registry, fmt, reload};

use crate::settings::reload::SetLogFilter;
use crate::settings::{LogFormat, LogSettings};

/// Installs the subscriber: $RUST_LOG when set, else the settings' level. Returns what puts a
/// new filter in force, or None when a subscriber was installed already (a test's process).
pub fn init(settings: &LogSettings) -> Option<SetLogFilter> {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new(&settings.level));
    let (filter, handle) = reload::Layer::<EnvFilter, Registry>::new(filter);
    let registry = tracing_subscriber::registry().with(filter);
    let installed = match settings.format {
        LogFormat::Text => registry
            .with(
                fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    installed.ok()?;
    Some(Box::new(move |level: &str| {
        let filter = EnvFilter::try_new(level).map_err(|e| format!("log level {level:?}: {e}"))?;
        handle
            .reload(filter)
            .map_err(|e| format!("setting the log level: {e}"))
    }))
}
