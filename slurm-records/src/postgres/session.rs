//! The PostgreSQL store's worker thread and what it does on the server.
//!
//! The `postgres` client runs a Tokio runtime of its own and blocks on it: called on a
//! thread that drives an async runtime (any caller of the `Backend` trait) it would
//! panic, and it would stall that runtime's thread meanwhile. So a store owns one plain
//! thread that owns its connections and runs the jobs callers send it; a caller waits
//! for its answer on a channel, as it would wait for a file's fsync. The thread ends
//! when the store (every sender) is gone, closing its connections.
//!
//! Two connections: one for the records, one that holds the submit leases
//! (session-level advisory locks, which the server releases when the session ends: when
//! the process dies, however it dies). A change of a record is one transaction that
//! holds the row's lock (`SELECT ... FOR UPDATE`) while the caller applies the rule
//! every store keeps, so two replicas never both claim a retry.

use std::sync::mpsc::{self, Receiver, Sender};

use postgres::{Client, Config, Transaction};
use postgres_native_tls::MakeTlsConnector;
use std::collections::HashMap;

use slurm_core::{Error, JobId, JobRecord, Mark, Result, RetryClaim, SecretRegistry};

use crate::columns::{
    read_body, Row, Value, LABELS_TABLE, META_TABLE, RECORDS_TABLE, REVISION_TABLE, TABLES_VERSION,
};

