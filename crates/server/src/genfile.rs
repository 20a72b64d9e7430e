//! Reading files of the data directory over SQL: `pg_read_binary_file` and
//! `pg_current_logfile` (PostgreSQL's `genfile.c` and `pg_current_logfile()`), which tools use
//! to follow the server log from a client (`settle tpcc --target`'s observer does).
//!
//! Only paths inside the data directory are served: a relative path without `..`, as
//! PostgreSQL allows roles without `pg_read_server_files`; an absolute path or one that climbs
//! out is refused (42501).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path};

use crate::error::SqlError;

/// The most bytes one call returns (1 GB less one, PostgreSQL's `MaxAllocSize`).
const MAX_READ: i64 = (1 << 30) - 1;

/// The server log, relative to the data directory, as `pg_current_logfile()` names it.
pub const LOG_FILE: &str = "log/settledb.log";

/// `pg_read_binary_file(path, offset, length, missing_ok)`: `length` bytes (fewer at the end
/// of the file) from `offset` (from the end when negative); `None` when the file is missing
/// and `missing_ok`.
pub fn read_binary_file(
    dir: &Path,
    path: &str,
    offset: i64,
    length: Option<i64>,
    missing_ok: bool,
) -> Result<Option<Vec<u8>>, SqlError> {
    let rel = Path::new(path);
    if rel.is_absolute() || rel.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(SqlError::new("42501", "absolute path not allowed")
            .with_detail("Only files inside the data directory can be read; give a path relative to it."));
    }
    if length.is_some_and(|l| l < 0) {
        return Err(SqlError::new("22023", "requested length cannot be negative"));
    }
    if length.is_some_and(|l| l > MAX_READ) {
        return Err(SqlError::new("22023", "requested length too large"));
    }
    let full = dir.join(rel);
    let mut f = match std::fs::File::open(&full) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && missing_ok => return Ok(None),
        Err(e) => return Err(SqlError::new("58P01", format!("could not open file \"{path}\" for reading: {e}"))),
    };
    let io = |e: std::io::Error| SqlError::new("58030", format!("could not read file \"{path}\": {e}"));
    let seek = if offset >= 0 { SeekFrom::Start(offset as u64) } else { SeekFrom::End(offset) };
    f.seek(seek).map_err(io)?;
    let mut out = Vec::new();
    // At most MAX_READ bytes (PostgreSQL's limit on one value); a whole file longer than that
    // is refused rather than cut short.
    let want = length.unwrap_or(MAX_READ) as u64;
    f.take(want + u64::from(length.is_none())).read_to_end(&mut out).map_err(io)?;
    if length.is_none() && out.len() as u64 > want {
        return Err(SqlError::new("54000", format!("file \"{path}\" is too large to read whole")));
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_slices_inside_the_directory_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("log")).unwrap();
        std::fs::write(dir.path().join(LOG_FILE), b"0123456789").unwrap();
        let r = |p: &str, o: i64, l: Option<i64>, m: bool| read_binary_file(dir.path(), p, o, l, m);
        assert_eq!(r(LOG_FILE, 2, Some(3), false).unwrap().unwrap(), b"234");
        assert_eq!(r(LOG_FILE, 8, Some(100), false).unwrap().unwrap(), b"89");
        assert_eq!(r(LOG_FILE, 20, Some(3), false).unwrap().unwrap(), b"");
        assert_eq!(r(LOG_FILE, -3, None, false).unwrap().unwrap(), b"789");
        assert_eq!(r("log/none", 0, None, true).unwrap(), None);
        assert_eq!(r("log/none", 0, None, false).unwrap_err().code, "58P01");
        assert_eq!(r("../x", 0, None, true).unwrap_err().code, "42501");
        assert_eq!(r("/etc/passwd", 0, None, true).unwrap_err().code, "42501");
        assert_eq!(r(LOG_FILE, 0, Some(-1), true).unwrap_err().code, "22023");
        assert_eq!(r(LOG_FILE, 0, Some(1 << 40), true).unwrap_err().code, "22023");
        assert_eq!(r(LOG_FILE, 0, None, false).unwrap().unwrap(), b"0123456789");
    }
}
