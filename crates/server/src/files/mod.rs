//! The server's own small files beside the engine's (`DATA_DIR/server/`: retention settings,
//! the edge's identity, departures waiting for the cloud), each replaced atomically: written to
//! `NAME.tmp`, fsync'd, renamed over `NAME`, the directory fsync'd. A reader finds the old file
//! or the new one, never half of one, and a change is durable when this returns. `edge` is the
//! first such file: the edge's identity.

pub mod edge;

use std::io::Write;
use std::path::{Path, PathBuf};

/// `DATA_DIR/server/NAME`.
pub fn server_file(data_dir: &Path, name: &str) -> PathBuf {
    data_dir.join("server").join(name)
}

/// Replaces `path` with `bytes`, atomically and durably. The error names the file and the step.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let fail = |what: &str, e: std::io::Error| format!("{what} {}: {e}", path.display());
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| fail("creating the directory of", e))?;
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    let mut file = std::fs::File::create(&tmp).map_err(|e| fail("creating a temporary for", e))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| fail("writing a temporary for", e))?;
    std::fs::rename(&tmp, path).map_err(|e| fail("renaming into", e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| fail("syncing the directory of", e))
}

/// The file's bytes, or None if there is no such file (any other error is one).
pub fn read_if_present(path: &Path) -> Result<Option<Vec<u8>>, String> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("reading {}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_holds_the_new_bytes_and_no_temporary_is_left() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = server_file(dir.path(), "x.json");
        assert_eq!(read_if_present(&path).expect("read"), None);
        write_atomically(&path, b"one").expect("write");
        write_atomically(&path, b"two").expect("write");
        assert_eq!(read_if_present(&path).expect("read"), Some(b"two".to_vec()));
        let names: Vec<_> = std::fs::read_dir(path.parent().expect("dir"))
            .expect("list")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("x.json")]);
    }
}
