//! [`SqliteRecordStore`]: every record in one SQLite database file, embedded (no server),
//! shared safely by the threads and processes of one machine.
//!
//! The database runs in WAL mode (readers never wait for a writer, one writer at a time)
//! with `synchronous=FULL` (a committed change survives a crash and a power cut, as the
//! file store's fsyncs do). Every change is one `BEGIN IMMEDIATE` transaction that reads
//! the record, applies the rule every store keeps ([`JobRecord::apply_mark`],
//! [`JobRecord::apply_update`]) and writes it: SQLite's write lock makes the read and the
//! write one step for every process, so a retry is claimed once. A writer waits up to
//! [`BUSY_WAIT`] for another's transaction. Submit leases are locked files beside the
//! database (`<file>.leases/<id>.submit`): the kernel frees them when their process dies.
//! A listing reads its rows on the caller's thread and parses them on every core
//! (`listing.rs`).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use slurm_core::{
    Error, JobId, JobRecord, LeaseFiles, Listing, Mark, RecordFilter, RecordStore, Result,
    RetryClaim, SecretRegistry, SubmitLease,
};

use crate::cache::ReadCache;
use crate::columns::{
    list_query, read_body, Dialect, Row, Value, LABELS_TABLE, META_TABLE, RECORDS_TABLE,
    REVISION_TABLE, TABLES_VERSION,
};
use crate::listing::{self, list_rows, RowReader, BATCH_ROWS};

/// How long a writer waits for another process's transaction before it gives up.
pub const BUSY_WAIT: Duration = Duration::from_secs(60);

/// The tables, made when missing.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS slurm_run_records (
    id TEXT PRIMARY KEY NOT NULL,
    state TEXT NOT NULL,
    terminal INTEGER NOT NULL,
    submitted_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    version INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS slurm_run_records_by_time ON slurm_run_records (submitted_at, id);