/// The tables, made when missing (under an advisory lock: two processes may start at once).
const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS slurm_run_records (
    id TEXT COLLATE "C" PRIMARY KEY,
    state TEXT NOT NULL,
    terminal SMALLINT NOT NULL,
    submitted_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    version BIGINT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS slurm_run_records_by_time ON slurm_run_records (submitted_at, id);
CREATE INDEX IF NOT EXISTS slurm_run_records_by_state ON slurm_run_records (state, submitted_at);
CREATE TABLE IF NOT EXISTS slurm_run_record_labels (
    id TEXT COLLATE "C" NOT NULL REFERENCES slurm_run_records (id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (id, key)
);
CREATE INDEX IF NOT EXISTS slurm_run_labels_by_value ON slurm_run_record_labels (key, value);
CREATE TABLE IF NOT EXISTS slurm_run_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS slurm_run_revision (one SMALLINT PRIMARY KEY CHECK (one = 1), value BIGINT NOT NULL);
INSERT INTO slurm_run_revision (one, value) VALUES (1, 0) ON CONFLICT (one) DO NOTHING;
CREATE OR REPLACE FUNCTION slurm_run_revise() RETURNS trigger LANGUAGE plpgsql AS $revise$
BEGIN
    UPDATE slurm_run_revision SET value = value + 1 WHERE one = 1;
    RETURN NULL;
END
$revise$;
DO $made$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_trigger
        WHERE tgname = 'slurm_run_records_revise' AND tgrelid = 'slurm_run_records'::regclass
    ) THEN
        CREATE TRIGGER slurm_run_records_revise AFTER INSERT OR UPDATE OR DELETE ON slurm_run_records
            FOR EACH STATEMENT EXECUTE FUNCTION slurm_run_revise();
    END IF;
END
$made$;
"#;

/// The advisory lock that serialises making the tables.
const SCHEMA_LOCK: i64 = 0x534c_524d_5255_4e31; // "SLRMRUN1"

/// A job for the worker thread.
pub(super) type Job = Box<dyn FnOnce(&mut Session) + Send>;

/// A record as a change left it, and the version it was written at (`None`: the change
/// wrote nothing).
pub(super) type Written = (JobRecord, Option<i64>);

/// The worker's connections to the server.
pub(super) struct Session {
    config: Config,
    tls: MakeTlsConnector,
    /// What the store is called in messages (the URL without its password).
    pub(super) target: String,
    records: Option<Client>,
    leases: Option<Client>,
    /// Leases held on `leases` (an id's key may be held more than once).
    held: usize,
}

/// A failure of the server or the connection, naming what was being done.
pub(super) fn failed(what: &str, target: &str, error: postgres::Error) -> Error {
    let io = std::error::Error::source(&error).is_some_and(|s| s.is::<std::io::Error>());
    if error.is_closed() || io {
        Error::Connect {
            host: target.to_string(),
            message: format!("{what}: {error}"),
        }
    } else {
        Error::io(
            format!("{what} in the record database {target}"),
            std::io::Error::other(error),
        )
    }
}

impl Session {
    /// A session (not yet connected) to the server `config` names.
    pub(super) fn new(config: Config, tls: MakeTlsConnector, target: String) -> Self {
        Session {
            config,
            tls,
            target,
            records: None,
            leases: None,
            held: 0,
        }
    }

    fn connect(&self, purpose: &str) -> Result<Client> {
        self.config
            .connect(self.tls.clone())
            .map_err(|e| failed(&format!("connecting ({purpose})"), &self.target, e))
    }

    /// The records connection (made again after it was lost).
    pub(super) fn records(&mut self) -> Result<&mut Client> {
        if self.records.as_ref().is_none_or(Client::is_closed) {
            self.records = Some(self.connect("records")?);
        }
        Ok(self.records.as_mut().expect("connected"))
    }

    fn fail(&self, what: &str) -> impl Fn(postgres::Error) -> Error + '_ {
        let what = what.to_string();
        move |e| failed(&what, &self.target, e)
    }

    /// Make the tables when missing, and answer the schema they are in (it scopes the
    /// lease keys). A database whose tables a newer slurm-run made is refused.
    pub(super) fn prepare(&mut self) -> Result<String> {
        let target = self.target.clone();
        let target = &target;
        let fail = |what: &'static str| move |e| failed(what, target, e);
        let client = self.records()?;
        let mut tx = client.transaction().map_err(fail("making the tables"))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
            .map_err(fail("making the tables"))?;
        tx.batch_execute(SCHEMA)
            .map_err(fail("making the tables"))?;
        tx.execute(
            &format!("INSERT INTO {META_TABLE} (key, value) VALUES ('tables', $1) ON CONFLICT (key) DO NOTHING"),
            &[&TABLES_VERSION.to_string()],
        )
        .map_err(fail("making the tables"))?;
        let version: String = tx
            .query_one(
                &format!("SELECT value FROM {META_TABLE} WHERE key = 'tables'"),
                &[],
            )
            .map_err(fail("reading the tables' version"))?
            .get(0);
        let schema: String = tx
            .query_one("SELECT current_schema()", &[])
            .map_err(fail("reading the schema"))?
            .get(0);
        tx.commit().map_err(fail("making the tables"))?;
        if version.parse::<i64>().unwrap_or(i64::MAX) > TABLES_VERSION {
            return Err(Error::config(
                "SLURM_RUN_RECORDS",
                format!(
                    "the record database {} was made by a newer slurm-run (tables version {version}, this one writes {TABLES_VERSION}); upgrade slurm-run",
                    self.target
                ),
            ));
        }
        Ok(schema)
    }

    /// Rows `(id, version, body)` of `ids`, the body left out where the version is the
    /// one the caller kept (`kept`, one per id; -1: none).
    pub(super) fn get_many(
        &mut self,
        ids: Vec<String>,
        kept: Vec<i64>,
    ) -> Result<Vec<(String, i64, Option<String>)>> {
        let sql = format!(
            "SELECT r.id, r.version, CASE WHEN r.version = k.kept THEN NULL ELSE r.body END \
             FROM unnest($1::text[], $2::int8[]) AS k (id, kept) JOIN {RECORDS_TABLE} r ON r.id = k.id"
        );
        let rows = {
            let client = self.records()?;
            client.query(&sql, &[&ids, &kept])
        }
        .map_err(self.fail("reading records"))?;
        Ok(rows
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect())
    }

    /// The tables' revision: raised by every statement that writes a record (a trigger),
    /// in the writer's transaction, so it is seen with the records it counts.
    pub(super) fn revision(&mut self) -> Result<i64> {
        let row = {
            let client = self.records()?;
            client.query_one(
                &format!("SELECT value FROM {REVISION_TABLE} WHERE one = 1"),
                &[],
            )
        }
        .map_err(self.fail("reading the records' revision"))?;
        Ok(row.get(0))
    }

    /// Rows `(id, version, body)` of a listing.
    pub(super) fn list(
        &mut self,
        sql: String,
        values: Vec<Value>,
    ) -> Result<Vec<(String, i64, String)>> {
        let params: Vec<Box<dyn postgres::types::ToSql + Sync>> = values
            .into_iter()
            .map(|v| -> Box<dyn postgres::types::ToSql + Sync> {
                match v {
                    Value::Text(t) => Box::new(t),
                    Value::Int(i) => Box::new(i),
                }
            })
            .collect();
        let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
            params.iter().map(|p| p.as_ref()).collect();
        let rows = {
            let client = self.records()?;
            client.query(&sql, &refs)
        }
        .map_err(self.fail("listing records"))?;
        Ok(rows
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect())
    }

    /// Store `rows` as they are, in one transaction; answers, for each, whether it was
    /// new (an existing id is left as it is).
    pub(super) fn insert(&mut self, rows: Vec<Row>) -> Result<Vec<bool>> {
        let target = self.target.clone();
        let fail = |e| failed("opening a record", &target, e);
        let client = self.records()?;
        let mut tx = client.transaction().map_err(fail)?;
        let insert = tx
            .prepare(&format!(
                "INSERT INTO {RECORDS_TABLE} (id, state, terminal, submitted_at, updated_at, version, body) \
                 VALUES ($1, $2, $3, $4, $5, 1, $6) ON CONFLICT (id) DO NOTHING"
            ))
            .map_err(fail)?;
        let mut added = Vec::with_capacity(rows.len());
        for row in &rows {
            let new = tx
                .execute(
                    &insert,
                    &[
                        &row.id,
                        &row.state,
                        &i16::from(row.terminal),
                        &row.submitted_at,
                        &row.updated_at,
                        &row.body,
                    ],
                )
                .map_err(fail)?
                == 1;
            if new {
                write_labels(&mut tx, row).map_err(fail)?;
            }
            added.push(new);
        }
        tx.commit().map_err(fail)?;
        Ok(added)
    }

    /// Change record `id` in one transaction holding its row's lock: its body goes to
    /// `body` (`None`: no such record), the row to store (or none) comes back on
    /// `decision` with whether its labels changed, and how it went on `done`.
    pub(super) fn change(
        &mut self,
        id: String,
        body: Sender<Result<Option<String>>>,
        decision: Receiver<Option<(Row, bool)>>,
        done: Sender<Result<()>>,
    ) {
        let target = self.target.clone();
        let fail = |what: &'static str| {
            let target = target.clone();
            move |e| failed(what, &target, e)
        };
        let client = match self.records() {
            Ok(client) => client,
            Err(error) => {
                let _ = body.send(Err(error));
                return;
            }
        };
        let mut tx = match client.transaction().map_err(fail("changing a record")) {
            Ok(tx) => tx,
            Err(error) => {
                let _ = body.send(Err(error));
                return;
            }
        };
        let stored = tx
            .query_opt(
                &format!("SELECT body FROM {RECORDS_TABLE} WHERE id = $1 FOR UPDATE"),
                &[&id],
            )
            .map_err(fail("reading a record"))
            .map(|row| row.map(|row| row.get::<_, String>(0)));
        let found = matches!(stored, Ok(Some(_)));
        if body.send(stored).is_err() || !found {
            return; // rolled back as `tx` drops
        }
        let Ok(Some((row, labels_changed))) = decision.recv() else {
            return; // nothing to store, or the caller is gone: rolled back
        };
        let written = (|| {
            update_row(&mut tx, &row, labels_changed)?;
            tx.commit()
        })()
        .map_err(fail("writing a record"));
        let _ = done.send(written);
    }

    /// Open `retry` (its row `row`) and claim the retry of the record it retries, in one
    /// transaction holding the retried record's row lock (see
    /// [`RecordStore::open_retry`](slurm_core::RecordStore::open_retry)); beside a won
    /// claim, the retried record as written and its version, when it was written.
    pub(super) fn open_retry(
        &mut self,
        retry: JobRecord,
        row: Row,
    ) -> Result<(RetryClaim, Option<Written>)> {
        let target = self.target.clone();
        let fail = |what: &'static str| {
            let target = target.clone();
            move |e| failed(what, &target, e)
        };
        let previous = retry.retried_record()?.to_string();
        let client = self.records()?;
        let mut tx = client.transaction().map_err(fail("opening a retry"))?;
        let Some(stored) = tx
            .query_opt(
                &format!("SELECT version, body FROM {RECORDS_TABLE} WHERE id = $1 FOR UPDATE"),
                &[&previous],
            )
            .map_err(fail("reading a record"))?
        else {
            return Err(Error::NotFound(format!(
                "job record {previous} in {target}"
            )));
        };
        let (version, body): (i64, String) = (stored.get(0), stored.get(1));
        let stored = read_body(&previous, body.as_bytes(), &target)?;
        let claimed = match stored.retry_claim(&retry)? {
            Ok(claimed) => claimed,
            Err(winner) => return Ok((RetryClaim::Taken(winner), None)),
        };
        let repeated = stored.retried_as() == Some(retry.id());
        let insert = format!(
            "INSERT INTO {RECORDS_TABLE} (id, state, terminal, submitted_at, updated_at, version, body) \
             VALUES ($1, $2, $3, $4, $5, 1, $6) ON CONFLICT (id) DO NOTHING"
        );
        let new = tx
            .execute(
                &insert,
                &[
                    &row.id,
                    &row.state,
                    &i16::from(row.terminal),
                    &row.submitted_at,
                    &row.updated_at,
                    &row.body,
                ],
            )
            .map_err(fail("opening a retry"))?
            == 1;
        if !new {
            return match repeated {
                true => Ok((RetryClaim::Won, None)),
                false => Err(Error::invalid(
                    "id",
                    format!("record {} already exists; mint a new id", retry.id()),
                )),
            };
        }
        write_labels(&mut tx, &row).map_err(fail("opening a retry"))?;
        let written = match repeated {
            true => None,
            false => {
                let claimed_row = Row::of(&claimed)?;
                update_row(&mut tx, &claimed_row, false).map_err(fail("claiming a retry"))?;
                Some((claimed, Some(version + 1)))
            }
        };
        tx.commit().map_err(fail("opening a retry"))?;
        Ok((RetryClaim::Won, written))
    }

    /// Apply every mark of `marks` in one transaction (see
    /// [`RecordStore::mark_many`](slurm_core::RecordStore::mark_many)): the rows are
    /// locked together, in the order of their ids (two replicas marking the same jobs
    /// lock them in the same order, so neither waits on the other forever), each mark
    /// applied to its record as stored, and every change committed at once. Beside each
    /// record, the version it was written at, when it was.
    pub(super) fn mark_many(
        &mut self,
        marks: Vec<(JobId, Mark)>,
        redactor: Option<&SecretRegistry>,
    ) -> Result<Vec<Result<Written>>> {
        let target = self.target.clone();
        let fail = |what: &'static str| {
            let target = target.clone();
            move |e| failed(what, &target, e)
        };
        let client = self.records()?;
        let mut tx = client.transaction().map_err(fail("changing records"))?;
        let ids: Vec<&str> = marks.iter().map(|(id, _)| id.as_str()).collect();
        let mut stored: HashMap<String, (i64, String)> = tx
            .query(
                &format!(
                    "SELECT id, version, body FROM {RECORDS_TABLE} WHERE id = ANY($1) \
                     ORDER BY id FOR UPDATE"
                ),
                &[&ids],
            )
            .map_err(fail("reading records"))?
            .into_iter()
            .map(|row| (row.get(0), (row.get(1), row.get(2))))
            .collect();
        let mut answers = Vec::with_capacity(marks.len());
        for (id, mark) in marks {
            let Some((version, body)) = stored.get(id.as_str()) else {
                answers.push(Err(Error::NotFound(format!("job record {id} in {target}"))));
                continue;
            };
            let version = *version;
            let mut next = match read_body(id.as_str(), body.as_bytes(), &target) {
                Ok(record) => record,
                Err(error) => {
                    answers.push(Err(error));
                    continue;
                }
            };
            let labels = next.labels().clone();
            match next.apply_mark(mark, redactor) {
                Ok(true) => {}
                Ok(false) => {
                    answers.push(Ok((next, None)));
                    continue;
                }
                Err(error) => {
                    answers.push(Err(error));
                    continue;
                }
            }
            let row = match Row::of(&next) {
                Ok(row) => row,
                Err(error) => {
                    answers.push(Err(error));
                    continue;
                }
            };
            update_row(&mut tx, &row, &labels != next.labels()).map_err(fail("writing records"))?;
            // A later mark of the same job in this call sees this one.
            stored.insert(row.id.clone(), (version + 1, row.body));
            answers.push(Ok((next, Some(version + 1))));
        }
        tx.commit().map_err(fail("writing records"))?;
        Ok(answers)
    }

    /// The leases connection (made again after it was lost: the leases it held went
    /// with it, as when a process dies).
    fn leases(&mut self) -> Result<&mut Client> {
        if self.leases.as_ref().is_none_or(Client::is_closed) {
            if self.held > 0 {
                tracing::warn!(
                    target = %self.target,
                    held = self.held,
                    "the connection holding submit leases was lost; they are free now"
                );
                self.held = 0;
            }
            self.leases = Some(self.connect("submit leases")?);
        }
        Ok(self.leases.as_mut().expect("connected"))
    }

    /// Take the lease `key` if it is free (or held by this process already).
    pub(super) fn try_lease(&mut self, key: i64) -> Result<bool> {
        let taken: bool = {
            let client = self.leases()?;
            client.query_one("SELECT pg_try_advisory_lock($1)", &[&key])
        }
        .map_err(self.fail("taking a submit lease"))?
        .get(0);
        if taken {
            self.held += 1;
        }
        Ok(taken)
    }

    /// Give back one hold of the lease `key`.
    pub(super) fn release_lease(&mut self, key: i64) {
        if let Some(client) = self.leases.as_mut().filter(|c| !c.is_closed()) {
            if client
                .execute("SELECT pg_advisory_unlock($1)", &[&key])
                .is_ok()
            {
                self.held = self.held.saturating_sub(1);
            }
        }
    }

    /// Whether the lease `key` is held by any session (this process's leases included:
    /// they are held by the other connection).
    pub(super) fn lease_held(&mut self, key: i64) -> Result<bool> {
        let target = self.target.clone();
        let fail = |e| failed("checking a submit lease", &target, e);
        let client = self.records()?;
        // A shared lock: it fails only while a submitter holds the lease (exclusive),
        // and two replicas asking at once do not take each other for one.
        let free: bool = client
            .query_one("SELECT pg_try_advisory_lock_shared($1)", &[&key])
            .map_err(fail)?
            .get(0);
        if free {
            client
                .execute("SELECT pg_advisory_unlock_shared($1)", &[&key])
                .map_err(fail)?;
        }
        Ok(!free)
    }
}

