//! `FileRecordStore`: one JSON file per record, written atomically under a per-record lock.
//!
//! Layout of the folder: `<id>.json` (the record), `<id>.lock` (an empty file
//! locked with `File::lock` while a process changes the record), `<id>.submit` (an
//! empty file locked while a process submits the record: its submit lease, released by
//! the kernel when that process dies), and transient
//! `.tmp-*.partial` files (a write in progress, or one a crash interrupted;
//! never read).
//!
//! A write goes to a temporary file in the same folder, is fsynced, renamed over
//! `<id>.json` and the folder is fsynced, so a reader sees the old record or the
//! new one, never half of one, even when the writer is killed mid-write. A new
//! record is linked into place without replacing anything (create-exclusive).
//!
//! `get` keeps what it read with the identity of the file it came from, so an unchanged
//! record is not read and parsed again (see `read_cache.rs`); `list` does the same for
//! every file, and `list_readable` leaves out (and names) the files it cannot read.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::read_cache::{FileIdentity, ReadCache};
use crate::record::{
    JobId, JobRecord, LeaseFiles, Listing, Mark, RecordFilter, RecordStore, RetryClaim, SubmitLease,
};
use crate::redact::SecretRegistry;
use crate::{Error, Result};

/// The prefix of temporary files (ignored when loading).
const TEMP_PREFIX: &str = ".tmp-";

/// The folder (inside the record folder) of records moved out by
/// [`FileRecordStore::move_out`].
const MOVED_DIR: &str = "moved";

/// Records as JSON files in one folder, shared safely by threads and processes.
#[derive(Debug, Clone)]
pub struct FileRecordStore {
    dir: PathBuf,
    redactor: Option<SecretRegistry>,
    /// Records `get` read, shared by the clones of this store.
    cache: Arc<ReadCache>,
    /// The submit leases: `<id>.submit` beside the records.
    leases: LeaseFiles,
}

