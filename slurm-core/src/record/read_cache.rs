//! The records a [`FileRecordStore`](super::FileRecordStore) has read, kept with the
//! identity of the file each came from, so reading an unchanged record again costs a
//! `stat` instead of a read and a parse (a watch reads every watched record each poll).
//!
//! A record file is never changed in place: every write makes a new file and renames it
//! over the old one. So the file at a record's path holds what was read from it as long
//! as it is the same file: same device, inode, size, modification and change times. An
//! inode number can be reused by a later file, but that file is renamed into place after
//! the read, so its change time is later, unless the clock's coarse ticks make the two
//! equal: a record whose file changed less than [`SETTLED`] before it was read is not
//! kept (it is read again next time).

use std::collections::HashMap;
use std::fs::Metadata;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{JobId, JobRecord};

/// How long ago a file must have changed for its record to be kept.
const SETTLED: Duration = Duration::from_secs(2);

/// The most records kept (a watch of more reads the rest each time).
const CAPACITY: usize = 50_000;

/// What tells one record file from another at the same path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileIdentity {
    dev: u64,
    ino: u64,
    len: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl FileIdentity {
    /// The identity of the file `meta` describes.
    #[cfg(unix)]
    pub(super) fn of(meta: &Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            modified: (meta.mtime(), meta.mtime_nsec()),
            changed: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Without inode numbers and change times a file cannot be told from its
    /// successor: nothing is kept.
    #[cfg(not(unix))]
    pub(super) fn of(_meta: &Metadata) -> Self {
        FileIdentity {
            dev: 0,
            ino: 0,
            len: 0,
            modified: (0, 0),
            changed: (i64::MAX, 0),
        }
    }

    /// Whether the file changed at least `settled` before `now`.
    fn settled_at(&self, now: SystemTime, settled: Duration) -> bool {
        let Ok(now) = now.duration_since(UNIX_EPOCH) else {
            return false;
        };
        let (secs, nanos) = self.changed;
        let Ok(secs) = u64::try_from(secs) else {
            return false;
        };
        let changed = Duration::new(secs, u32::try_from(nanos).unwrap_or(0));
        changed + settled <= now
    }
}

/// Records read, by id, with the identity of their file.
#[derive(Debug)]
pub(super) struct ReadCache {
    entries: Mutex<HashMap<JobId, (FileIdentity, JobRecord)>>,
    settled: Duration,
}

impl Default for ReadCache {
    fn default() -> Self {
        ReadCache {
            entries: Mutex::new(HashMap::new()),
            settled: SETTLED,
        }
    }
}

impl ReadCache {
    /// A cache that keeps records whose file changed at least `settled` ago (tests).
    #[cfg(test)]
    pub(super) fn settled_after(settled: Duration) -> Self {
        ReadCache {
            settled,
            ..ReadCache::default()
        }
    }

    /// The record kept for `id` if its file is still `identity`.
    pub(super) fn get(&self, id: &JobId, identity: &FileIdentity) -> Option<JobRecord> {
        let entries = self.entries.lock().expect("record cache lock");
        match entries.get(id) {
            Some((kept, record)) if kept == identity => Some(record.clone()),
            _ => None,
        }
    }

    /// Keep `record`, read from the file `identity`, if that file has settled.
    pub(super) fn keep(&self, id: &JobId, identity: FileIdentity, record: &JobRecord) {
        let mut entries = self.entries.lock().expect("record cache lock");
        if !identity.settled_at(SystemTime::now(), self.settled) {
            entries.remove(id);
            return;
        }
        if entries.len() >= CAPACITY && !entries.contains_key(id) {
            return;
        }
        entries.insert(id.clone(), (identity, record.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::tests::record;

    fn identity(path: &std::path::Path) -> FileIdentity {
        FileIdentity::of(&std::fs::metadata(path).unwrap())
    }

    #[test]
    fn a_record_is_kept_only_while_its_file_is_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        std::fs::write(&path, b"first").unwrap();
        let id = JobId::parse("kept-abcdef").unwrap();
        let cache = ReadCache::settled_after(Duration::ZERO);
        let first = identity(&path);
        let kept = record(id.clone());
        cache.keep(&id, first, &kept);
        assert_eq!(cache.get(&id, &first), Some(kept));
        // Replaced as the store replaces a record: a new file renamed over the old one,
        // even with the same length.
        let tmp = dir.path().join(".tmp");
        std::fs::write(&tmp, b"secnd").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        let second = identity(&path);
        assert_ne!(first, second);
        assert_eq!(cache.get(&id, &second), None, "a new file is read again");
    }

    #[test]
    fn a_file_that_changed_just_now_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.json");
        std::fs::write(&path, b"fresh").unwrap();
        let id = JobId::parse("fresh-abcdef").unwrap();
        let cache = ReadCache::default();
        let now = identity(&path);
        cache.keep(&id, now, &record(id.clone()));
        assert_eq!(
            cache.get(&id, &now),
            None,
            "its successor could share its times"
        );
        assert!(now.settled_at(SystemTime::now() + SETTLED, SETTLED));
    }
}
