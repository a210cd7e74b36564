//! The cloud sink and what a departure does with a device's data (`--sink`, `--on-depart`).

use std::path::PathBuf;

use super::args::{FileConfig, ServeArgs};

/// The cloud sink's settings (the edge id comes from the data directory, `files/edge.rs`).
#[derive(Clone)]
pub struct SinkSettings {
    pub url: String,
    pub password: Option<String>,
    pub ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for SinkSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkSettings")
            .field("url", &roamkv_sink::redact(&self.url))
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// What a departure does with the device's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnDepart {
    /// Dropped at once: one DEPART record, nothing rewritten (paper 002).
    #[default]
    Drop,
    /// Dropped once the cloud sink has committed every reading of the device: the device is
    /// fenced (writes refused with 409) and its DEPART waits (departures/departing.rs).
    Cloud,
}

impl OnDepart {
    pub fn name(self) -> &'static str {
        match self {
            OnDepart::Drop => "drop",
            OnDepart::Cloud => "cloud",
        }
    }
}

/// The sink: flag, then $ROAMKV_SINK (clap reads both into `args`), then the file. A malformed
/// URL or an unreadable password file is an error naming the setting.
pub(super) fn resolve_sink(
    args: &ServeArgs,
    file: &FileConfig,
) -> Result<Option<SinkSettings>, String> {
    let Some(url) = args.sink.clone().or(file.sink.clone()) else {
        return Ok(None);
    };
    if let Err(e) = roamkv_sink::db::parse_url(&url) {
        return Err(format!("--sink: {e}"));
    }
    let password = match args
        .sink_password_file
        .clone()
        .or(file.sink_password_file.clone())
    {
        Some(path) => Some(
            std::fs::read_to_string(&path)
                .map_err(|e| format!("--sink-password-file {}: {e}", path.display()))?
                .trim_end_matches(['\n', '\r'])
                .to_string(),
        ),
        None => None,
    };
    let ca_file = args.sink_ca_file.clone().or(file.sink_ca_file.clone());
    if let Some(path) = &ca_file
        && let Err(e) = std::fs::metadata(path)
    {
        return Err(format!("--sink-ca-file {}: {e}", path.display()));
    }
    Ok(Some(SinkSettings {
        url,
        password,
        ca_file,
    }))
}

pub(super) fn resolve_on_depart(args: &ServeArgs, file: &FileConfig) -> Result<OnDepart, String> {
    match args.on_depart.as_deref().or(file.on_depart.as_deref()) {
        None | Some("drop") => Ok(OnDepart::Drop),
        Some("cloud") => Ok(OnDepart::Cloud),
        Some(other) => Err(format!(
            "--on-depart {other:?}: valid values are drop and cloud"
        )),
    }
}