impl FileRecordStore {
    /// A store in `dir`, created (mode 700 on Unix) if missing.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        let mut builder = fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        builder
            .create(&dir)
            .map_err(|e| Error::io(format!("creating the record folder {}", dir.display()), e))?;
        Ok(FileRecordStore {
            leases: LeaseFiles::new(dir.clone()),
            dir,
            redactor: None,
            cache: Arc::new(ReadCache::default()),
        })
    }

    /// A store whose `get` keeps records whose file changed at least `settled` ago
    /// (tests of the read cache).
    #[cfg(test)]
    fn with_read_cache_settled(mut self, settled: std::time::Duration) -> Self {
        self.cache = Arc::new(ReadCache::settled_after(settled));
        self
    }

    /// Redact transition messages with `registry` before they are written.
    pub fn with_redactor(mut self, registry: SecretRegistry) -> Self {
        self.redactor = Some(registry);
        self
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of record `id`.
    pub(crate) fn record_path(&self, id: &JobId) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Take the exclusive lock of record `id` (released when the file drops).
    fn lock(&self, id: &JobId) -> Result<File> {
        let path = self.dir.join(format!("{id}.lock"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(format!("opening lock {}", path.display()), e))?;
        file.lock()
            .map_err(|e| Error::io(format!("locking {}", path.display()), e))?;
        Ok(file)
    }

    /// Write `record` atomically; with `exclusive`, fail if it exists.
    fn write(&self, record: &JobRecord, exclusive: bool) -> Result<()> {
        let target = self.record_path(&record.id);
        let ctx = |what: &str| format!("{what} record {}", target.display());
        let tmp = tempfile::Builder::new()
            .prefix(TEMP_PREFIX)
            .suffix(".partial")
            .tempfile_in(&self.dir)
            .map_err(|e| Error::io(ctx("creating a temporary file for"), e))?;
        {
            let mut out = BufWriter::new(tmp.as_file());
            serde_json::to_writer_pretty(&mut out, record)
                .map_err(|e| Error::io(ctx("writing"), e.into()))?;
            out.flush().map_err(|e| Error::io(ctx("writing"), e))?;
        }
        tmp.as_file()
            .sync_all()
            .map_err(|e| Error::io(ctx("writing"), e))?;
        if exclusive {
            tmp.persist_noclobber(&target).map_err(|e| {
                if e.error.kind() == std::io::ErrorKind::AlreadyExists {
                    Error::invalid(
                        "id",
                        format!("record {} already exists; mint a new id", record.id),
                    )
                } else {
                    Error::io(ctx("storing"), e.error)
                }
            })?;
        } else {
            tmp.persist(&target)
                .map_err(|e| Error::io(ctx("storing"), e.error))?;
        }
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io(format!("syncing the folder {}", self.dir.display()), e))
    }

    /// Read one record file, and the identity of the file it came from.
    fn read(&self, id: &JobId) -> Result<(JobRecord, FileIdentity)> {
        let path = self.record_path(id);
        let opened = File::open(&path).and_then(|mut file| {
            let identity = FileIdentity::of(&file.metadata()?);
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)?;
            Ok((bytes, identity))
        });
        let (bytes, identity) = match opened {
            Ok(read) => read,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotFound(format!(
                    "job record {id} in {}",
                    self.dir.display()
                )))
            }
            Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
        };
        let record = JobRecord::from_stored_json(&bytes, &path.display().to_string())?;
        if &record.id != id {
            return Err(Error::CorruptRecord {
                path: path.display().to_string(),
                message: format!("holds id {} instead of {id}", record.id),
            });
        }
        Ok((record, identity))
    }

    /// Record `id` as its file holds it now: kept from an earlier read while the file is
    /// the same one, else read (and kept).
    fn read_kept(&self, id: &JobId) -> Result<JobRecord> {
        if let Ok(meta) = fs::metadata(self.record_path(id)) {
            if let Some(record) = self.cache.get(id, &FileIdentity::of(&meta)) {
                return Ok(record);
            }
        }
        let (record, identity) = self.read(id)?;
        self.cache.keep(id, identity, &record);
        Ok(record)
    }

    /// Move record `id` out of the folder once `keep` has stored it elsewhere: under the
    /// record's lock (no other process changes it meanwhile), `keep` gets the record as
    /// its file holds it; when `keep` succeeds the file is moved to `moved/<id>.json`
    /// beside the others (kept, not deleted), so the folder no longer lists it. When
    /// `keep` fails the record stays where it was, and its error is the answer.
    pub fn move_out(&self, id: &JobId, keep: impl FnOnce(&JobRecord) -> Result<()>) -> Result<()> {
        let _lock = self.lock(id)?;
        let (record, _) = self.read(id)?;
        keep(&record)?;
        let moved = self.dir.join(MOVED_DIR);
        fs::create_dir_all(&moved)
            .map_err(|e| Error::io(format!("creating {}", moved.display()), e))?;
        let to = moved.join(format!("{id}.json"));
        fs::rename(self.record_path(id), &to)
            .map_err(|e| Error::io(format!("moving record {id} to {}", to.display()), e))?;
        for dir in [&self.dir, &moved] {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| Error::io(format!("syncing the folder {}", dir.display()), e))?;
        }
        Ok(())
    }

    /// The ids of every record file in the folder (temporary and lock files skipped).
    pub(crate) fn ids(&self) -> Result<Vec<JobId>> {
        let entries = fs::read_dir(&self.dir)
            .map_err(|e| Error::io(format!("listing {}", self.dir.display()), e))?;
        let mut ids = Vec::new();
        for entry in entries {
            let entry =
                entry.map_err(|e| Error::io(format!("listing {}", self.dir.display()), e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') {
                continue;
            }
            if let Some(stem) = name.strip_suffix(".json") {
                if let Ok(id) = JobId::parse(stem) {
                    ids.push(id);
                }
            }
        }
        ids.sort();
        Ok(ids)
    }
}

/// The most threads `mark_many` of a [`FileRecordStore`] marks on.
const MARKING_THREADS: usize = 4;

impl RecordStore for FileRecordStore {
    fn open(&self, record: &JobRecord) -> Result<()> {
        let _lock = self.lock(&record.id)?;
        let mut record = record.clone();
        if let Some(r) = &self.redactor {
            record.redact_history(r);
        }
        self.write(&record, true)
    }

