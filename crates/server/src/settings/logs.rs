//! How the server logs: the filter (a level or tracing's directives), the line format (text or
//! JSON) and whether each request gets an access-log line. The filter and the access log may
//! change on SIGHUP (reload.rs); the format is fixed for the process's life (the subscriber is
//! built once).

use super::args::{FileConfig, ServeArgs};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines (ANSI colours only on a terminal).
    #[default]
    Text,
    /// One JSON object a line: timestamp, level, target, message and fields.
    Json,
}

impl LogFormat {
    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// The log's settings, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// tracing's filter directives (`info`, `warn,roamkv_server=debug`).
    pub level: String,
    pub format: LogFormat,
    /// One line a request, target `roamkv::access`.
    pub access_log: bool,
}

/// The level as the flag, $ROAMKV_LOG_LEVEL or the file gives it (a filter that does not parse
/// is an error naming it), the format likewise.
pub(super) fn resolve_logs(args: &ServeArgs, file: &FileConfig) -> Result<LogSettings, String> {
    let level = args
        .log_level
        .clone()
        .or(file.log_level.clone())
        .unwrap_or_else(|| "info".into());
    tracing_subscriber::EnvFilter::try_new(&level).map_err(|e| {
        format!("--log-level {level:?} is not a level or a filter (error, warn, info, debug, trace, or target=level lists): {e}")
    })?;
    let format = match args
        .log_format
        .clone()
        .or(file.log_format.clone())
        .as_deref()
    {
        None | Some("text") => LogFormat::Text,
        Some("json") => LogFormat::Json,
        Some(other) => return Err(format!("--log-format {other:?}: valid: text, json")),
    };
    Ok(LogSettings {
        level,
        format,
        access_log: args.access_log.or(file.access_log).unwrap_or(false),
    })
}
