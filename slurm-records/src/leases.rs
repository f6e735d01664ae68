//! Submit leases as locked files (for the SQLite store): `<id>.submit` in a folder beside
//! the database, locked while a process submits the record; the kernel releases the lock
//! when that process dies, however it dies, so no clock is trusted.

use std::fs::{self, File, OpenOptions};
use std::path::PathBuf;

use slurm_core::{Error, JobId, Result, SubmitLease};

/// A folder of lease files.
#[derive(Debug, Clone)]
pub(crate) struct FileLeases {
    dir: PathBuf,
}

impl FileLeases {
    /// Leases in `dir` (made, mode 700, when first needed).
    pub(crate) fn new(dir: PathBuf) -> Self {
        FileLeases { dir }
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

    /// Take the lease of `id` (waits while another process holds it).
    pub(crate) fn take(&self, id: &JobId) -> Result<SubmitLease> {
        let file = self.file(id)?;
        file.lock()
            .map_err(|e| Error::io(format!("locking the submit lease of {id}"), e))?;
        Ok(SubmitLease::holding(file))
    }

    /// Whether the lease of `id` is held (by any process, this one included).
    pub(crate) fn held(&self, id: &JobId) -> Result<bool> {
        let file = self.file(id)?;
        // A shared lock: it fails only while a submitter holds the lease, and two
        // processes asking at once do not take each other for one.
        match file.try_lock_shared() {
            // Free: the lock goes when `file` drops.
            Ok(()) => Ok(false),
            Err(std::fs::TryLockError::WouldBlock) => Ok(true),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(Error::io(format!("checking the submit lease of {id}"), e))
            }
        }
    }
}
