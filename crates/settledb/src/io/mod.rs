//! The file seam: every byte the engine reads or writes goes through [`FileSystem`] and
//! [`File`], so that tests can swap real files for [`fault::FaultFs`], an in-memory file
//! system that loses unsynced writes on a simulated crash, tears writes and fails calls.
//!
//! The interface is deliberately narrow: positioned reads and writes, `sync` (fsync),
//! length changes, and a few directory operations. Durability rules the engine relies on:
//!
//! * a write is durable only after `sync` of that file returns `Ok`;
//! * a file's creation, removal or rename is durable only after `sync_dir` of its directory;
//! * after `sync` returns an error, the file's unsynced writes may be lost even if a later
//!   `sync` succeeds (Linux behaviour since the 2018 "fsyncgate" discussion). The engine never
//!   retries a failed fsync as if it had worked; it poisons itself instead (every later
//!   command fails until the directory is reopened and recovery replays the WAL: see
//!   [`crate::wal::Wal::poison_after`]);
//! * a failed `write_at` or `allocate` (ENOSPC, EIO) loses nothing already written: the
//!   engine may retry it (the buffer pool keeps the page dirty), except on the WAL, where any
//!   failure poisons.
//!
//! [`RealFs`] is the production implementation over `std::fs` with real `fsync`; its reads of
//! long files come from a mapping of the file ([`mapped`]). [`PreadFs`] is the same with
//! `pread` only, what `Database::open` uses with `mapped_reads = off`.

pub mod fault;
pub mod mapped;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};

/// An open file. Implementations are shared between threads.
pub trait File: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (short at EOF).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize>;
    /// Writes all of `buf` at `offset`, extending the file if needed.
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()>;
    /// Makes every write so far durable (fsync).
    fn sync(&self) -> Result<()>;
    fn len(&self) -> Result<u64>;
    /// True when the file has no bytes.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
    fn set_len(&self, len: u64) -> Result<()>;
    /// The path the file was opened with, for error messages.
    fn path(&self) -> &Path;

    /// Reserves disk blocks for `[offset, offset + len)` without changing the file's length,
    /// so later writes there need no block allocation (PostgreSQL 16 extends relations with
    /// `posix_fallocate` for the same reason). A hint: the default does nothing.
    fn allocate(&self, _offset: u64, _len: u64) -> Result<()> {
        Ok(())
    }

    /// Reads exactly `buf.len()` bytes or fails (a short read is an error naming the file).
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let n = self.read_at(buf, offset)?;
        if n != buf.len() {
            return Err(Error::io(
                "read",
                self.path(),
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("read only {n} of {} bytes at offset {offset}", buf.len()),
                ),
            ));
        }
        Ok(())
    }
}

/// A file system: opens files and manages directories.
pub trait FileSystem: Send + Sync {
    /// Opens `path` for reading and writing, creating it (empty) when `create` is true.
    fn open(&self, path: &Path, create: bool) -> Result<Arc<dyn File>>;
    fn exists(&self, path: &Path) -> bool;
    /// Removes a file, or an empty directory; nothing when there is none.
    fn remove(&self, path: &Path) -> Result<()>;
    /// Atomically replaces `to` with `from`.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    fn create_dir_all(&self, path: &Path) -> Result<()>;
    /// The file names (not paths) in a directory, sorted.
    fn list(&self, dir: &Path) -> Result<Vec<String>>;
    /// Makes creations, removals and renames in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> Result<()>;
}

/// Real files with real fsync. Reads of files of 1 MiB or more are copied from a mapping of
/// the file where they can be ([`mapped`]'s docs); what `Database::open` uses unless
/// `mapped_reads = off`.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

/// [`RealFs`] reading only with `pread` (`mapped_reads = off`).
#[derive(Debug, Default, Clone, Copy)]
pub struct PreadFs;

struct RealFile {
    file: std::fs::File,
    path: PathBuf,
    /// Reads of long files are copied from a mapping when they can be (`mapped`'s docs).
    mapped: mapped::Mapped,
}