CREATE INDEX IF NOT EXISTS slurm_run_records_by_state ON slurm_run_records (state, submitted_at);
CREATE TABLE IF NOT EXISTS slurm_run_record_labels (
    id TEXT NOT NULL REFERENCES slurm_run_records (id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (id, key)
);
CREATE INDEX IF NOT EXISTS slurm_run_labels_by_value ON slurm_run_record_labels (key, value);
CREATE TABLE IF NOT EXISTS slurm_run_meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS slurm_run_revision (one INTEGER PRIMARY KEY CHECK (one = 1), value INTEGER NOT NULL);
INSERT OR IGNORE INTO slurm_run_revision (one, value) VALUES (1, 0);
CREATE TRIGGER IF NOT EXISTS slurm_run_records_inserted AFTER INSERT ON slurm_run_records
    BEGIN UPDATE slurm_run_revision SET value = value + 1 WHERE one = 1; END;
CREATE TRIGGER IF NOT EXISTS slurm_run_records_updated AFTER UPDATE ON slurm_run_records
    BEGIN UPDATE slurm_run_revision SET value = value + 1 WHERE one = 1; END;
CREATE TRIGGER IF NOT EXISTS slurm_run_records_deleted AFTER DELETE ON slurm_run_records
    BEGIN UPDATE slurm_run_revision SET value = value + 1 WHERE one = 1; END;
";

/// Records in one SQLite database file (see the module's documentation).
#[derive(Debug)]
pub struct SqliteRecordStore {
    path: PathBuf,
    connection: Mutex<Connection>,
    redactor: Option<SecretRegistry>,
    cache: ReadCache,
    leases: LeaseFiles,
}

/// A SQLite failure, naming what was being done and the database.
fn failed(what: &str, path: &Path, error: rusqlite::Error) -> Error {
    Error::io(
        format!("{what} in the record database {}", path.display()),
        std::io::Error::other(error),
    )
}

impl SqliteRecordStore {
    /// The store in database file `path`, made (mode 600, its folder mode 700) with its
    /// tables when missing. A database whose tables a newer slurm-run made is refused.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::DirBuilderExt;
                builder.mode(0o700);
            }
            builder
                .create(dir)
                .map_err(|e| Error::io(format!("creating the folder {}", dir.display()), e))?;
        }
        // Private from the start: SQLite gives its -wal and -shm files the same mode.
        let mut file = std::fs::OpenOptions::new();
        file.create(true).truncate(false).write(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            file.mode(0o600);
        }
        file.open(&path).map_err(|e| {
            Error::io(
                format!("creating the record database {}", path.display()),
                e,
            )
        })?;
        let fail = |what: &str| {
            let path = path.clone();
            let what = what.to_string();
            move |e| failed(&what, &path, e)
        };
        let mut connection = Connection::open(&path).map_err(fail("opening"))?;
        connection
            .busy_timeout(BUSY_WAIT)
            .map_err(fail("setting the busy wait"))?;
        let mode: String = connection
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(fail("turning on WAL"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::config(
                "SLURM_RUN_RECORDS",
                format!(
                    "the record database {} cannot use WAL (journal mode {mode}): put it on a local file system",
                    path.display()
                ),
            ));
        }
        connection
            .pragma_update(None, "synchronous", "FULL")
            .map_err(fail("setting synchronous"))?;
        connection
            .pragma_update(None, "foreign_keys", "ON")
            .map_err(fail("turning on foreign keys"))?;
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(fail("making the tables"))?;
        tx.execute_batch(SCHEMA)
            .map_err(fail("making the tables"))?;
        tx.execute(
            &format!("INSERT OR IGNORE INTO {META_TABLE} (key, value) VALUES ('tables', ?1)"),
            params![TABLES_VERSION.to_string()],
        )
        .map_err(fail("making the tables"))?;
        let version: String = tx
            .query_row(
                &format!("SELECT value FROM {META_TABLE} WHERE key = 'tables'"),
                [],
                |row| row.get(0),
            )
            .map_err(fail("reading the tables' version"))?;
        tx.commit().map_err(fail("making the tables"))?;
        if version.parse::<i64>().unwrap_or(i64::MAX) > TABLES_VERSION {
            return Err(Error::config(
                "SLURM_RUN_RECORDS",
                format!(
                    "the record database {} was made by a newer slurm-run (tables version {version}, this one writes {TABLES_VERSION}); upgrade slurm-run",
                    path.display()
                ),
            ));
        }
        let mut leases = path.clone().into_os_string();
        leases.push(".leases");
        Ok(SqliteRecordStore {
            leases: LeaseFiles::new(PathBuf::from(leases)),
            path,
            connection: Mutex::new(connection),
            redactor: None,
            cache: ReadCache::default(),
        })
    }

    /// Redact transition messages with `registry` before they are written.
    pub fn with_redactor(mut self, registry: SecretRegistry) -> Self {
        self.redactor = Some(registry);
        self
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn connection(&self) -> MutexGuard<'_, Connection> {
        // A panic mid-transaction rolls it back when the transaction drops.
        self.connection.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fail(&self, what: &str) -> impl Fn(rusqlite::Error) -> Error + '_ {
        let what = what.to_string();
        move |e| failed(&what, &self.path, e)
    }

    fn origin(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }

    fn not_found(&self, id: &JobId) -> Error {
        Error::NotFound(format!("job record {id} in {}", self.origin()))
    }

    /// Write `row`'s labels (its old ones replaced).
    fn write_labels(&self, tx: &rusqlite::Transaction<'_>, row: &Row) -> Result<()> {
        tx.execute(
            &format!("DELETE FROM {LABELS_TABLE} WHERE id = ?1"),
            params![row.id],
        )
        .map_err(self.fail("writing labels"))?;
        let mut insert = tx
            .prepare_cached(&format!(
                "INSERT INTO {LABELS_TABLE} (id, key, value) VALUES (?1, ?2, ?3)"
            ))
            .map_err(self.fail("writing labels"))?;
        for (key, value) in &row.labels {
            insert
                .execute(params![row.id, key, value])
                .map_err(self.fail("writing labels"))?;
        }
        Ok(())
    }

    /// Change record `id` in one transaction: `change` gets the record as stored and
    /// answers the record to store (`None`: leave it as it is); the stored record is the
    /// answer.
    fn change(
        &self,
        id: &JobId,
        change: impl FnOnce(&JobRecord) -> Result<Option<JobRecord>>,
    ) -> Result<JobRecord> {
        let mut connection = self.connection();
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.fail("changing a record"))?;
        let changed = self.change_in(&tx, id, change)?;
        tx.commit().map_err(self.fail("writing a record"))?;
        self.cache.keep_written(vec![changed]).remove(0)
    }

    /// [`change`](Self::change) of record `id` within `tx`: the outer error is the
    /// database's (the transaction is then to be given up), the inner one the record's
    /// own (not found, unreadable, or refused by `change`), which leaves `tx` usable.
    /// Beside the record, the version it was written at, when it was (for the read cache,
    /// once the transaction is committed).
    fn change_in(
        &self,
        tx: &rusqlite::Transaction<'_>,
        id: &JobId,
        change: impl FnOnce(&JobRecord) -> Result<Option<JobRecord>>,
    ) -> Result<Result<(JobRecord, Option<i64>)>> {
        let stored: Option<(i64, String)> = tx
            .prepare_cached(&format!(
                "SELECT version, body FROM {RECORDS_TABLE} WHERE id = ?1"
            ))
            .and_then(|mut select| {
                select
                    .query_row(params![id.as_str()], |row| Ok((row.get(0)?, row.get(1)?)))
                    .optional()
            })
            .map_err(self.fail("reading a record"))?;
        let Some((version, body)) = stored else {
            return Ok(Err(self.not_found(id)));
        };
        let decided = self
            .record_of(id.as_str(), version, Some(&body), false)
            .and_then(|record| Ok((change(&record)?, record)));
        let (next, record) = match decided {
            Ok((Some(next), record)) => (next, record),
            Ok((None, record)) => return Ok(Ok((record, None))),
            Err(error) => return Ok(Err(error)),
        };
        let row = match Row::of(&next) {
            Ok(row) => row,
            Err(error) => return Ok(Err(error)),
        };
        tx.prepare_cached(&format!(
            "UPDATE {RECORDS_TABLE} SET state = ?2, terminal = ?3, updated_at = ?4, \
             version = version + 1, body = ?5 WHERE id = ?1"
        ))
        .and_then(|mut update| {
            update.execute(params![
                row.id,
                row.state,
                row.terminal,
                row.updated_at,
                row.body
            ])
        })
        .map_err(self.fail("writing a record"))?;
        if next.labels() != record.labels() {
            self.write_labels(tx, &row)?;
        }
        Ok(Ok((next, Some(version + 1))))
    }

    /// The record of a row read at `version`: the one kept when it is that version, else
    /// parsed (and kept when `keep`).
    fn record_of(
        &self,
        id: &str,
        version: i64,
        body: Option<&str>,
        keep: bool,
    ) -> Result<JobRecord> {
        if let Some(record) = self.cache.get(id, version) {
            return Ok(record);
        }
        let body = body.ok_or_else(|| Error::NotFound(format!("job record {id}")))?;
        let record = read_body(id, body.as_bytes(), &self.origin())?;
        if keep {
            self.cache.keep(id, version, &record);
        }
        Ok(record)
    }

    /// [`list_readable`](RecordStore::list_readable), the bodies parsed on up to
    /// `parsers` threads while this one reads the rows.
    fn list_on(&self, filter: &RecordFilter, parsers: usize) -> Result<Listing> {
        let query = list_query(filter, Dialect::Sqlite);
        let values: Vec<rusqlite::types::Value> = query
            .values
            .into_iter()
            .map(|v| match v {
                Value::Text(t) => rusqlite::types::Value::Text(t),
                Value::Int(i) => rusqlite::types::Value::Integer(i),
            })
            .collect();
        let origin = self.origin();
        let reader = RowReader {
            cache: &self.cache,
            origin: &origin,
            filter,
        };
        let fail = self.fail("listing records");
        let connection = self.connection();
        let mut select = connection.prepare_cached(&query.sql).map_err(&fail)?;
        let mut rows = select
            .query(rusqlite::params_from_iter(values))
            .map_err(&fail)?;
        list_rows(&reader, parsers, |batch| {
            while batch.len() < BATCH_ROWS {
                let Some(row) = rows.next().map_err(&fail)? else {
                    break;
                };
                // The id and body as SQLite holds them, copied once, into the batch.
                let id = row.get_ref(0).and_then(|v| Ok(v.as_str()?));
                let version = row.get(1);
                let body = row.get_ref(2).and_then(|v| Ok(v.as_bytes()?));
                batch.push(
                    id.map_err(&fail)?,
                    version.map_err(&fail)?,
                    body.map_err(&fail)?,
                );
            }
            Ok(())
        })
    }

    /// Open every record of `records` in one transaction, as they are (an import: their
    /// histories are not redacted again): all of them, or none when one fails. An id
    /// that exists already is refused ([`Error::Invalid`] on `id`) and nothing is opened.
    pub fn open_many(&self, records: &[JobRecord]) -> Result<()> {
        let mut connection = self.connection();
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.fail("opening records"))?;
        for record in records {
            let row = Row::of(record)?;
            if !self.insert_in(&tx, &row)? {
                return Err(Error::invalid(
                    "id",
                    format!(
                        "record {} already exists in {}; nothing was opened",
                        record.id(),
                        self.origin()
                    ),
                ));
            }
        }
        tx.commit().map_err(self.fail("opening records"))
    }

    /// Insert `row` in `tx`: `Ok(false)` when its id exists.
    fn insert_in(&self, tx: &rusqlite::Transaction<'_>, row: &Row) -> Result<bool> {
        let added = tx
            .prepare_cached(&format!(
                "INSERT INTO {RECORDS_TABLE} (id, state, terminal, submitted_at, updated_at, version, body) \
                 VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6) ON CONFLICT (id) DO NOTHING"
            ))
            .and_then(|mut insert| {
                insert.execute(params![
                    row.id,
                    row.state,
                    row.terminal,
                    row.submitted_at,
                    row.updated_at,
                    row.body
                ])
            })
            .map_err(self.fail("opening a record"))?;
        if added == 0 {
            return Ok(false);
        }
        self.write_labels(tx, row)?;
        Ok(true)
    }

    /// Store `record` as it is (no redaction): `Ok(false)` when its id exists.
    pub(crate) fn insert(&self, record: &JobRecord) -> Result<bool> {
        let row = Row::of(record)?;
        self.insert_row(&row)
    }

    /// Store `row` as it is: `Ok(false)` when its id exists.
    pub(crate) fn insert_row(&self, row: &Row) -> Result<bool> {
        let mut connection = self.connection();
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.fail("opening a record"))?;
        if !self.insert_in(&tx, row)? {
            return Ok(false);
        }
        tx.commit().map_err(self.fail("opening a record"))?;
        Ok(true)
    }
}