/// Write `row`'s labels (its old ones replaced).
/// Write `row` over its record (its version raised), and its labels when they changed.
fn update_row(
    tx: &mut Transaction<'_>,
    row: &Row,
    labels_changed: bool,
) -> std::result::Result<(), postgres::Error> {
    tx.execute(
        &format!(
            "UPDATE {RECORDS_TABLE} SET state = $2, terminal = $3, updated_at = $4, \
             version = version + 1, body = $5 WHERE id = $1"
        ),
        &[
            &row.id,
            &row.state,
            &i16::from(row.terminal),
            &row.updated_at,
            &row.body,
        ],
    )?;
    if labels_changed {
        write_labels(tx, row)?;
    }
    Ok(())
}

fn write_labels(tx: &mut Transaction<'_>, row: &Row) -> std::result::Result<(), postgres::Error> {
    tx.execute(
        &format!("DELETE FROM {LABELS_TABLE} WHERE id = $1"),
        &[&row.id],
    )?;
    for (key, value) in &row.labels {
        tx.execute(
            &format!("INSERT INTO {LABELS_TABLE} (id, key, value) VALUES ($1, $2, $3)"),
            &[&row.id, key, value],
        )?;
    }
    Ok(())
}

/// Start the worker thread of a store: it runs each job sent on the answer's sender, in
/// order, until every sender is gone.
pub(super) fn start(mut session: Session) -> Result<Sender<Job>> {
    let (jobs, queue) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("slurm-run-postgres".into())
        .spawn(move || {
            for job in queue {
                job(&mut session);
            }
        })
        .map_err(|e| Error::io("starting the PostgreSQL store's thread", e))?;
    Ok(jobs)
}