impl File for RealFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        use std::os::fd::AsRawFd;
        if let mapped::Served::Done = self.mapped.read(self.file.as_raw_fd(), buf, offset) {
            return Ok(buf.len());
        }
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("read", &self.path, e)),
            }
        }
        Ok(done)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.file.write_all_at(buf, offset).map_err(|e| Error::io("write", &self.path, e))?;
        self.mapped.wrote(offset + buf.len() as u64);
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.file.sync_data().map_err(|e| Error::io("fsync", &self.path, e))
    }

    fn len(&self) -> Result<u64> {
        self.file.metadata().map(|m| m.len()).map_err(|e| Error::io("stat", &self.path, e))
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.mapped.truncating(len);
        self.file.set_len(len).map_err(|e| Error::io("truncate", &self.path, e))?;
        self.mapped.wrote(len);
        Ok(())
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        use std::os::fd::AsRawFd;
        let (Ok(off), Ok(l)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
            return Ok(());
        };
        // SAFETY: fallocate is called on a file descriptor this struct owns, with plain integers.
        let r = unsafe { libc::fallocate(self.file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, off, l) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            // A file system without fallocate simply allocates on write, as before.
            if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)) {
                return Ok(());
            }
            return Err(Error::io("allocate space in", &self.path, e));
        }
        Ok(())
    }
}

impl RealFs {
    fn open_file(path: &Path, create: bool, mapped_reads: bool) -> Result<Arc<dyn File>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io("open", path, e))?;
        let len = file.metadata().map_err(|e| Error::io("stat", path, e))?.len();
        let mapped = mapped::Mapped::new(len, mapped_reads);
        Ok(Arc::new(RealFile { file, path: path.to_path_buf(), mapped }))
    }
}

impl FileSystem for RealFs {
    fn open(&self, path: &Path, create: bool) -> Result<Arc<dyn File>> {
        RealFs::open_file(path, create, true)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let removed = if path.is_dir() { std::fs::remove_dir(path) } else { std::fs::remove_file(path) };
        match removed {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("remove", path, e)),
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::rename(from, to).map_err(|e| Error::io("rename", from, e))
    }

    /// Directories made here are the owner's alone (mode 0700, as `initdb` makes a data
    /// directory); ones that exist keep their mode.
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.create(path).map_err(|e| Error::io("create directory", path, e))
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let mut names = Vec::new();
        let rd = std::fs::read_dir(dir).map_err(|e| Error::io("list directory", dir, e))?;
        for entry in rd {
            let entry = entry.map_err(|e| Error::io("list directory", dir, e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let d = std::fs::File::open(dir).map_err(|e| Error::io("open directory", dir, e))?;
        d.sync_all().map_err(|e| Error::io("fsync directory", dir, e))
    }
}

impl FileSystem for PreadFs {
    fn open(&self, path: &Path, create: bool) -> Result<Arc<dyn File>> {
        RealFs::open_file(path, create, false)
    }
    fn exists(&self, path: &Path) -> bool {
        RealFs.exists(path)
    }
    fn remove(&self, path: &Path) -> Result<()> {
        RealFs.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        RealFs.rename(from, to)
    }
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        RealFs.create_dir_all(path)
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        RealFs.list(dir)
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        RealFs.sync_dir(dir)
    }
}

/// A file system whose `sync` calls do nothing: `fsync = off`. Unsafe across power loss, as in
/// PostgreSQL; for benchmarks only.
pub struct NoSyncFs(pub Arc<dyn FileSystem>);

struct NoSyncFile(Arc<dyn File>);

impl File for NoSyncFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.0.write_at(buf, offset)
    }
    fn sync(&self) -> Result<()> {
        Ok(())
    }
    fn len(&self) -> Result<u64> {
        self.0.len()
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.0.set_len(len)
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        self.0.allocate(offset, len)
    }
}

impl FileSystem for NoSyncFs {
    fn open(&self, path: &Path, create: bool) -> Result<Arc<dyn File>> {
        Ok(Arc::new(NoSyncFile(self.0.open(path, create)?)))
    }
    fn exists(&self, path: &Path) -> bool {
        self.0.exists(path)
    }
    fn remove(&self, path: &Path) -> Result<()> {
        self.0.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.0.rename(from, to)
    }
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        self.0.create_dir_all(path)
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.0.list(dir)
    }
    fn sync_dir(&self, _dir: &Path) -> Result<()> {
        Ok(())
    }
}
