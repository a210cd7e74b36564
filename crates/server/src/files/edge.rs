//! The edge's identity: a random id made once per data directory and kept in
//! `DATA_DIR/server/edge.json` (`{"format":1,"edge_id":"…"}`). The cloud sink's cursor row is
//! keyed by it, and peers name this edge by it. A copy of the data directory carries the same
//! id: two processes writing under one id are caught by the sink's conditional cursor update,
//! and one of them stops (docs/SERVER.md, "The cloud sink").

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::files;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredEdge {
    format: u32,
    edge_id: String,
}

/// This data directory's edge id, made (durably) if it has none yet.
pub fn load_or_make(data_dir: &Path) -> Result<String, String> {
    let path = files::server_file(data_dir, "edge.json");
    if let Some(bytes) = files::read_if_present(&path)? {
        let stored: StoredEdge = serde_json::from_slice(&bytes)
            .map_err(|e| format!("the edge identity {}: {e}", path.display()))?;
        if stored.format != 1 || stored.edge_id.is_empty() {
            return Err(format!(
                "the edge identity {}: format {} with id {:?} is not one this server reads",
                path.display(),
                stored.format,
                stored.edge_id
            ));
        }
        return Ok(stored.edge_id);
    }
    let stored = StoredEdge {
        format: 1,
        edge_id: uuid::Uuid::new_v4().to_string(),
    };
    let bytes = serde_json::to_vec_pretty(&stored)
        .map_err(|e| format!("encoding the edge identity: {e}"))?;
    files::write_atomically(&path, &bytes)?;
    Ok(stored.edge_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_made_once_and_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = load_or_make(dir.path()).expect("make");
        assert_eq!(load_or_make(dir.path()).expect("load"), first);
        std::fs::write(files::server_file(dir.path(), "edge.json"), "{").expect("write");
        assert!(load_or_make(dir.path()).is_err());
    }
}