    /// Under the retried record's lock, held from its read to its write: the retry's
    /// file is linked into place first, then the retried record's claim written. A
    /// crash between the two leaves the retry opened and unclaimed, never a claim of a
    /// record that does not exist; it was never sent to the scheduler (the claim comes
    /// first), so the settle of a SUBMITTING record without a submitter ends it
    /// NOT_SUBMITTED, and the next retry claims afresh.
    fn open_retry(&self, retry: &JobRecord) -> Result<RetryClaim> {
        let previous = retry.retried_record()?;
        let _lock = self.lock(previous)?;
        let (stored, _) = self.read(previous)?;
        let claimed = match stored.retry_claim(retry)? {
            Ok(claimed) => claimed,
            Err(winner) => return Ok(RetryClaim::Taken(winner)),
        };
        if stored.retried_as.as_ref() == Some(&retry.id) && self.record_path(&retry.id).exists() {
            return Ok(RetryClaim::Won);
        }
        self.open(retry)?;
        self.write(&claimed, false)?;
        Ok(RetryClaim::Won)
    }

    fn get(&self, id: &JobId) -> Result<JobRecord> {
        self.read_kept(id)
    }

    fn mark(&self, id: &JobId, mark: Mark) -> Result<JobRecord> {
        let _lock = self.lock(id)?;
        let (mut record, _) = self.read(id)?;
        if record.apply_mark(mark, self.redactor.as_ref())? {
            self.write(&record, false)?;
        }
        Ok(record)
    }