/// The change a mark makes: the record with `mark` applied (`None` when it changes
/// nothing), its messages redacted with `redactor`.
fn marked(
    mark: Mark,
    redactor: Option<&SecretRegistry>,
) -> impl FnOnce(&JobRecord) -> Result<Option<JobRecord>> + '_ {
    move |record| {
        let mut next = record.clone();
        Ok(next.apply_mark(mark, redactor)?.then_some(next))
    }
}

impl RecordStore for SqliteRecordStore {
    fn open(&self, record: &JobRecord) -> Result<()> {
        let mut record = record.clone();
        if let Some(registry) = &self.redactor {
            record.redact_history(registry);
        }
        if self.insert(&record)? {
            Ok(())
        } else {
            Err(Error::invalid(
                "id",
                format!("record {} already exists; mint a new id", record.id()),
            ))
        }
    }

    /// One immediate transaction: the retried record read and its claim written, the
    /// retry's row inserted, committed together (or rolled back together).
    fn open_retry(&self, retry: &JobRecord) -> Result<RetryClaim> {
        let previous = retry.retried_record()?;
        let mut record = retry.clone();
        if let Some(registry) = &self.redactor {
            record.redact_history(registry);
        }
        let row = Row::of(&record)?;
        let mut connection = self.connection();
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.fail("opening a retry"))?;
        let mut taken = None;
        let mut repeated = false;
        let claimed =
            self.change_in(&tx, previous, |stored| match stored.retry_claim(retry)? {
                Ok(claimed) => {
                    repeated = stored.retried_as() == Some(retry.id());
                    Ok((!repeated).then_some(claimed))
                }
                Err(winner) => {
                    taken = Some(winner);
                    Ok(None)
                }
            })??;
        if let Some(winner) = taken {
            return Ok(RetryClaim::Taken(winner)); // rolled back as `tx` drops
        }
        if !self.insert_in(&tx, &row)? {
            return match repeated {
                true => Ok(RetryClaim::Won),
                false => Err(Error::invalid(
                    "id",
                    format!("record {} already exists; mint a new id", retry.id()),
                )),
            };
        }
        tx.commit().map_err(self.fail("opening a retry"))?;
        let _ = self.cache.keep_written(vec![Ok(claimed)]);
        Ok(RetryClaim::Won)
    }

    fn get(&self, id: &JobId) -> Result<JobRecord> {
        let mut records = self.get_many(std::slice::from_ref(id))?;
        Ok(records.remove(0))
    }

    fn get_many(&self, ids: &[JobId]) -> Result<Vec<JobRecord>> {
        // One query for every id: each with the version kept of it (-1: none), as a JSON
        // array of pairs; a row whose version is the one kept comes back without its body.
        let kept = self.cache.versions(ids.iter().map(JobId::as_str));
        let asked: Vec<(&str, i64)> = ids
            .iter()
            .zip(kept)
            .map(|(id, kept)| (id.as_str(), kept.unwrap_or(-1)))
            .collect();
        let asked = serde_json::to_string(&asked).map_err(|e| {
            Error::io(
                "writing the ids asked as JSON".to_string(),
                std::io::Error::other(e),
            )
        })?;
        // One row per id found, in the order asked (`k.key`: the id's place in the array).
        let rows: Vec<(i64, i64, Option<String>)> = {
            let connection = self.connection();
            let mut select = connection
                .prepare_cached(&format!(
                    "SELECT k.key, r.version, CASE WHEN r.version = (k.value ->> 1) THEN NULL ELSE r.body END \
                     FROM json_each(?1) AS k JOIN {RECORDS_TABLE} AS r ON r.id = (k.value ->> 0) \
                     ORDER BY k.key"
                ))
                .map_err(self.fail("reading records"))?;
            let rows = select
                .query_map(params![asked], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                })
                .map_err(self.fail("reading records"))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(self.fail("reading records"))?
        };
        let mut rows = rows.into_iter().peekable();
        ids.iter()
            .enumerate()
            .map(|(place, id)| {
                let (_, version, body) = rows
                    .next_if(|(at, _, _)| usize::try_from(*at) == Ok(place))
                    .ok_or_else(|| self.not_found(id))?;
                self.record_of(id.as_str(), version, body.as_deref(), true)
            })
            .collect()
    }

    fn mark(&self, id: &JobId, mark: Mark) -> Result<JobRecord> {
        self.change(id, marked(mark, self.redactor.as_ref()))
    }

    fn mark_many(&self, marks: Vec<(JobId, Mark)>) -> Result<Vec<Result<JobRecord>>> {
        let redactor = self.redactor.as_ref();
        let mut connection = self.connection();
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.fail("changing records"))?;
        let mut answers = Vec::with_capacity(marks.len());
        for (id, mark) in marks {
            answers.push(self.change_in(&tx, &id, marked(mark, redactor))?);
        }
        tx.commit().map_err(self.fail("writing records"))?;
        Ok(self.cache.keep_written(answers))
    }

    fn update(
        &self,
        id: &JobId,
        change: &mut dyn FnMut(&mut JobRecord) -> Result<()>,
    ) -> Result<JobRecord> {
        self.change(id, |record| record.apply_update(change).map(Some))
    }

    fn list(&self, filter: &RecordFilter) -> Result<Vec<JobRecord>> {
        self.list_readable(filter)?.into_all()
    }

    fn list_readable(&self, filter: &RecordFilter) -> Result<Listing> {
        self.list_on(filter, listing::parsers())
    }

    fn try_submit_lease(&self, id: &JobId) -> Result<Option<SubmitLease>> {
        self.leases.try_take(id)
    }

    fn submit_in_progress(&self, id: &JobId) -> Result<Option<bool>> {
        self.leases.held(id).map(Some)
    }

    fn revision(&self) -> Result<Option<u64>> {
        let revision: i64 = self
            .connection()
            .query_row(
                &format!("SELECT value FROM {REVISION_TABLE} WHERE one = 1"),
                [],
                |row| row.get(0),
            )
            .map_err(self.fail("reading the records' revision"))?;
        Ok(Some(revision as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slurm_core::{JobSpec, JobState, RemotePath, TransitionSource};

    /// A store in a temporary folder holding `count` records `<name>-00000`, ... opened
    /// one after the other.
    fn store_with(
        name: &str,
        count: usize,
    ) -> (SqliteRecordStore, tempfile::TempDir, Vec<JobRecord>) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteRecordStore::open(dir.path().join("records.sqlite")).unwrap();
        let spec = JobSpec::new(name, "true");
        let results = RemotePath::parse("/results").unwrap();
        let records: Vec<JobRecord> = (0..count)
            .map(|i| {
                let id = JobId::parse(&format!("{name}-{i:05}")).unwrap();
                JobRecord::new(id.clone(), &spec, results.join(id.as_str()).unwrap()).unwrap()
            })
            .collect();
        store.open_many(&records).unwrap();
        (store, dir, records)
    }

    #[test]
    fn a_listing_of_many_batches_keeps_the_query_order_on_any_number_of_threads() {
        let count = 3 * BATCH_ROWS + 17;
        let (store, _dir, records) = store_with("listed", count);
        for record in records.iter().step_by(3) {
            let pending = Mark::new(JobState::Pending, TransitionSource::Poll);
            store.mark(record.id(), pending).unwrap();
        }
        // A torn row among them, opened with the one in the middle.
        let mut torn = Row::of(&records[count / 2]).unwrap();
        torn.id = "listed-torn".into();
        torn.body = torn.body[..torn.body.len() / 2].to_string();
        assert!(store.insert_row(&torn).unwrap());
        // The order of the query: oldest first, ties by id.
        let mut order: Vec<(i64, String)> = records
            .iter()
            .map(|r| (Row::of(r).unwrap().submitted_at, r.id().to_string()))
            .chain([(torn.submitted_at, torn.id.clone())])
            .collect();
        order.sort();
        let readable: Vec<&str> = order
            .iter()
            .map(|(_, id)| id.as_str())
            .filter(|id| *id != torn.id)
            .collect();
        let pending: Vec<&str> = readable
            .iter()
            .copied()
            .filter(|id| id["listed-".len()..].parse::<usize>().unwrap() % 3 == 0)
            .collect();
        // One record kept by a read (a listing hands back the record kept).
        let kept = store.get(records[BATCH_ROWS + 1].id()).unwrap();
        for parsers in [1, 2, 3, 8] {
            let listing = store.list_on(&RecordFilter::any(), parsers).unwrap();
            let listed: Vec<&str> = listing.records.iter().map(|r| r.id().as_str()).collect();
            assert_eq!(listed, readable, "{parsers} parsers");
            assert_eq!(listing.unreadable.len(), 1, "{:?}", listing.unreadable);
            let error = &listing.unreadable[0];
            assert_eq!(
                error.kind(),
                slurm_core::ErrorKind::CorruptRecord,
                "{error}"
            );
            assert!(
                error.to_string().contains("listed-torn in sqlite://"),
                "{error}"
            );
            assert!(listing.records.contains(&kept));

            let filter = RecordFilter::any().state(JobState::Pending);
            let listing = store.list_on(&filter, parsers).unwrap();
            let listed: Vec<&str> = listing.records.iter().map(|r| r.id().as_str()).collect();
            assert_eq!(listed, pending, "{parsers} parsers");
        }
    }

    #[test]
    fn a_listing_of_whole_batches_or_none_lists_every_record() {
        for count in [0, 1, BATCH_ROWS - 1, BATCH_ROWS, 2 * BATCH_ROWS] {
            let (store, _dir, _) = store_with("whole", count);
            for parsers in [1, 2] {
                let listing = store.list_on(&RecordFilter::any(), parsers).unwrap();
                assert_eq!(
                    listing.records.len(),
                    count,
                    "{count} records, {parsers} parsers"
                );
                assert!(listing.unreadable.is_empty());
            }
        }
    }
}
