//! Submit leases as locked files, `<id>.submit` in one folder: the file and SQLite stores
//! keep theirs this way. The kernel releases a lock when its process dies, however it
//! dies, so no clock is trusted.

use std::fs::{self, File, OpenOptions};
use std::path::PathBuf;

use super::{JobId, SubmitLease};
use crate::{Error, Result};

/// A folder of submit lease files: a lease is an exclusive lock on its record's file,
/// and asking whether one is held takes a shared lock for a moment.
#[derive(Debug, Clone)]
pub struct LeaseFiles {
    dir: PathBuf,
}

impl LeaseFiles {
    /// Leases in `dir` (made, mode 700, when first needed).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        LeaseFiles { dir: dir.into() }
    }

    /// The lease file of record `id`, opened (created when missing).
    fn file(&self, id: &JobId) -> Result<File> {
        let mut builder = fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        builder.create(&self.dir).map_err(|e| {
            Error::io(
                format!("creating the lease folder {}", self.dir.display()),
                e,
            )
        })?;
        let path = self.dir.join(format!("{id}.submit"));
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(format!("opening submit lease {}", path.display()), e))
    }

    /// Take the lease of `id`, waiting while another process holds it (see
    /// [`RecordStore::submit_lease`](super::RecordStore::submit_lease)).
    pub fn take(&self, id: &JobId) -> Result<SubmitLease> {
        let file = self.file(id)?;
        file.lock()
            .map_err(|e| Error::io(format!("locking the submit lease of {id}"), e))?;
        Ok(SubmitLease::holding(file))
    }

    /// Take the lease of `id` if no one holds it, without waiting: `None` while
    /// another holds it (see
    /// [`RecordStore::try_submit_lease`](super::RecordStore::try_submit_lease)).
    pub fn try_take(&self, id: &JobId) -> Result<Option<SubmitLease>> {
        let file = self.file(id)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(SubmitLease::holding(file))),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(Error::io(format!("locking the submit lease of {id}"), e))
            }
        }
    }

    /// Whether a process (this one included) holds the lease of `id`. A shared lock:
    /// it fails only while a submitter holds the lease, so two processes asking at once
    /// never take each other for one.
    pub fn held(&self, id: &JobId) -> Result<bool> {
        let file = self.file(id)?;
        match file.try_lock_shared() {
            // Free: the shared lock goes when `file` drops.
            Ok(()) => Ok(false),
            Err(std::fs::TryLockError::WouldBlock) => Ok(true),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(Error::io(format!("checking the submit lease of {id}"), e))
            }
        }
    }
}