    /// Each record is its own file, written and fsynced on its own: the marks are
    /// applied on up to four threads, so their waits for the disk overlap
    /// (the marks of one job stay in their order, on one thread).
    fn mark_many(&self, marks: Vec<(JobId, Mark)>) -> Result<Vec<Result<JobRecord>>> {
        let threads = MARKING_THREADS.min(marks.len());
        if threads <= 1 {
            return Ok(marks
                .into_iter()
                .map(|(id, mark)| self.mark(&id, mark))
                .collect());
        }
        let count = marks.len();
        // A job's marks go to the thread its id hashes to.
        let mut shares: Vec<Vec<(usize, JobId, Mark)>> = (0..threads).map(|_| Vec::new()).collect();
        for (index, (id, mark)) in marks.into_iter().enumerate() {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            std::hash::Hash::hash(&id, &mut hasher);
            let share = (std::hash::Hasher::finish(&hasher) % threads as u64) as usize;
            shares[share].push((index, id, mark));
        }
        let mut answers: Vec<Option<Result<JobRecord>>> = (0..count).map(|_| None).collect();
        std::thread::scope(|scope| {
            let handles: Vec<_> = shares
                .into_iter()
                .map(|share| {
                    scope.spawn(move || {
                        share
                            .into_iter()
                            .map(|(index, id, mark)| (index, self.mark(&id, mark)))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for handle in handles {
                for (index, answer) in handle.join().expect("a marking thread") {
                    answers[index] = Some(answer);
                }
            }
        });
        Ok(answers
            .into_iter()
            .map(|a| a.expect("every mark answered"))
            .collect())
    }

    fn update(
        &self,
        id: &JobId,
        change: &mut dyn FnMut(&mut JobRecord) -> Result<()>,
    ) -> Result<JobRecord> {
        let _lock = self.lock(id)?;
        let (record, _) = self.read(id)?;
        let next = record.apply_update(change)?;
        self.write(&next, false)?;
        Ok(next)
    }

    fn list(&self, filter: &RecordFilter) -> Result<Vec<JobRecord>> {
        self.list_readable(filter)?.into_all()
    }

    fn list_readable(&self, filter: &RecordFilter) -> Result<Listing> {
        let mut listing = Listing::default();
        for id in self.ids()? {
            // An unchanged file is not read again (a stat instead, as `get`).
            match self.read_kept(&id) {
                Ok(r) if filter.matches(&r) => listing.records.push(r),
                Ok(_) => {}
                // Removed between listing and reading.
                Err(Error::NotFound(_)) => {}
                Err(e) => listing.unreadable.push(e),
            }
        }
        listing
            .records
            .sort_by(|a, b| (a.submitted_at, &a.id).cmp(&(b.submitted_at, &b.id)));
        Ok(listing)
    }

    fn try_submit_lease(&self, id: &JobId) -> Result<Option<SubmitLease>> {
        self.leases.try_take(id)
    }

    fn submit_in_progress(&self, id: &JobId) -> Result<Option<bool>> {
        self.leases.held(id).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::tests::record;
    use crate::record::TransitionSource;
    use crate::state::JobState;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    /// Set in the child process of the crash test: the folder it keeps writing to.
    const CRASH_DIR_ENV: &str = "SLURM_CORE_RECORD_CRASH_DIR";
    const CRASH_IDS: [&str; 3] = ["crash-aaaaaa", "crash-bbbbbb", "crash-cccccc"];
    const PAYLOAD_LEN: usize = 256 * 1024;

    fn counter(r: &JobRecord) -> u64 {
        r.labels
            .get("counter")
            .and_then(|c| c.parse().ok())
            .unwrap_or(0)
    }

    /// The child's loop: rewrite big records forever, until killed.
    fn crash_child(dir: &Path) -> ! {
        let store = FileRecordStore::new(dir).unwrap();
        let mut n: u64 = 0;
        loop {
            n += 1;
            for id in CRASH_IDS {
                let id = JobId::parse(id).unwrap();
                let updated = store
                    .update(&id, &mut |r| {
                        let c = counter(r) + 1;
                        let ch = char::from(b'a' + (c % 26) as u8);
                        r.labels.insert("counter".into(), c.to_string());
                        r.labels
                            .insert("payload".into(), ch.to_string().repeat(PAYLOAD_LEN));
                        r.labels
                            .insert("payload_len".into(), PAYLOAD_LEN.to_string());
                        Ok(())
                    })
                    .unwrap();
                let next = if updated.state == JobState::Running {
                    JobState::Pending
                } else {
                    JobState::Running
                };
                store
                    .mark(&id, Mark::new(next, TransitionSource::Poll))
                    .unwrap();
            }
            if n.is_multiple_of(5) {
                let fresh = record(JobId::mint("crash-new"));
                store.open(&fresh).unwrap();
            }
        }
    }

    fn check_whole(store: &FileRecordStore) -> usize {
        let ids = store.ids().unwrap();
        for id in &ids {
            let r = store
                .get(id)
                .unwrap_or_else(|e| panic!("record {id} did not load whole: {e}"));
            if let Some(p) = r.labels.get("payload") {
                let len: usize = r.labels["payload_len"].parse().unwrap();
                assert_eq!(p.len(), len, "{id}");
                let first = p.chars().next().unwrap();
                assert!(p.chars().all(|c| c == first), "{id}: mixed payload");
            }
        }
        assert_eq!(store.list(&RecordFilter::any()).unwrap().len(), ids.len());
        ids.len()
    }

    #[test]
    fn sigkill_mid_write_leaves_every_record_whole() {
        if let Ok(dir) = std::env::var(CRASH_DIR_ENV) {
            crash_child(Path::new(&dir));
        }
        let tmp = tempfile::tempdir().unwrap();
        let store = FileRecordStore::new(tmp.path()).unwrap();
        for id in CRASH_IDS {
            store.open(&record(JobId::parse(id).unwrap())).unwrap();
        }
        let test_name = format!(
            "{}::sigkill_mid_write_leaves_every_record_whole",
            module_path!().split_once("::").unwrap().1
        );
        let exe = std::env::current_exe().unwrap();
        let log = tmp.path().join(".child-stderr");
        let first = JobId::parse(CRASH_IDS[0]).unwrap();
        const ROUNDS: u64 = 50;
        for round in 0..ROUNDS {
            let before = counter(&store.get(&first).unwrap());
            let mut child = Command::new(&exe)
                .args([
                    test_name.as_str(),
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CRASH_DIR_ENV, tmp.path())
                .stdout(Stdio::null())
                .stderr(File::create(&log).unwrap())
                .spawn()
                .unwrap();
            // Wait until the child has written at least once, then kill it at a
            // moment that varies from round to round.
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if counter(&store.get(&first).unwrap()) > before {
                    break;
                }
                if let Some(status) = child.try_wait().unwrap() {
                    panic!(
                        "crash child exited ({status}) in round {round}: {}",
                        fs::read_to_string(&log).unwrap_or_default()
                    );
                }
                assert!(
                    Instant::now() < deadline,
                    "crash child made no progress in 30 s"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_micros(round * 397 % 5000));
            child.kill().unwrap(); // SIGKILL on Unix
            child.wait().unwrap();
            check_whole(&store);
        }
        let strays = fs::read_dir(tmp.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with(TEMP_PREFIX)
            })
            .count();
        eprintln!("crash test: {strays} kills of {ROUNDS} landed mid-write");
        // Temporary files left behind prove kills landed mid-write.
        assert!(strays > 0, "no kill landed mid-write in {ROUNDS} rounds");
        let n = check_whole(&store);
        assert!(n >= CRASH_IDS.len());
        assert!(counter(&store.get(&first).unwrap()) >= ROUNDS);
    }

    /// A record folder for the RecordStore conformance suite; other processes open the
    /// same folder.
    struct Folder(Arc<FileRecordStore>, tempfile::TempDir);

    impl crate::testing::record_suite::RecordStoreFixture for Folder {
        fn store(&self) -> Arc<dyn RecordStore> {
            self.0.clone()
        }
        fn shared(&self) -> Option<String> {
            Some(self.1.path().display().to_string())
        }
        fn open_shared(shared: &str) -> Result<Box<dyn RecordStore>> {
            Ok(Box::new(FileRecordStore::new(shared)?))
        }
        fn plant(&self, id: &JobId, planted: crate::testing::record_suite::Planted<'_>) -> bool {
            fs::write(self.0.record_path(id), planted.bytes()).unwrap();
            true
        }
    }

    fn folder() -> Folder {
        let dir = tempfile::tempdir().unwrap();
        let store = FileRecordStore::new(dir.path())
            .unwrap()
            .with_redactor(crate::testing::record_suite::suite_redactor());
        Folder(Arc::new(store), dir)
    }

    crate::record_store_conformance!(conformance, folder());

    #[test]
    fn open_is_create_exclusive_and_get_reports_missing() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FileRecordStore::new(tmp.path().join("nested/records")).unwrap();
        let r = record(JobId::parse("one-abcdef").unwrap());
        store.open(&r).unwrap();
        let err = store.open(&r).unwrap_err();
        assert!(err.to_string().contains("already exists"), "{err}");
        assert_eq!(store.get(&r.id).unwrap(), r);
        let missing = store.get(&JobId::parse("two-abcdef").unwrap()).unwrap_err();
        assert_eq!(missing.kind(), crate::ErrorKind::NotFound);
        // Stray temporaries and foreign files are ignored.
        fs::write(
            tmp.path().join("nested/records/.tmp-zzz.partial"),
            b"{\"half",
        )
        .unwrap();
        fs::write(tmp.path().join("nested/records/notes.txt"), b"x").unwrap();
        assert_eq!(store.list(&RecordFilter::any()).unwrap().len(), 1);
        // A corrupt record is an error naming the file, not a silent skip.
        fs::write(
            store.record_path(&JobId::parse("bad-abcdef").unwrap()),
            b"{",
        )
        .unwrap();
        let err = store.list(&RecordFilter::any()).unwrap_err();
        assert!(err.to_string().contains("bad-abcdef.json"), "{err}");
    }

    #[test]
    fn get_sees_every_write_of_another_store_sharing_the_folder() {
        // Another process writes; this store keeps what it read (every read, here), and
        // still sees each new version: the file is a new one each time.
        let tmp = tempfile::tempdir().unwrap();
        let writer = FileRecordStore::new(tmp.path()).unwrap();
        let reader = FileRecordStore::new(tmp.path())
            .unwrap()
            .with_read_cache_settled(std::time::Duration::ZERO);
        let id = JobId::parse("shared-read-abcdef").unwrap();
        writer.open(&record(id.clone())).unwrap();
        assert_eq!(counter(&reader.get(&id).unwrap()), 0);
        for n in 1..=30u64 {
            writer
                .update(&id, &mut |r| {
                    r.labels.insert("counter".into(), n.to_string());
                    Ok(())
                })
                .unwrap();
            assert_eq!(counter(&reader.get(&id).unwrap()), n);
            assert_eq!(
                counter(&reader.get(&id).unwrap()),
                n,
                "kept, still the latest"
            );
        }
        // A record removed is gone, whatever was kept.
        fs::remove_file(reader.record_path(&id)).unwrap();
        assert_eq!(
            reader.get(&id).unwrap_err().kind(),
            crate::ErrorKind::NotFound
        );
    }

    #[test]
    fn threads_marking_one_record_lose_no_update() {
        let tmp = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(FileRecordStore::new(tmp.path()).unwrap());
        let id = JobId::parse("shared-abcdef").unwrap();
        store.open(&record(id.clone())).unwrap();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let store = store.clone();
                let id = id.clone();
                std::thread::spawn(move || {
                    for _ in 0..25 {
                        store
                            .update(&id, &mut |r| {
                                let c = counter(r) + 1;
                                r.labels.insert("counter".into(), c.to_string());
                                Ok(())
                            })
                            .unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(counter(&store.get(&id).unwrap()), 100);
    }
}
